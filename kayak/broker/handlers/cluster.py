"""Metadata, DescribeCluster, FindCoordinator: where things are on a one-node cluster."""

from __future__ import annotations

import logging

from kayak.broker.catalog import NO_LEADER, Topic
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
        brokers=[MetadataResponseBroker(s.node_id, s.host, s.port) for s in broker.cluster()],
        cluster_id=broker.cluster_id,
        controller_id=0,
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
    partitions = []
    for index, owner in enumerate(topic.owners):
        moving = index in topic.handoffs or owner == NO_LEADER
        partitions.append(
            MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if moving else 0,
                partition_index=index,
                leader_id=NO_LEADER if moving else owner,
                leader_epoch=topic.epochs[index],
                replica_nodes=[owner],
                isr_nodes=[] if moving else [owner],
            )
        )
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
        controller_id=0,
        brokers=[DescribeClusterBroker(s.node_id, s.host, s.port) for s in broker.cluster()],
    )


async def handle_find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """A group's coordinator is the shard its id hashes to (this node when alone)."""
    if ctx.version < 4:
        found = _coordinator(ctx, request.key)
        return FindCoordinatorResponse(
            error_code=found.error_code, node_id=found.node_id, host=found.host, port=found.port
        )
    return FindCoordinatorResponse(
        coordinators=[_coordinator(ctx, key) for key in request.coordinator_keys]
    )


def _coordinator(ctx: RequestContext, key: str) -> Coordinator:
    address = ctx.broker.address_of(ctx.broker.coordinator_for(key))
    if address is None:
        return Coordinator(key=key, node_id=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return Coordinator(key=key, node_id=address.node_id, host=address.host, port=address.port)
