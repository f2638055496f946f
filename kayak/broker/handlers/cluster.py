"""Metadata, DescribeCluster, FindCoordinator: where things are on a one-node cluster."""

from __future__ import annotations

import logging

from kayak.broker.catalog import NO_LEADER, Topic
from kayak.broker.context import RequestContext
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import GROUP, TOPIC, allowed, allowed_on_cluster
from kayak.broker.shards import ShardAddress
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

_TRANSACTION_KEY = 1  # FindCoordinator key_type: 0 a group, 1 a transactional id


async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    response = MetadataResponse(
        brokers=[MetadataResponseBroker(s.node_id, s.host, s.port) for s in _brokers(ctx)],
        cluster_id=broker.cluster_id,
        controller_id=0,
    )
    # v0: an empty list means every topic; v1+: null means every topic.
    everything = request.topics is None or (ctx.version == 0 and not request.topics)
    if everything:
        response.topics = [
            _describe(ctx, t)
            for t in broker.catalog.topics()
            if not t.internal and allowed(ctx, AclOperation.DESCRIBE, TOPIC, t.name)
        ]
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
    known = name or (topic.name if topic is not None else None)
    if known is not None and not allowed(ctx, AclOperation.DESCRIBE, TOPIC, known):
        # Asked by id: the name stays hidden from whoever may not describe the topic.
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return MetadataResponseTopic(
            error_code=denied, name=name, is_internal=is_internal_topic(name)
        )
    if topic is None and name and allow_create and ctx.broker.config.auto_create_topics:
        if is_internal_topic(name):
            # Only the broker creates its internal topics, with the settings it relies on.
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return MetadataResponseTopic(error_code=code, name=name)
        if not (
            allowed_on_cluster(ctx, AclOperation.CREATE)
            or allowed(ctx, AclOperation.CREATE, TOPIC, name)
        ):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            return MetadataResponseTopic(error_code=denied, name=name)
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
    # Kafka answers every client (the brokers are in Metadata anyway); DESCRIBE on the
    # cluster only governs include_cluster_authorized_operations, which kayak leaves unset.
    broker = ctx.broker
    return DescribeClusterResponse(
        endpoint_type=request.endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=0,
        brokers=[DescribeClusterBroker(s.node_id, s.host, s.port) for s in _brokers(ctx)],
    )


async def handle_find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """A group's coordinator is the shard its id hashes to (this node when alone)."""
    if ctx.version < 4:
        found = _coordinator(ctx, request.key, request.key_type)
        return FindCoordinatorResponse(
            error_code=found.error_code, node_id=found.node_id, host=found.host, port=found.port
        )
    return FindCoordinatorResponse(
        coordinators=[_coordinator(ctx, key, request.key_type) for key in request.coordinator_keys]
    )


def _coordinator(ctx: RequestContext, key: str, key_type: int = 0) -> Coordinator:
    if key_type == _TRANSACTION_KEY:
        # Transactions are not supported; answered as Kafka answers a principal without
        # DESCRIBE on the transactional id.
        denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return Coordinator(key=key, node_id=-1, error_code=denied)
    if not allowed(ctx, AclOperation.DESCRIBE, GROUP, key):
        return Coordinator(key=key, node_id=-1, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    address = _address_of(ctx, ctx.broker.coordinator_for(key))
    if address is None:
        return Coordinator(key=key, node_id=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return Coordinator(key=key, node_id=address.node_id, host=address.host, port=address.port)


# -- addresses: each answer names the listener the request arrived on ----------------------


def _listener_name(ctx: RequestContext) -> str | None:
    return ctx.session.listener.name if ctx.session is not None else None


def _brokers(ctx: RequestContext) -> list[ShardAddress]:
    """Every shard, at the address it advertises on this request's listener."""
    name = _listener_name(ctx)
    return [address.on(name) for address in ctx.broker.cluster()]


def _address_of(ctx: RequestContext, node_id: int) -> ShardAddress | None:
    """``node_id``'s address on this request's listener; None if it is not registered."""
    shards = ctx.broker.shards
    address = shards.address(node_id) if shards is not None else None
    if address is None:
        address = ctx.broker.address_of(node_id)
    return address.on(_listener_name(ctx)) if address is not None else None
