"""Metadata answers are built and encoded once per topic state and reused: the bytes on the
wire are exactly the generated encoder's, and a change to the topic is seen at once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kayak.broker import Broker
from kayak.broker.handlers.cluster import _describe, _SplicedMetadataResponse
from kayak.broker.log import LogConfig
from kayak.broker.metrics.requests import RequestMetrics
from kayak.broker.topic import Topic
from kayak.errors import ErrorCode
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponseTopic,
)
from tests.broker.test_topic_creation_scale import AsyncClient


def _topic(partitions: int) -> Topic:
    owners = [i % 2 for i in range(partitions)]
    return Topic("wide", uuid.uuid4(), LogConfig(), {}, owners, [i % 3 for i in owners],
                 handoffs={1: 0})  # fmt: skip


@pytest.mark.parametrize("version", range(13))
def test_spliced_answers_encode_exactly_as_the_generated_encoder(version: int) -> None:
    described = _describe(_topic(300))
    error = MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name="gone")
    spliced = _SplicedMetadataResponse(
        throttle_time_ms=7,
        brokers=[MetadataResponseBroker(0, "127.0.0.1", 9092), MetadataResponseBroker(1, "h", 2)],
        cluster_id="cluster",
        controller_id=0,
        cluster_authorized_operations=12,
    )
    spliced.answer([described, error, described])
    plain = MetadataResponse(
        throttle_time_ms=7,
        brokers=spliced.brokers,
        cluster_id="cluster",
        controller_id=0,
        topics=[described.topic, error, described.topic],
        cluster_authorized_operations=12,
    )
    assert spliced.encode(version) == plain.encode(version)
    assert spliced.encode(version) == plain.encode(version)  # from the cache this time
    empty = _SplicedMetadataResponse(cluster_id=None)
    assert empty.encode(version) == MetadataResponse(cluster_id=None).encode(version)


def test_a_cached_answer_follows_the_topic() -> None:
    topic = _topic(10)
    first = _describe(topic)
    assert _describe(topic) is first
    topic.owners = [*topic.owners, 0]
    topic.epochs = [*topic.epochs, 0]
    grown = _describe(topic)
    assert len(grown.topic.partitions) == 11
    topic.handoffs = {}
    moved = _describe(topic)
    assert moved.topic.partitions[1].error_code == 0
    assert grown.topic.partitions[1].error_code == ErrorCode.LEADER_NOT_AVAILABLE


def test_metadata_over_the_wire_sees_new_partitions(tmp_path: Path) -> None:
    async def run() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            client = await AsyncClient.connect(broker.bootstrap_servers)
            create = CreateTopicsRequest(
                topics=[CreatableTopic(name="wide", num_partitions=500, replication_factor=1)]
            )
            await client.request(create, 5)
            ask = MetadataRequest(topics=[MetadataRequestTopic(name="wide")])
            for version in (1, 9, 12):
                answer = await client.request(ask, version)
                assert isinstance(answer, MetadataResponse)
                assert [p.partition_index for p in answer.topics[0].partitions] == list(range(500))
            grow = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="wide", count=600)])
            await client.request(grow, 1)
            for version in (1, 12):
                answer = await client.request(ask, version)
                assert isinstance(answer, MetadataResponse)
                assert len(answer.topics[0].partitions) == 600
            # Auto-creation of several topics in one request (one catalog write).
            auto = MetadataRequest(
                topics=[MetadataRequestTopic(name=n) for n in ("a1", "a2", "a1", "bad name")],
                allow_auto_topic_creation=True,
            )
            answer = await client.request(auto, 12)
            assert isinstance(answer, MetadataResponse)
            assert [(t.name, t.error_code) for t in answer.topics] == [
                ("a1", 0), ("a2", 0), ("a1", 0), ("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION)
            ]  # fmt: skip
            await client.close()

    asyncio.run(run())


class _Unwalkable(list):  # type: ignore[type-arg]
    """Partitions that fail the test if anything walks them."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the cached answer's partitions were walked")


def test_request_metrics_count_a_cached_answer_without_walking_its_partitions() -> None:
    topic = _topic(10_000)
    topic.handoffs = {1: 0, 7: 1}
    described = _describe(topic)
    error = MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name="gone")
    plain = MetadataResponse(topics=[described.topic, error, described.topic])
    walked = RequestMetrics()
    walked.count_errors(ApiKey.METADATA, plain)  # the generic walk, partition by partition
    spliced = _SplicedMetadataResponse()
    spliced.answer([described, error, described])
    described.topic.partitions = _Unwalkable(described.topic.partitions)
    counted = RequestMetrics()
    counted.count_errors(ApiKey.METADATA, spliced)
    expected = {
        (ApiKey.METADATA, ErrorCode.LEADER_NOT_AVAILABLE): 4,  # two moving, twice each
        (ApiKey.METADATA, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 1,
    }
    assert counted.errors == walked.errors == expected
