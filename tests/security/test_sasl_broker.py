"""SASL on a SASL_PLAINTEXT listener: real logins by confluent-kafka, kafka-python and aiokafka
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, unsecured OAUTHBEARER), and every refusal: a wrong
password, a replayed SCRAM proof, an unauthenticated client trying every API, requests out of
order, a different principal on re-authentication, too many failures from one address.
KIP-368 re-authentication keeps a confluent-kafka producer working across several session
lifetimes."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.handlers import HANDLERS
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.broker.security.principal import Principal
from kayak.broker.server import Broker
from kayak.broker.versions import SUPPORTED_VERSIONS
from kayak.protocol.messages import ApiKey, request_class
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kayak.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from kayak.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from kayak.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from kayak.protocol.sasl import ScramClient, encode_oauthbearer, encode_plain, unsecured_token
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(90)

SASL = "SASL_PLAINTEXT"
PASSWORD = "alice-secret"
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ALICE = Principal.user("alice")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def add_users(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore.open(data_dir)
    for user in ("alice", "bob"):
        for mechanism in SCRAM:
            store.upsert(user, mechanism, password=f"{user}-secret")


def sasl_settings(**extra: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "listeners": parse_listeners(f"{SASL}://127.0.0.1:0"),
        # ACLs are another test's business: every authenticated user may do everything.
        "allow_everyone_if_no_acl_found": True,
        "connection_failed_authentication_delay_ms": 10,
    }
    settings.update(extra)
    return settings


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[Broker]:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings()) as broker:
        yield broker


def client_config(mechanism: str, user: str = "alice", password: str = PASSWORD) -> dict[str, Any]:
    return {
        "security.protocol": SASL,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


# -- a raw client, for what the libraries will not do -----------------------------------------


def handshake(client: WireClient, mechanism: str, version: int = 1) -> SaslHandshakeResponse:
    response = client.request(SaslHandshakeRequest(mechanism), version)
    assert isinstance(response, SaslHandshakeResponse)
    return response


def authenticate(client: WireClient, data: bytes, version: int = 2) -> SaslAuthenticateResponse:
    response = client.request(SaslAuthenticateRequest(data), version)
    assert isinstance(response, SaslAuthenticateResponse)
    return response


def scram_login(
    bootstrap: str, mechanism: str, user: str, password: str, *, nonce: str | None = None
) -> tuple[WireClient, list[bytes], SaslAuthenticateResponse]:
    """A SCRAM exchange on a new connection; the client's messages and the last answer."""
    client = WireClient(bootstrap)
    assert handshake(client, mechanism).error_code == 0
    scram = ScramClient(mechanism, user, password, nonce=nonce)
    first = scram.first_message()
    server_first = authenticate(client, first)
    assert server_first.error_code == 0, server_first.error_message
    final = scram.final_message(server_first.auth_bytes)
    answer = authenticate(client, final)
    if answer.error_code == 0:
        scram.check_server_final(answer.auth_bytes)
    return client, [first, final], answer


def plain_login(
    bootstrap: str, user: str, password: str, version: int = 2
) -> tuple[WireClient, SaslAuthenticateResponse]:
    client = WireClient(bootstrap)
    assert handshake(client, "PLAIN").error_code == 0
    return client, authenticate(client, encode_plain(user, password), version)


# -- real clients -----------------------------------------------------------------------------


