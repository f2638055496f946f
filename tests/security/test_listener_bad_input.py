"""The frame fuzzer on TLS and SASL listeners: bad bytes close only that connection.

Like tests/broker/test_broker_bad_input.py::test_garbage_frames_close_only_that_connection,
with the garbage sent inside a TLS session, as raw bytes to a TLS port (no handshake), and to
a SASL listener before authentication; the broker keeps serving every listener.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, parse_batches
from tests.broker.wire import WireClient
from tests.fixtures.certs import TlsFiles
from tests.security.threaded_broker import ThreadedBroker
from tests.security.tls_wire import TlsWireClient

pytestmark = pytest.mark.timeout(60)

GARBAGE = (
    struct.pack(">i", 12) + os.urandom(12),  # a frame of noise
    struct.pack(">i", 3) + b"abc",  # shorter than any request header
    struct.pack(">i", -5),  # negative size
    struct.pack(">i", 1_000_000_000),  # beyond socket.request.max.bytes, body never sent
)


@pytest.fixture
def broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Broker]:
    settings = {
        "listeners": parse_listeners(
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
        ),
        "ssl_certificate_location": tls_files.server_cert,
        "ssl_key_location": tls_files.server_key,
        "allow_everyone_if_no_acl_found": True,
        # also the TLS handshake deadline: a half-sent handshake is closed quickly
        "request_receive_timeout_ms": 500,
    }
    with ThreadedBroker(tmp_path / "data", **settings) as running:
        yield running


def keep_me(client: WireClient | TlsWireClient) -> None:
    topics = [CreatableTopic(name="safe", num_partitions=1, replication_factor=1)]
    assert client.request(CreateTopicsRequest(topics=topics), 5).topics[0].error_code == 0  # type: ignore[attr-defined]
    data = TopicProduceData("safe", [PartitionProduceData(0, build_record_batch([b"keep-me"]))])
    response = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data]), 9)
    assert response.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]


def values(client: WireClient | TlsWireClient) -> list[bytes | None]:
    request = FetchRequest(
        max_wait_ms=0,
        topics=[
            FetchTopic(topic="safe", partitions=[FetchPartition(0, partition_max_bytes=1 << 20)])
        ],
    )
    partition = client.request(request, 12).responses[0].partitions[0]  # type: ignore[attr-defined]
    return [r.value for b in parse_batches(partition.records) for r in b]


def address(broker: Broker, protocol: str) -> str:
    host, port = broker.bound_address(protocol)
    return f"{host}:{port}"


def test_garbage_inside_tls_closes_only_that_connection(
    broker: Broker, tls_files: TlsFiles
) -> None:
    good = TlsWireClient(address(broker, "SSL"), tls_files)
    keep_me(good)
    for garbage in GARBAGE:
        bad = TlsWireClient(address(broker, "SSL"), tls_files)
        bad.send_raw(garbage)
        assert bad.closes_within(5.0), f"broker kept a TLS connection that sent {garbage[:8]!r}"
        bad.close()
    assert values(good) == [b"keep-me"]
    good.close()


def test_plaintext_bytes_to_a_tls_port_are_refused(broker: Broker, tls_files: TlsFiles) -> None:
    for garbage in (*GARBAGE, ApiVersionsFrame()):
        raw = WireClient(address(broker, "SSL"))
        raw.send_raw(garbage)
        assert raw.closes_within(5.0), f"a TLS listener kept a connection that sent {garbage[:8]!r}"
        raw.close()
    good = TlsWireClient(address(broker, "SSL"), tls_files)
    assert good.request(ApiVersionsRequest(), 0).error_code == 0  # type: ignore[attr-defined]
    good.close()


def test_garbage_and_unauthenticated_requests_on_a_sasl_listener(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kayak.broker.connection")
    plain = WireClient(address(broker, "PLAINTEXT"))
    keep_me(plain)
    for garbage in GARBAGE:
        bad = WireClient(address(broker, "SASL_PLAINTEXT"))
        bad.send_raw(garbage)
        kept = f"a SASL listener kept a connection that sent {garbage[:8]!r}"
        assert bad.closes_within(5.0), kept
        bad.close()
    # Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are answered;
    # anything else closes the connection without an answer.
    eager = WireClient(address(broker, "SASL_PLAINTEXT"))
    assert eager.request(ApiVersionsRequest(), 0).error_code == 0  # type: ignore[attr-defined]
    with pytest.raises((ConnectionError, socket.timeout)):
        eager.request(MetadataRequest(topics=None), 1)
    eager.close()
    assert any("before SASL authentication" in r.getMessage() for r in caplog.records)
    assert values(plain) == [b"keep-me"]
    plain.close()


def ApiVersionsFrame() -> bytes:
    """A well-formed Kafka request, which is still garbage to a TLS listener."""
    from kayak.protocol import ClientConnection

    _, frame = ClientConnection(client_id="plain").send_request(ApiVersionsRequest(), 0)
    return bytes(frame)
