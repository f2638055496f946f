"""Bad bytes and unsupported requests: a clear answer or a closed connection, nothing lost."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from kayak.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    FetchRequest,
    ProduceRequest,
)
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, parse_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(60)


def produce(client: WireClient, topic: str, records: bytes) -> int:
    data = TopicProduceData(topic, [PartitionProduceData(0, records)])
    response = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data]), 9)
    return response.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined,no-any-return]


def fetch_values(client: WireClient, topic: str) -> list[bytes | None]:
    request = FetchRequest(
        max_wait_ms=0,
        topics=[
            FetchTopic(topic=topic, partitions=[FetchPartition(0, partition_max_bytes=1 << 20)])
        ],
    )
    partition = client.request(request, 12).responses[0].partitions[0]  # type: ignore[attr-defined]
    return [r.value for b in parse_batches(partition.records) for r in b]


def make_topic(client: WireClient, name: str) -> None:
    response = client.request(
        CreateTopicsRequest(
            topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=1)]
        ),
        5,
    )
    assert response.topics[0].error_code == 0  # type: ignore[attr-defined]


def test_garbage_frames_close_only_that_connection(broker_process: BrokerProcess) -> None:
    good = WireClient(broker_process.bootstrap_servers)
    make_topic(good, "safe")
    assert produce(good, "safe", build_record_batch([b"keep-me"])) == 0

    for garbage in (
        struct.pack(">i", 12) + os.urandom(12),  # a frame of noise
        struct.pack(">i", 3) + b"abc",  # shorter than any request header
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 1_000_000_000),  # beyond socket.request.max.bytes, body never sent
    ):
        bad = WireClient(broker_process.bootstrap_servers)
        bad.send_raw(garbage)
        assert bad.closed_by_peer(), f"broker kept a connection that sent {garbage[:8]!r}"
        bad.close()

    assert fetch_values(good, "safe") == [b"keep-me"]
    assert "closing connection" in broker_process.log_text()
    assert broker_process.process is not None and broker_process.process.poll() is None


def test_corrupt_batches_are_refused_and_nothing_is_stored(broker_process: BrokerProcess) -> None:
    client = WireClient(broker_process.bootstrap_servers)
    make_topic(client, "crc")
    batch = bytearray(build_record_batch([b"a", b"b"]))
    batch[-1] ^= 1
    assert produce(client, "crc", bytes(batch)) == 2  # CORRUPT_MESSAGE
    assert produce(client, "crc", bytes(batch[:30])) == 2
    assert produce(client, "nope", build_record_batch([b"x"])) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_values(client, "crc") == []
    assert produce(client, "crc", build_record_batch([b"fine"])) == 0
    assert fetch_values(client, "crc") == [b"fine"]


def test_too_new_api_versions_is_answered_at_v0_with_the_table(
    broker_process: BrokerProcess,
) -> None:
    client = WireClient(broker_process.bootstrap_servers)
    # Hand-build ApiVersions v9 (unknown to everyone): header v2 needs a tagged-field byte.
    frame_body = struct.pack(">hhih", 18, 9, 42, 4) + b"test" + b"\x00"
    client.send_raw(struct.pack(">i", len(frame_body)) + frame_body)
    size = struct.unpack(">i", client.sock.recv(4))[0]
    body = b""
    while len(body) < size:
        body += client.sock.recv(size - len(body))
    correlation_id, error_code, count = struct.unpack(">ihi", body[:10])
    assert (correlation_id, error_code) == (42, 35)
    assert count > 20
    # and the connection still works at a supported version
    response = client.request(ApiVersionsRequest(), 3)
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}  # type: ignore[attr-defined]
    assert keys[0][0] == 0 and keys[1][0] == 4 and 18 in keys


def test_unimplemented_api_gets_unsupported_version(broker_process: BrokerProcess) -> None:
    from kayak.protocol.messages import DescribeDelegationTokenRequest

    client = WireClient(broker_process.bootstrap_servers)
    response = client.request(DescribeDelegationTokenRequest(), 1)
    assert response.error_code == 35  # type: ignore[attr-defined]
    assert client.request(ApiVersionsRequest(), 0).error_code == 0  # type: ignore[attr-defined]


def test_connections_beyond_max_connections_are_closed(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "limited", extra_args=["--max-connections", "2"]).start()
    try:
        first = WireClient(broker.bootstrap_servers)
        second = WireClient(broker.bootstrap_servers)
        third = WireClient(broker.bootstrap_servers)
        assert third.closed_by_peer()
        for client in (first, second):
            assert client.request(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
        assert "max.connections=2" in broker.log_text()
        first.close()
        time.sleep(0.2)
        fourth = WireClient(broker.bootstrap_servers)
        assert fourth.request(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    finally:
        broker.stop()
