"""sasl.server.max.receive.size: before SASL authentication a client may send only small
requests, so an anonymous peer cannot make the broker buffer socket.request.max.bytes (100 MB)
per connection; once logged in, socket.request.max.bytes applies. PLAINTEXT is unchanged.
Also the ``;``-separated ``--super-users`` and ``--schema-registry-writers`` flags."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kayak.broker.config import BrokerConfig
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.cli.broker import broker as broker_command
from kayak.errors import ConfigError
from kayak.protocol.messages import CreateTopicsRequest, ProduceRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kayak.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from kayak.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from kayak.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from kayak.protocol.records import build_record_batch
from kayak.protocol.sasl import ScramClient
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

MECHANISM = "SCRAM-SHA-256"
USER, PASSWORD = "alice", "alice-secret"
ONE_MB = 1024 * 1024


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    CredentialStore.open(data_dir).upsert(USER, MECHANISM, password=PASSWORD)
    settings = {
        "listeners": parse_listeners("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"),
        "allow_everyone_if_no_acl_found": True,
        # The default (30 s): a connection closed within seconds was not waiting for a body.
        "request_receive_timeout_ms": 30_000,
    }
    with ThreadedBroker(data_dir, **settings) as running:
        yield running


def address(broker: Broker, protocol: str) -> str:
    host, port = broker.bound_address(protocol)
    return f"{host}:{port}"


def scram_login(bootstrap: str) -> WireClient:
    client = WireClient(bootstrap)
    handshake = client.request(SaslHandshakeRequest(MECHANISM), 1)
    assert isinstance(handshake, SaslHandshakeResponse) and handshake.error_code == 0
    scram = ScramClient(MECHANISM, USER, PASSWORD)
    first = client.request(SaslAuthenticateRequest(scram.first_message()), 2)
    assert isinstance(first, SaslAuthenticateResponse) and first.error_code == 0
    final = client.request(SaslAuthenticateRequest(scram.final_message(first.auth_bytes)), 2)
    assert isinstance(final, SaslAuthenticateResponse)
    assert final.error_code == 0, final.error_message
    scram.check_server_final(final.auth_bytes)
    return client


def produce_two_megabytes(client: WireClient, topic: str) -> list[int]:
    """One produce request of ~2 MB (two batches of ~1 MB, each under max.message.bytes);
    the partitions' error codes."""
    created = client.request(
        CreateTopicsRequest(
            topics=[CreatableTopic(name=topic, num_partitions=2, replication_factor=1)]
        ),
        5,
    )
    assert created.topics[0].error_code == 0  # type: ignore[attr-defined]
    value = b"x" * 1_000_000
    partitions = [PartitionProduceData(p, build_record_batch([value])) for p in (0, 1)]
    request = ProduceRequest(
        acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(topic, partitions)]
    )
    response = client.request(request, 9)
    return [
        p.error_code
        for p in response.responses[0].partition_responses  # type: ignore[attr-defined]
    ]


def test_a_large_frame_before_authentication_closes_at_once(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kayak.broker.connection")
    client = WireClient(address(broker, "SASL_PLAINTEXT"))
    try:
        # A 1 MB frame announced (well under socket.request.max.bytes) and never sent.
        client.send_raw(struct.pack(">i", ONE_MB) + b"\x00\x12\x00\x00")
        waited = "the broker waited for the body of an unauthenticated 1 MB frame"
        assert client.closes_within(5.0), waited
    finally:
        client.close()
    lines = [
        r.getMessage() for r in caplog.records if "sasl.server.max.receive.size" in r.getMessage()
    ]
    assert len(lines) == 1
    assert f"frame of {ONE_MB} bytes exceeds the limit of 524288 bytes" in lines[0]


def test_a_large_request_after_login_is_accepted(broker: Broker) -> None:
    client = scram_login(address(broker, "SASL_PLAINTEXT"))
    try:
        assert produce_two_megabytes(client, "after-login") == [0, 0]
    finally:
        client.close()


def test_plaintext_listeners_accept_large_requests_without_login(broker: Broker) -> None:
    client = WireClient(address(broker, "PLAINTEXT"))
    try:
        assert produce_two_megabytes(client, "plaintext") == [0, 0]
    finally:
        client.close()


def test_the_limit_is_validated() -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig(sasl_server_max_receive_size=1023).validate()
    assert caught.value.name == "sasl.server.max.receive.size"
    BrokerConfig(sasl_server_max_receive_size=1024).validate()


# -- the CLI's principal lists --------------------------------------------------------------


def parse_cli(*args: str) -> dict[str, object]:
    """The ``kayak broker`` parameters ``args`` parse to (the broker is not started)."""
    with broker_command.make_context("broker", list(args)) as ctx:
        return dict(ctx.params)


def test_super_users_are_separated_by_semicolons() -> None:
    params = parse_cli("--super-users", "User:CN=admin,O=acme;User:bob")
    assert params["super_users"] == ("User:CN=admin,O=acme", "User:bob")
    assert parse_cli("--super-users", "User:CN=admin,O=acme")["super_users"] == (
        "User:CN=admin,O=acme",
    )
    assert parse_cli("--super-users", "User:admin")["super_users"] == ("User:admin",)
    assert (
        parse_cli("--sasl-server-max-receive-size", "4096")["sasl_server_max_receive_size"] == 4096
    )


@pytest.mark.parametrize("value", ["User:alice,User:bob", "alice,bob"])
def test_comma_separated_super_users_are_refused_with_a_hint(value: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        parse_cli("--super-users", value)
    assert "';'" in caught.value.message


def test_schema_registry_writers_are_separated_by_semicolons() -> None:
    params = parse_cli("--schema-registry-writers", "alice;User:CN=ops,O=acme")
    assert params["schema_registry_writers"] == ("alice", "User:CN=ops,O=acme")
    with pytest.raises(click.BadParameter) as caught:
        parse_cli("--schema-registry-writers", "alice,bob")
    assert "';'" in caught.value.message