def confluent_round_trip(bootstrap: str, config: dict[str, Any], n: int = 10) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique("cf")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), **config})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while len(values) < n and time.monotonic() < deadline:
            for message in consumer.consume(n, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_confluent_kafka_logs_in(sasl_broker: Broker, mechanism: str) -> None:
    values = confluent_round_trip(sasl_broker.bootstrap_servers_for(SASL), client_config(mechanism))
    assert values == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_logs_in(sasl_broker: Broker, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique("kp")
    args: dict[str, Any] = {
        "bootstrap_servers": sasl_broker.bootstrap_servers_for(SASL),
        "security_protocol": SASL,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }
    producer = KafkaProducer(**args)
    for i in range(5):
        producer.send(topic, f"k{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **args)
    values = [message.value for _, message in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_aiokafka_logs_in(sasl_broker: Broker, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = unique("aio")
    args: dict[str, Any] = {
        "bootstrap_servers": sasl_broker.bootstrap_servers_for(SASL),
        "security_protocol": SASL,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(**args)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **args)
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 10)
                values += [m.value for ms in batch.values() for m in ms]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == [f"a{i}".encode() for i in range(5)]


def test_the_session_carries_the_principal(sasl_broker: Broker) -> None:
    client, answer = plain_login(sasl_broker.bootstrap_servers_for(SASL), "alice", PASSWORD)
    try:
        assert answer.error_code == 0
        sessions = [s for s in sasl_broker.connection_sessions() if s.authenticated]
        assert [(s.principal, s.mechanism) for s in sessions] == [(ALICE, "PLAIN")]
        assert isinstance(client.request(MetadataRequest(topics=[]), 1), object)
    finally:
        client.close()


def test_unsecured_oauthbearer_when_enabled(tmp_path: Path) -> None:
    settings = sasl_settings(
        sasl_enabled_mechanisms=("PLAIN", "OAUTHBEARER"), sasl_oauthbearer_unsecured=True
    )
    with ThreadedBroker(tmp_path / "data", **settings) as broker:
        bootstrap = broker.bootstrap_servers_for(SASL)
        config = {
            "security.protocol": SASL,
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=carol",
        }
        assert confluent_round_trip(bootstrap, config, 3) == [b"v0", b"v1", b"v2"]
        # An expired token is refused.
        client = WireClient(bootstrap)
        assert handshake(client, "OAUTHBEARER").error_code == 0
        stale = unsecured_token("carol", 1000, now_ms=int(time.time() * 1000) - 60_000)
        answer = authenticate(client, encode_oauthbearer(stale))
        assert answer.error_code == 58 and "expired" in (answer.error_message or "")
        assert client.closed_by_peer()
        # Lifetime: bounded by the token's.
        client = WireClient(bootstrap)
        assert handshake(client, "OAUTHBEARER").error_code == 0
        answer = authenticate(client, encode_oauthbearer(unsecured_token("carol", 60_000)))
        assert answer.error_code == 0
        assert 50_000 < answer.session_lifetime_ms <= 60_000
        client.close()


def test_oauthbearer_is_not_offered_without_the_unsecured_validator(sasl_broker: Broker) -> None:
    client = WireClient(sasl_broker.bootstrap_servers_for(SASL))
    answer = handshake(client, "OAUTHBEARER")
    assert answer.error_code == 33
    assert answer.mechanisms == ["PLAIN", *SCRAM]
    assert client.closed_by_peer()


# -- refusals ---------------------------------------------------------------------------------


def test_confluent_kafka_with_a_wrong_password_gets_an_authentication_error(
    sasl_broker: Broker,
) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError] = []
    config = {**client_config("SCRAM-SHA-512", password="wrong"), "error_cb": errors.append}
    producer = Producer({"bootstrap.servers": sasl_broker.bootstrap_servers_for(SASL), **config})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "authentication failed for 'alice'" in errors[0].str()


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_wrong_password_and_unknown_user_are_refused_alike_and_closed(
    sasl_broker: Broker, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = sasl_broker.bootstrap_servers_for(SASL)
    messages = []
    with caplog.at_level(logging.WARNING, "kayak.broker.security"):
        for user, password in [("alice", "wrong"), ("nobody", PASSWORD)]:
            if mechanism == "PLAIN":
                client, answer = plain_login(bootstrap, user, password)
            else:
                client, _, answer = scram_login(bootstrap, mechanism, user, password)
            assert answer.error_code == 58
            messages.append((answer.error_message or "").replace(user, "USER"))
            assert client.closed_by_peer()
    assert messages[0] == messages[1]  # which user names exist is not told
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2 and "'nobody' from 127.0.0.1" in failures[1]


@pytest.mark.parametrize("mechanism", SCRAM)
def test_a_replayed_scram_proof_is_refused(sasl_broker: Broker, mechanism: str) -> None:
    bootstrap = sasl_broker.bootstrap_servers_for(SASL)
    nonce = "fixed-client-nonce"
    client, (first, final), answer = scram_login(
        bootstrap, mechanism, "alice", PASSWORD, nonce=nonce
    )
    assert answer.error_code == 0
    client.close()
    # An eavesdropper replays both client messages on a new connection.
    replay = WireClient(bootstrap)
    assert handshake(replay, mechanism).error_code == 0
    assert authenticate(replay, first).error_code == 0  # a fresh server nonce
    answer = authenticate(replay, final)
    assert answer.error_code == 58
    assert replay.closed_by_peer()


def api_keys_besides_sasl() -> list[int]:
    return sorted(
        k
        for k in HANDLERS
        if k not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
    )


def test_an_unauthenticated_client_gets_no_answer_to_any_other_api(sasl_broker: Broker) -> None:
    bootstrap = sasl_broker.bootstrap_servers_for(SASL)
    for key in api_keys_besides_sasl():
        version = SUPPORTED_VERSIONS[key][1]
        for before in ("nothing", "handshake"):
            client = WireClient(bootstrap, timeout=5)
            try:
                if before == "handshake":
                    assert handshake(client, "PLAIN").error_code == 0
                _, frame = client.protocol.send_request(request_class(key)(), version)
                client.send_raw(frame)
                assert client.sock.recv(1 << 16) == b"", f"API {key} answered before login"
            finally:
                client.close()
    # The same requests are served once logged in.
    client, answer = plain_login(bootstrap, "alice", PASSWORD)
    assert answer.error_code == 0
    assert client.request(MetadataRequest(topics=[]), 1) is not None
    client.close()


def test_requests_out_of_order_are_illegal(sasl_broker: Broker) -> None:
    bootstrap = sasl_broker.bootstrap_servers_for(SASL)
    client = WireClient(bootstrap)  # SaslAuthenticate without a handshake
    assert authenticate(client, encode_plain("alice", PASSWORD)).error_code == 34
    assert client.closed_by_peer()
    client = WireClient(bootstrap)  # a second handshake in the middle of an exchange
    assert handshake(client, "SCRAM-SHA-256").error_code == 0
    assert handshake(client, "SCRAM-SHA-256").error_code == 34
    assert client.closed_by_peer()
    client = WireClient(bootstrap)  # SaslHandshake v0: the unframed tokens are not served
    assert handshake(client, "PLAIN", version=0).error_code == 35
    assert client.closed_by_peer()
    client, answer = plain_login(bootstrap, "alice", PASSWORD)  # a step PLAIN does not have
    assert answer.error_code == 0
    assert authenticate(client, b"more").error_code == 34
    client.close()


def test_failed_logins_are_rate_limited_per_address(tmp_path: Path) -> None:
    add_users(tmp_path / "data")
    settings = sasl_settings(connection_failed_authentication_delay_ms=0)
    with ThreadedBroker(tmp_path / "data", **settings) as broker:
        bootstrap = broker.bootstrap_servers_for(SASL)
        assert broker.context is not None and broker.context.authenticator is not None
        limiter = broker.context.authenticator.limiter
        for _ in range(10):  # the budget
            client, answer = plain_login(bootstrap, "alice", "guess")
            assert answer.error_code == 58 and "bad credentials" in (answer.error_message or "")
            client.close()
        # Further failures from this address (and for alice) are answered later and later...
        assert limiter.failure_delay("127.0.0.1") > 0
        assert limiter.failure_delay("10.9.9.9", "alice") > 0
        # ...but the right password is checked and accepted at once.
        client, answer = plain_login(bootstrap, "alice", PASSWORD)
        assert answer.error_code == 0
        client.close()


# -- KIP-368: session lifetime and re-authentication ------------------------------------------


def test_session_lifetime_and_reauthentication_as_another_principal(tmp_path: Path) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(
        tmp_path / "data", **sasl_settings(connections_max_reauth_ms=60_000)
    ) as broker:
        bootstrap = broker.bootstrap_servers_for(SASL)
        client, _, answer = scram_login(bootstrap, "SCRAM-SHA-512", "alice", PASSWORD)
        assert answer.error_code == 0 and answer.session_lifetime_ms == 60_000
        # Re-authenticating as alice again is fine, with the same mechanism only.
        assert handshake(client, "SCRAM-SHA-512").error_code == 0
        scram = ScramClient("SCRAM-SHA-512", "alice", PASSWORD)
        server_first = authenticate(client, scram.first_message()).auth_bytes
        assert authenticate(client, scram.final_message(server_first)).error_code == 0
        assert client.request(MetadataRequest(topics=[]), 1) is not None
        # As bob (whose password is right): refused, and the connection closed.
        assert handshake(client, "SCRAM-SHA-512").error_code == 0
        scram = ScramClient("SCRAM-SHA-512", "bob", "bob-secret")
        server_first = authenticate(client, scram.first_message()).auth_bytes
        answer = authenticate(client, scram.final_message(server_first))
        assert answer.error_code == 58 and "User:alice" in (answer.error_message or "")
        assert client.closed_by_peer()
        # A v0 SaslAuthenticate has no lifetime field; the handshake must keep the mechanism.
        client, answer = plain_login(bootstrap, "alice", PASSWORD, version=0)
        assert answer.error_code == 0 and answer.session_lifetime_ms == 0
        assert handshake(client, "SCRAM-SHA-256").error_code == 34
        assert client.closed_by_peer()


def test_confluent_kafka_reauthenticates_across_session_lifetimes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Producer

    add_users(tmp_path / "data")
    lifetime_ms = 1000
    settings = sasl_settings(connections_max_reauth_ms=lifetime_ms)
    with (
        caplog.at_level(logging.INFO, "kayak.broker"),
        ThreadedBroker(tmp_path / "data", **settings) as broker,
    ):
        bootstrap = broker.bootstrap_servers_for(SASL)
        errors: list[Any] = []
        config = {**client_config("SCRAM-SHA-256"), "error_cb": errors.append, "linger.ms": 0}
        producer = Producer({"bootstrap.servers": bootstrap, **config})
        topic = unique("reauth")
        delivered: list[Any] = []
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < 3.5 * lifetime_ms / 1000:
            producer.produce(
                topic, f"r{sent}".encode(), on_delivery=lambda e, m: delivered.append(e)
            )
            sent += 1
            producer.poll(0.1)
        assert producer.flush(20) == 0
    assert delivered == [None] * sent
    log = [r.getMessage() for r in caplog.records]
    assert sum("re-authentication as User:alice" in line for line in log) >= 3
    assert not any("expired without re-authentication" in line for line in log)
    assert not errors
