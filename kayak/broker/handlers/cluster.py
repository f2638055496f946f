"""Metadata, DescribeCluster, FindCoordinator: where things are on a one-node cluster."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import Any

from kayak.broker.context import RequestContext
from kayak.broker.handlers.authorized_operations import cluster_operations, topic_operations
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import GROUP, TOPIC, allowed, allowed_on_cluster
from kayak.broker.security.acls.model import ResourceType
from kayak.broker.shards import ShardAddress
from kayak.broker.topic import NO_LEADER, NewTopic, Topic
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
from kayak.protocol.primitives import write_array_length

log = logging.getLogger(__name__)

_TRANSACTION_KEY = 1  # FindCoordinator key_type: 0 a group, 1 a transactional id


async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    response = _SplicedMetadataResponse(
        brokers=[MetadataResponseBroker(s.node_id, s.host, s.port) for s in _brokers(ctx)],
        cluster_id=broker.cluster_id,
        controller_id=0,
    )
    # v0: an empty list means every topic; v1+: null means every topic.
    everything = request.topics is None or (ctx.version == 0 and not request.topics)
    if 8 <= ctx.version <= 10 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = cluster_operations(ctx)
    with_operations = ctx.version >= 8 and request.include_topic_authorized_operations
    if everything:
        described: list[_Answer] = [
            _describe(t)
            for t in broker.catalog.topics()
            if not t.internal and allowed(ctx, AclOperation.DESCRIBE, TOPIC, t.name)
        ]
        response.answer(_with_operations(ctx, described) if with_operations else described)
        return response
    allow_create = request.allow_auto_topic_creation or ctx.version < 4
    wanted = request.topics or []
    answers = [_lookup(ctx, t.name, t.topic_id, allow_create) for t in wanted]
    missing = sorted({t.name for t, a in zip(wanted, answers, strict=True) if a is None and t.name})
    if missing:
        # Auto-creation: every missing topic of the request in one durable catalog write.
        news = [NewTopic(name, broker.config.num_partitions) for name in missing]
        created = await broker.catalog.create_topics(news)
        failed = {
            n: r.code for n, r in zip(missing, created, strict=True) if isinstance(r, KafkaError)
        }
        answers = [
            a if a is not None else _created(ctx, t.name, failed)
            for t, a in zip(wanted, answers, strict=True)
        ]
    found = [a for a in answers if a is not None]
    response.answer(_with_operations(ctx, found) if with_operations else found)
    return response


def _with_operations(ctx: RequestContext, answers: list[_Answer]) -> list[_Answer]:
    """The answers with each described topic's authorized operations for this principal
    (encoded afresh: the cached encodings hold none)."""
    return [
        a.topic.replace(topic_authorized_operations=topic_operations(ctx, a.topic.name or ""))
        if isinstance(a, _TopicAnswer)
        else a
        for a in answers
    ]


def _created(ctx: RequestContext, name: str | None, failed: dict[str, int]) -> _Answer:
    topic = ctx.broker.catalog.get(name) if name else None
    if name is None or topic is None:
        code = failed.get(name or "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return MetadataResponseTopic(error_code=code, name=name)
    return _describe(topic)


def _lookup(
    ctx: RequestContext, name: str | None, topic_id: object, allow_create: bool
) -> _Answer | None:
    """The topic's answer, or None when it is to be auto-created."""
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
        return None
    if topic is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        return MetadataResponseTopic(error_code=code, name=name)
    return _describe(topic)


def _describe(topic: Topic) -> _TopicAnswer:
    answer = _ANSWERS.get(topic)
    if answer is None or not answer.describes(topic):
        answer = _ANSWERS[topic] = _TopicAnswer(topic)
    return answer


class _TopicAnswer:
    """A topic's Metadata answer, built and encoded once, reused while the topic is unchanged.

    With 10,000 partitions building and encoding the answer costs tens of milliseconds of
    event loop; clients ask for it far more often than it changes.
    """

    def __init__(self, topic: Topic) -> None:
        self.owners = list(topic.owners)
        self.epochs = list(topic.epochs)
        self.handoffs = dict(topic.handoffs)
        self.internal = topic.internal
        self.topic = MetadataResponseTopic(
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=[_partition(topic, i, owner) for i, owner in enumerate(topic.owners)],
        )
        # Known once, for the request metrics (only those of partitions being handed over).
        self.errors = [p.error_code for p in self.topic.partitions if p.error_code]
        self._encoded: dict[int, bytes] = {}

    def describes(self, topic: Topic) -> bool:
        return (
            topic.owners == self.owners
            and topic.epochs == self.epochs
            and topic.handoffs == self.handoffs
            and topic.internal == self.internal
        )

    def encoded(self, version: int) -> bytes:
        found = self._encoded.get(version)
        if found is None:
            found = self._encoded[version] = _encode_topic(self.topic, version)
        return found


