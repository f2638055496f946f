"""No client can damage ``__consumer_offsets`` or ``_schemas``: produce (a record, garbage, a
gzip bomb), delete, add partitions, delete records and pre-create are all refused with
Kafka's codes, nothing changes on disk, and the broker restarts with its state intact."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer

from kayak.broker import Broker, consumer_offsets
from kayak.broker.registry import store as registry_store
from kayak.broker.security.acls import INTERNAL_TOPICS
from kayak.broker.txn import records as txn_records
from kayak.errors import ErrorCode
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from kayak.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.records import Codec, build_record_batch
from kayak.serde import SchemaRegistryClient
from tests.security.acl_support import (
    AsyncWire,
    create_topic,
    latest_offset,
    offset_commit,
    offset_fetch_all,
    one_record,
    partition_errors,
    produce,
)

pytestmark = pytest.mark.timeout(60)

GARBAGE = bytes(range(256)) * 4
# 16 MiB of zeros, a few KiB compressed: refused before anyone inflates it.
GZIP_BOMB = build_record_batch([bytes(16 * 1024 * 1024)], codec=Codec.GZIP)


def test_internal_topic_names_are_the_ones_the_broker_uses() -> None:
    assert {consumer_offsets.TOPIC, registry_store.TOPIC, txn_records.TOPIC} == INTERNAL_TOPICS


async def _every_damaging_request(wire: AsyncWire, topic: str) -> None:
    """Each request that would change ``topic``; each must be refused as Kafka refuses it."""
    for payload in (one_record(), GARBAGE, GZIP_BOMB):
        for version in (3, 9):
            response = await wire.request(produce(topic, payload), version)
            assert partition_errors(response) == {ErrorCode.INVALID_TOPIC_EXCEPTION}, version
    deleted = await wire.request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=5000), 4)
    assert [r.error_code for r in deleted.responses] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    by_id = await wire.request(
        MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
        12,
    )
    topic_id = by_id.topics[0].topic_id
    deleted = await wire.request(
        DeleteTopicsRequest(topics=[DeleteTopicState(None, topic_id)], timeout_ms=5000), 6
    )
    assert [r.error_code for r in deleted.responses] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    grown = await wire.request(
        CreatePartitionsRequest(topics=[CreatePartitionsTopic(topic, 8, None)], timeout_ms=5000),
        3,
    )
    assert [r.error_code for r in grown.results] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    created = await wire.request(create_topic(topic, 4), 7)
    assert [t.error_code for t in created.topics] == [ErrorCode.TOPIC_ALREADY_EXISTS]
    truncated = await wire.request(
        DeleteRecordsRequest(
            topics=[DeleteRecordsTopic(topic, [DeleteRecordsPartition(0, -1)])], timeout_ms=5000
        ),
        2,
    )
    assert partition_errors(truncated) == {ErrorCode.INVALID_TOPIC_EXCEPTION}
    # retention.ms=1 on __consumer_offsets would let retention drop committed offsets
    altered = await wire.request(
        IncrementalAlterConfigsRequest(
            resources=[AlterConfigsResource(2, topic, [AlterableConfig("retention.ms", 0, "1")])]
        ),
        1,
    )
    assert [r.error_code for r in altered.responses] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]


def _confluent_produce(bootstrap: str, topic: str) -> list[Any]:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    outcomes: list[Any] = []
    producer.produce(topic, b"not an offset commit", on_delivery=lambda e, _: outcomes.append(e))
    producer.flush(15)
    return outcomes


def test_no_client_can_damage_internal_topics_and_the_broker_restarts_intact(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    settings: dict[str, Any] = {"port": 0, "schema_registry_port": 0}

    async def damage() -> tuple[int, dict[str, int]]:
        async with Broker(data, **settings) as broker:
            assert broker.schema_registry_url is not None
            registry = SchemaRegistryClient(broker.schema_registry_url)
            schema_id = await asyncio.to_thread(registry.register, "orders-value", '"string"')
            wire = await AsyncWire.connect(broker.port)
            assert (await wire.request(create_topic("orders"), 7)).topics[0].error_code == 0
            committed = await wire.request(offset_commit("g", "orders", {0: 42}), 8)
            assert partition_errors(committed) == {ErrorCode.NONE}
            ends = {}
            for topic in sorted(INTERNAL_TOPICS):
                end = await wire.request(latest_offset(topic), 4)
                ends[topic] = end.topics[0].partitions[0].offset
                await _every_damaging_request(wire, topic)
                again = await wire.request(latest_offset(topic), 4)
                assert again.topics[0].partitions[0].offset == ends[topic], topic
            outcomes = await asyncio.to_thread(
                _confluent_produce, broker.bootstrap_servers, consumer_offsets.TOPIC
            )
            assert [e.code() for e in outcomes] == [ConfluentError.TOPIC_EXCEPTION]
            assert broker.context is not None
            for topic in INTERNAL_TOPICS:
                found = broker.context.catalog.get(topic)
                assert found is not None and found.partition_count == 1
            await wire.close()
        return schema_id, ends

    schema_id, ends = asyncio.run(damage())

    async def restart() -> None:
        async with Broker(data, **settings) as broker:
            assert broker.schema_registry_url is not None
            registry = SchemaRegistryClient(broker.schema_registry_url)
            latest = await asyncio.to_thread(registry.latest_version, "orders-value")
            assert latest.schema_id == schema_id
            wire = await AsyncWire.connect(broker.port)
            fetched = await wire.request(offset_fetch_all("g"), 7)
            assert [(t.name, p.committed_offset) for t in fetched.topics for p in t.partitions] == [
                ("orders", 42)
            ]
            for topic, end in ends.items():
                now = await wire.request(latest_offset(topic), 4)
                assert now.topics[0].partitions[0].offset == end
            await wire.close()

    asyncio.run(restart())


def test_schemas_cannot_be_pre_created_or_auto_created_by_a_client(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def try_to_create() -> None:
        async with Broker(data, port=0) as broker:
            wire = await AsyncWire.connect(broker.port)
            for version, validate_only in ((7, False), (7, True), (0, False)):
                request = create_topic(registry_store.TOPIC)
                request.validate_only = validate_only
                created = await wire.request(request, version)
                assert [t.error_code for t in created.topics] == [ErrorCode.INVALID_REQUEST]
            wanted = [MetadataRequestTopic(name=registry_store.TOPIC)]
            for version in (1, 4, 12):
                metadata = await wire.request(MetadataRequest(topics=wanted), version)
                codes = [t.error_code for t in metadata.topics]
                assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], version
            assert broker.context is not None
            assert broker.context.catalog.get(registry_store.TOPIC) is None
            await wire.close()

    asyncio.run(try_to_create())

    async def registry_still_starts() -> None:
        async with Broker(data, port=0, schema_registry_port=0) as broker:
            assert broker.schema_registry_url is not None
            registry = SchemaRegistryClient(broker.schema_registry_url)
            assert await asyncio.to_thread(registry.register, "s", '"int"') == 1

    asyncio.run(registry_still_starts())
