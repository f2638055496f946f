"""What Kafka's own tools asked of kayak and first did not get, checked on the wire.

``kafka-get-offsets --time -4 / -5`` (and the Java Admin's ``OffsetSpec.earliestLocal()`` /
``latestTiered()``) need ListOffsets v8/v9, which a Kafka 3.9 broker serves;
``kafka-configs --describe --entity-type users`` needs DescribeClientQuotas; ``kafka-dump-log``
reads index entries as naming the last offset of the batch they point at. The JVM tests
(tests/jvm/) run the tools themselves; these pin the answers down without a JVM.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kayak.broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from kayak.broker.security.acls import AclStore
from kayak.broker.server import Broker
from kayak.broker.versions import SUPPORTED_VERSIONS
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.describe_client_quotas_request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from tests.broker.interop_helpers import create_topic, unique
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

EARLIEST_LOCAL, LATEST_TIERED = -4, -5
INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED = 42, 31


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with ThreadedBroker(tmp_path_factory.mktemp("tools-apis") / "data", port=0) as running:
        yield running


def _list_offset(wire: WireClient, topic: str, timestamp: int, version: int) -> Any:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, timestamp=timestamp)])],
    )
    response: Any = wire.request(request, version)
    return response.topics[0].partitions[0]


def test_list_offsets_v9_answers_earliest_local_and_latest_tiered(broker: Broker) -> None:
    assert SUPPORTED_VERSIONS[ApiKey.LIST_OFFSETS] == (0, 9)  # as a Kafka 3.9 broker
    topic = unique("local")
    create_topic(broker.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0
    wire = WireClient(broker.bootstrap_servers)
    try:
        deleted: Any = wire.request(
            DeleteRecordsRequest(
                topics=[DeleteRecordsTopic(topic, [DeleteRecordsPartition(0, 2)])]
            ),
            2,
        )
        assert deleted.topics[0].partitions[0].low_watermark == 2
        for version in (8, 9):
            local = _list_offset(wire, topic, EARLIEST_LOCAL, version)
            # Nothing is tiered: the local log starts where the log starts.
            assert (local.error_code, local.offset, local.timestamp) == (0, 2, -1)
        tiered = _list_offset(wire, topic, LATEST_TIERED, 9)
        # As a Kafka broker without remote storage answers: no offset is tiered.
        assert (tiered.error_code, tiered.offset, tiered.timestamp) == (0, -1, -1)
        latest = _list_offset(wire, topic, -1, 9)
        assert (latest.error_code, latest.offset) == (0, 5)
    finally:
        wire.close()


def _quotas(bootstrap: str, *components: ComponentData, version: int = 1) -> Any:
    wire = WireClient(bootstrap)
    try:
        return wire.request(DescribeClientQuotasRequest(components=list(components)), version)
    finally:
        wire.close()


def test_describe_client_quotas_answers_none_configured(broker: Broker) -> None:
    for version in (0, 1):
        everything = _quotas(broker.bootstrap_servers, version=version)
        assert (everything.error_code, everything.entries) == (0, [])
    alice = _quotas(broker.bootstrap_servers, ComponentData("user", 0, "alice"))
    assert (alice.error_code, alice.entries) == (0, [])


@pytest.mark.parametrize(
    ("components", "named"),
    [
        ([ComponentData("user", 2, None), ComponentData("user", 0, "a")], "Duplicate user"),
        ([ComponentData("tenant", 2, None)], "Custom entity type 'tenant'"),
        ([ComponentData("ip", 2, None), ComponentData("user", 2, None)], "IP filter"),
        ([ComponentData("client-id", 7, None)], "match type: 7"),
        ([ComponentData("user", 0, None)], "needs a name"),
    ],
)
def test_describe_client_quotas_refuses_a_bad_filter(
    broker: Broker, components: list[ComponentData], named: str
) -> None:
    answer = _quotas(broker.bootstrap_servers, *components)
    assert answer.error_code == INVALID_REQUEST
    assert named in answer.error_message
    assert answer.entries is None


def test_describe_client_quotas_needs_describe_configs_on_the_cluster(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    AclStore.open(data)  # ACLs on, none granting anything to the anonymous plaintext user
    with ThreadedBroker(data, port=0, allow_everyone_if_no_acl_found=False) as secured:
        answer = _quotas(secured.bootstrap_servers)
    assert answer.error_code == CLUSTER_AUTHORIZATION_FAILED
    assert answer.entries is None


# A v2 batch header: base offset, length, leader epoch, magic, crc, attributes,
# last offset delta, base timestamp, max timestamp.
_BATCH = struct.Struct(">qiibIhiqq")


def _batches(log: Path) -> dict[int, tuple[int, int]]:
    """Each batch's file position → (last offset, max timestamp), read straight off the file."""
    data, position, found = log.read_bytes(), 0, {}
    while position < len(data):
        base, length, _, _, _, _, last_delta, _, max_timestamp = _BATCH.unpack_from(data, position)
        found[position] = (base + last_delta, max_timestamp)
        position += 12 + length
    return found


def test_index_entries_name_a_batchs_last_offset_as_kafkas_do(broker: Broker) -> None:
    topic = unique("indexed")
    create_topic(broker.bootstrap_servers, topic, configs={"segment.bytes": "1048576"})
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20, "batch.size": 16384}
    )
    for i in range(1500):  # 1.5 MB of records several to a batch: the first segment rolls
        producer.produce(topic, b"x" * 1000, partition=0, timestamp=1_000_000 + i // 7)
    assert producer.flush(30) == 0
    sealed = sorted((broker.config.data_dir / f"{topic}-0").glob("*.log"))[0]
    base = int(sealed.stem)
    batches = _batches(sealed)
    assert any(last > base for last, _ in batches.values())  # batches of several records
    entries = list(OFFSET_ENTRY.iter_unpack(sealed.with_suffix(".index").read_bytes()))
    assert len(entries) > 10
    for relative, position in entries:
        assert batches[position][0] == base + relative, (relative, position)
    by_last_offset = {last: timestamp for last, timestamp in batches.values()}
    stamps = list(TIME_ENTRY.iter_unpack(sealed.with_suffix(".timeindex").read_bytes()))
    assert len(stamps) > 10
    for timestamp, relative in stamps:
        assert by_last_offset[base + relative] == timestamp, (timestamp, relative)
