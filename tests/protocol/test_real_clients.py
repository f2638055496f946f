"""Real Kafka clients against a stub broker built on kayak's ServerConnection.

librdkafka (confluent-kafka), kafka-python and aiokafka each bootstrap, negotiate versions with
ApiVersions and read topic ``t`` through Metadata. Between them they use ApiVersions v0, v3 and
the KIP-511 fallback, Metadata v5 (classic) and v12 (flexible, topic ids): every byte of those
requests is decoded and every response encoded by kayak. The versions each client picked are
asserted too, so the tests fail if the stub (that is, a kayak broker) ever mis-advertises.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from kayak.protocol.connection import ClientConnection
from kayak.protocol.messages import ApiKey, ApiVersionsRequest
from tests.protocol.kafka_stub import (
    ADVERTISED,
    CLUSTER_ID,
    NODE_ID,
    PARTITIONS,
    TOPIC,
    TOPIC_ID,
    StubBroker,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    with StubBroker() as stub:
        yield stub


def _assert_clean(broker: StubBroker) -> None:
    assert broker.errors == []  # no request failed to decode
    assert all(s.supported for s in broker.seen if s.api_key != ApiKey.API_VERSIONS)


def test_advertised_ranges_are_what_the_clients_are_checked_against() -> None:
    assert ADVERTISED[ApiKey.API_VERSIONS] == (0, 3)
    assert ADVERTISED[ApiKey.METADATA] == (0, 12)
    assert ADVERTISED[ApiKey.PRODUCE][0] == 0  # librdkafka insists on a min of 0


# librdkafka is C: a response it misparses can crash the process (it does segfault on a
# Metadata response with the wrong header version), so it runs in a child process and reports
# what it saw as JSON; the stub broker stays here and records the versions used.
_LIBRDKAFKA_PROBE = """
import json, sys
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
md = admin.list_topics(timeout=10)
t = md.topics[topic]
desc = admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result(timeout=10)
print(json.dumps({
    "cluster_id": md.cluster_id,
    "controller_id": md.controller_id,
    "brokers": {b.id: [b.host, b.port] for b in md.brokers.values()},
    "topic_error": None if t.error is None else str(t.error),
    "partitions": {
        p.id: [p.leader, p.replicas, p.isrs, None if p.error is None else str(p.error)]
        for p in t.partitions.values()
    },
    "topic_id": [desc.topic_id.get_most_significant_bits(),
                 desc.topic_id.get_least_significant_bits()],
    "described_partitions": [p.id for p in desc.partitions],
}))
"""


def test_librdkafka_lists_and_describes_the_topic(broker: StubBroker) -> None:
    pytest.importorskip("confluent_kafka")
    proc = subprocess.run(
        [sys.executable, "-c", _LIBRDKAFKA_PROBE, broker.bootstrap, TOPIC],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["cluster_id"] == CLUSTER_ID
    assert seen["controller_id"] == NODE_ID
    assert seen["brokers"] == {str(NODE_ID): ["127.0.0.1", broker.port]}
    assert seen["topic_error"] is None
    assert seen["partitions"] == {
        str(i): [NODE_ID, [NODE_ID], [NODE_ID], None] for i in range(PARTITIONS)
    }
    # describe_topics reports the topic id: the uuid crossed the flexible encoding intact
    msb, lsb = seen["topic_id"]
    assert uuid.UUID(int=((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))) == TOPIC_ID
    assert seen["described_partitions"] == list(range(PARTITIONS))

    # librdkafka 2.x: ApiVersions v3 (flexible, header v2) and the newest Metadata we offer
    assert set(broker.versions_used(ApiKey.API_VERSIONS)) == {3}
    assert set(broker.versions_used(ApiKey.METADATA)) == {12}
    assert {s.client_id for s in broker.seen} == {"rdkafka"}
    _assert_clean(broker)


def test_kafka_python_sees_the_partitions(broker: StubBroker) -> None:
    kafka = pytest.importorskip("kafka")

    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        assert consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
    finally:
        consumer.close()

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        assert admin.list_topics() == [TOPIC]
        (described,) = admin.describe_topics([TOPIC])
    finally:
        admin.close()
    assert described["name"] == TOPIC
    assert described["error_code"] == 0
    assert uuid.UUID(str(described["topic_id"])) == TOPIC_ID
    assert [p["partition_index"] for p in described["partitions"]] == list(range(PARTITIONS))
    assert all(p["leader_id"] == NODE_ID for p in described["partitions"])

    # kafka-python 3 opens with ApiVersions v4, which we do not advertise: the stub answers
    # UNSUPPORTED_VERSION at v0 with its range (KIP-511) and the client retries at v3.
    api_versions = broker.versions_used(ApiKey.API_VERSIONS)
    assert 4 in api_versions
    assert 3 in api_versions
    assert set(api_versions) == {3, 4}
    assert set(broker.versions_used(ApiKey.METADATA)) == {12}
    _assert_clean(broker)


def test_aiokafka_bootstraps_and_finds_the_partitions(broker: StubBroker) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def run() -> tuple[set[int] | None, set[str]]:
        client = aiokafka.AIOKafkaClient(bootstrap_servers=broker.bootstrap)
        try:
            await client.bootstrap()
            client.add_topic(TOPIC)
            await client.force_metadata_update()
            return client.cluster.partitions_for_topic(TOPIC), client.cluster.topics()
        finally:
            await client.close()

    partitions, topics = asyncio.run(run())
    assert partitions == set(range(PARTITIONS))
    assert TOPIC in topics

    # aiokafka 0.14 sticks to classic encodings: ApiVersions v0, Metadata v5
    assert set(broker.versions_used(ApiKey.API_VERSIONS)) == {0}
    assert set(broker.versions_used(ApiKey.METADATA)) == {5}
    _assert_clean(broker)


def test_stub_refuses_an_api_version_it_does_not_advertise(broker: StubBroker) -> None:
    """The KIP-511 path the kafka-python test relies on, checked without a real client."""
    client = ClientConnection(client_id="probe")
    corr, frame = client.send_request(ApiVersionsRequest(), 4)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(frame)
        event = None
        while event is None:
            data = sock.recv(65536)
            assert data, "stub closed the connection"
            client.receive_data(data)
            event = client.next_event()
    assert event.correlation_id == corr
    assert event.response.error_code == 35
    advertised = {k.api_key: (k.min_version, k.max_version) for k in event.response.api_keys}
    assert advertised == {int(k): v for k, v in ADVERTISED.items()}