def _partition(topic: Topic, index: int, owner: int) -> MetadataResponsePartition:
    moving = index in topic.handoffs or owner == NO_LEADER
    return MetadataResponsePartition(
        error_code=ErrorCode.LEADER_NOT_AVAILABLE if moving else 0,
        partition_index=index,
        leader_id=NO_LEADER if moving else owner,
        leader_epoch=topic.epochs[index],
        replica_nodes=[owner],
        isr_nodes=[] if moving else [owner],
    )


_Answer = MetadataResponseTopic | _TopicAnswer  # an error answer, or a described topic
_ANSWERS: weakref.WeakKeyDictionary[Topic, _TopicAnswer] = weakref.WeakKeyDictionary()


class _SplicedMetadataResponse(MetadataResponse):
    """A MetadataResponse whose topics are written from their cached encodings.

    The bytes are exactly what the generated encoder writes (a test compares them for every
    version): the response around the topics array is encoded with no topics and the
    array is spliced in where the generated encoder writes it, after ``controller_id``.
    """

    __slots__ = ("cached",)

    def __init__(self, **fields: Any) -> None:  # MetadataResponse's fields
        super().__init__(**fields)
        self.cached: list[_TopicAnswer | None] = []  # parallel to topics

    def answer(self, answers: list[_Answer]) -> None:
        """Set the topics: errors as plain answers, described topics from their cache."""
        self.topics = [a.topic if isinstance(a, _TopicAnswer) else a for a in answers]
        self.cached = [a if isinstance(a, _TopicAnswer) else None for a in answers]

    def error_codes(self) -> Iterator[int]:
        """The answer's error codes (zeros may be left out), for the request metrics: a
        cached topic's are known, its partitions not walked again."""
        for topic, answer in zip(self.topics, self.cached, strict=True):
            yield topic.error_code
            if answer is not None:
                yield from answer.errors
            else:
                yield from (p.error_code for p in topic.partitions)

    def write(self, out: bytearray, version: int) -> None:
        head = bytearray()
        MetadataResponse(
            self.throttle_time_ms,
            self.brokers,
            self.cluster_id,
            self.controller_id,
            [],
            self.cluster_authorized_operations,
        ).write(head, version)
        after = _after_topics(version)
        out += head[: len(head) - after - _empty_array_size(version)]
        write_array_length(out, len(self.topics), _flexible(version))
        for topic, answer in zip(self.topics, self.cached, strict=True):
            out += answer.encoded(version) if answer is not None else _encode_topic(topic, version)
        out += head[len(head) - after :]


def _flexible(version: int) -> bool:
    return MetadataResponse.is_flexible(version)


def _empty_array_size(version: int) -> int:
    return 1 if _flexible(version) else 4


def _after_topics(version: int) -> int:
    """Bytes the generated encoder writes after the topics array: cluster authorized
    operations (v8-10) and the tagged fields (flexible versions, always none here)."""
    return (4 if 8 <= version <= 10 else 0) + (1 if _flexible(version) else 0)


def _encode_topic(topic: MetadataResponseTopic, version: int) -> bytes:
    """One topic as the generated encoder writes it inside a MetadataResponse."""
    empty = MetadataResponse().encode(version)
    one = MetadataResponse(topics=[topic]).encode(version)
    start = len(empty) - _after_topics(version)  # the one-element array length ends here
    return one[start : len(one) - _after_topics(version)]


async def handle_describe_cluster(
    ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    # Kafka answers every client (the brokers are in Metadata anyway); the authorizer only
    # decides which operations include_cluster_authorized_operations reports.
    broker = ctx.broker
    response = DescribeClusterResponse(
        endpoint_type=request.endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=0,
        brokers=[DescribeClusterBroker(s.node_id, s.host, s.port) for s in _brokers(ctx)],
    )
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = cluster_operations(ctx)
    return response


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
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return Coordinator(key=key, node_id=-1, error_code=denied)
    elif not allowed(ctx, AclOperation.DESCRIBE, GROUP, key):
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
