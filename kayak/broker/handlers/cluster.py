"""Metadata, DescribeCluster, FindCoordinator: where things are on a one-node cluster."""

from __future__ import annotations

import logging

from kayak.broker.catalog import Topic
from kayak.broker.context import RequestContext
from kayak.errors import ErrorCode, KafkaError
from kayak.protocol.messages.describe_cluster_request import DescribeClusterRequest
from kayak.protocol.messages.describe_cluster_response import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)
from kayak.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from kayak.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

log = logging.getLogger(__name__)


async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    response = MetadataResponse(
        brokers=[MetadataResponseBroker(broker.node_id, broker.host, broker.port)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
    )
    # v0: an empty list means every topic; v1+: null means every topic.
    everything = request.topics is None or (ctx.version == 0 and not request.topics)
    if everything:
        response.topics = [_describe(ctx, t) for t in broker.catalog.topics() if not t.internal]
        return response
    allow_create = request.allow_auto_topic_creation or ctx.version < 4
    for wanted in request.topics or []:
        response.topics.append(_lookup(ctx, wanted.name, wanted.topic_id, allow_create))
    return response


def _lookup(
    ctx: RequestContext, name: str | None, topic_id: object, allow_create: bool
) -> MetadataResponseTopic:
    catalog = ctx.broker.catalog
    topic = catalog.get(name) if name else catalog.by_id(topic_id)  # type: ignore[arg-type]
    if topic is None and name and allow_create and ctx.broker.config.auto_create_topics:
        try:
            topic = catalog.create(name, ctx.broker.config.num_partitions)
        except KafkaError as exc:
            return MetadataResponseTopic(error_code=exc.code, name=name)
    if topic is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        return MetadataResponseTopic(error_code=code, name=name)
    return _describe(ctx, topic)


def _describe(ctx: RequestContext, topic: Topic) -> MetadataResponseTopic:
    node = ctx.broker.node_id
    partitions = [
        MetadataResponsePartition(
            partition_index=p.index,
            leader_id=node,
            leader_epoch=p.log.leader_epoch,
            replica_nodes=[node],
            isr_nodes=[node],
        )
        for p in topic.partitions
    ]
    return MetadataResponseTopic(
        name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal, partitions=partitions
    )


async def handle_describe_cluster(
    ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    broker = ctx.broker
    return DescribeClusterResponse(
        endpoint_type=request.endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker.node_id, broker.host, broker.port)],
    )


async def handle_find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """Every group and transaction coordinator is this node."""
    broker = ctx.broker
    if ctx.version < 4:
        return FindCoordinatorResponse(node_id=broker.node_id, host=broker.host, port=broker.port)
    return FindCoordinatorResponse(
        coordinators=[
            Coordinator(key=key, node_id=broker.node_id, host=broker.host, port=broker.port)
            for key in request.coordinator_keys
        ]
    )
