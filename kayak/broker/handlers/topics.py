"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

from collections.abc import Sequence

from kayak.broker.context import RequestContext
from kayak.broker.handlers.config_entries import topic_entries
from kayak.broker.handlers.configs import warn_if_compacted
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import TOPIC, allowed, allowed_on_cluster
from kayak.broker.topic import NewTopic, Topic
from kayak.errors import ErrorCode, KafkaError
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kayak.protocol.messages.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicsRequest
from kayak.protocol.messages.delete_topics_response import (
    DeletableTopicResult,
    DeleteTopicsResponse,
)

_DUPLICATE = "the request names this topic more than once"
# CreateTopics answers carry each topic's configuration from v5 (KIP-525).
_FIRST_VERSION_WITH_CONFIGS = 5


def _duplicates(names: list[str | None]) -> set[str]:
    """Names a request lists more than once.

    Kafka acts on none of their entries and answers each such name once, with
    INVALID_REQUEST: a response naming a topic twice is a parse error for librdkafka's admin
    client, which then fails every topic of the request.
    """
    seen: set[str] = set()
    duplicates: set[str] = set()
    for name in names:
        if name is not None:
            if name in seen:
                duplicates.add(name)
            seen.add(name)
    return duplicates


async def handle_create_topics(
    ctx: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    response = CreateTopicsResponse()
    duplicates = _duplicates([t.name for t in request.topics])
    may_create_any = allowed_on_cluster(ctx, AclOperation.CREATE)
    creatable: list[tuple[CreatableTopicResult, NewTopic]] = []
    for wanted in request.topics:
        if wanted.name in duplicates:
            continue
        if is_internal_topic(wanted.name):
            response.topics.append(_internal_creation(ctx, wanted.name))
        elif not (may_create_any or allowed(ctx, AclOperation.CREATE, TOPIC, wanted.name)):
            response.topics.append(_unauthorized(wanted.name, "create"))
        else:
            result = CreatableTopicResult(name=wanted.name)
            new = _new_topic(ctx, wanted, result)
            response.topics.append(result)
            if new is not None:
                creatable.append((result, new))
    # Every topic of the request in one durable catalog write, answered once it is durable.
    created = await ctx.broker.catalog.create_topics(
        [new for _, new in creatable], request.validate_only
    )
    described: dict[tuple[object, ...], list[CreatableTopicConfigs]] = {}
    for (result, new), topic in zip(creatable, created, strict=True):
        _describe_created(ctx, result, new, topic, described)
        if not request.validate_only and isinstance(topic, Topic):
            warn_if_compacted(topic)
    for name in sorted(duplicates):
        response.topics.append(
            CreatableTopicResult(
                name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=_DUPLICATE
            )
        )
    return response


def _internal_creation(ctx: RequestContext, name: str) -> CreatableTopicResult:
    """The broker creates its internal topics itself, with the settings it relies on."""
    if name in ctx.broker.catalog:
        code, why = ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
    else:
        code, why = ErrorCode.INVALID_REQUEST, f"creation of internal topic {name} is prohibited"
    return CreatableTopicResult(name=name, error_code=code, error_message=why)


def _unauthorized(name: str, action: str) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=name,
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        error_message=f"not authorized to {action} topic {name}",
    )


def _new_topic(
    ctx: RequestContext, wanted: CreatableTopic, result: CreatableTopicResult
) -> NewTopic | None:
    """What to create, or None with ``result`` holding why not."""
    if wanted.assignments:
        if wanted.num_partitions != -1 or wanted.replication_factor != -1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = (
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
            return None
        indexes = sorted(a.partition_index for a in wanted.assignments)
        if indexes != list(range(len(indexes))):
            result.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
            result.error_message = "partitions in the replica assignment are not consecutive from 0"
            return None
        by_index = {a.partition_index: a.broker_ids for a in wanted.assignments}
        why = _misplaced(ctx, [by_index[i] for i in indexes], 0)
        if why is not None:
            result.error_code, result.error_message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, why
            return None
        partitions = len(indexes)
    else:
        if wanted.replication_factor not in (-1, 1):
            result.error_code = ErrorCode.INVALID_REPLICATION_FACTOR
            result.error_message = (
                f"replication factor {wanted.replication_factor}: one node holds 1"
            )
            return None
        partitions = wanted.num_partitions
        if partitions == -1:
            partitions = ctx.broker.config.num_partitions
    configs = {c.name: c.value for c in wanted.configs if c.value is not None}
    return NewTopic(wanted.name, partitions, configs)


def _misplaced(ctx: RequestContext, replicas: Sequence[Sequence[int]], first: int) -> str | None:
    """Why a manual replica assignment (the broker ids of partitions ``first``, ``first+1``,
    ...) cannot be honoured, or None: each partition has one replica, on the node kayak would
    choose (the only broker when it runs alone; round-robin over shards)."""
    nodes = {address.node_id for address in ctx.broker.cluster()}
    shards = ctx.broker.config.shard_count
    for offset, brokers in enumerate(replicas):
        index = first + offset
        unknown = sorted(set(brokers) - nodes)
        if unknown:
            return (
                f"partition {index}: the assignment includes broker {unknown[0]}, but no "
                f"broker with that id is registered (brokers: {sorted(nodes)})"
            )
        if len(brokers) != 1:
            return f"partition {index}: {len(brokers)} replicas; kayak keeps exactly one"
        if brokers[0] != index % shards:
            return (
                f"partition {index}: kayak places it on shard {index % shards}, "
                f"not on broker {brokers[0]}"
            )
    return None


def _describe_created(
    ctx: RequestContext,
    result: CreatableTopicResult,
    new: NewTopic,
    topic: Topic | KafkaError,
    described: dict[tuple[object, ...], list[CreatableTopicConfigs]],
) -> None:
    """Fill ``result`` in; ``described``: the configs already described in this answer
    (the topics of one request mostly share them, and read-only, they can be shared)."""
    if isinstance(topic, KafkaError):
        result.error_code, result.error_message = topic.code, topic.message
        return
    result.topic_id = topic.topic_id
    result.num_partitions = new.num_partitions
    result.replication_factor = 1
    if ctx.version < _FIRST_VERSION_WITH_CONFIGS:
        return
    key = (topic.config, *sorted(new.configs.items()))
    configs = described.get(key)
    if configs is None:
        entries = topic_entries(
            topic.config.to_properties(), dict(new.configs), ctx.broker.catalog.defaults
        )
        configs = described[key] = [
            CreatableTopicConfigs(name=e.name, value=e.value, config_source=e.source)
            for e in entries
        ]
    result.configs = configs


async def handle_delete_topics(
    ctx: RequestContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    response = DeleteTopicsResponse()
    if ctx.version < 6:
        names: list[tuple[str | None, object]] = [(n, None) for n in request.topic_names]
    else:
        names = [(t.name, t.topic_id) for t in request.topics]
    catalog = ctx.broker.catalog
    duplicates = _duplicates([name for name, _ in names])
    for duplicate in sorted(duplicates):
        response.responses.append(
            DeletableTopicResult(
                name=duplicate, error_code=ErrorCode.INVALID_REQUEST, error_message=_DUPLICATE
            )
        )
    deletable: list[DeletableTopicResult] = []
    for name, topic_id in names:
        if name in duplicates:
            continue
        result = DeletableTopicResult(name=name)
        topic = catalog.get(name) if name else catalog.by_id(topic_id)  # type: ignore[arg-type]
        # As in Kafka, authorization is decided before existence (by name), so that
        # whoever may not delete a topic cannot learn whether it exists.
        target = name or (topic.name if topic is not None else None)
        if target is not None and not allowed(ctx, AclOperation.DELETE, TOPIC, target):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "not authorized to delete this topic"
        elif topic is None:
            result.error_code = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
            )
        elif is_internal_topic(topic.name):
            # Nobody holds DELETE on an internal topic, super users included.
            result.name, result.topic_id = topic.name, topic.topic_id
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = f"{topic.name} is an internal topic and cannot be deleted"
        else:
            result.name, result.topic_id = topic.name, topic.topic_id
            deletable.append(result)
        response.responses.append(result)
    # One durable catalog write for the whole request (and whatever else is queued).
    failures = await catalog.delete_topics([result.name for result in deletable if result.name])
    for result, failure in zip(deletable, failures, strict=True):
        if failure is not None:
            result.error_code, result.error_message = failure.code, failure.message
    return response


async def handle_create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    response = CreatePartitionsResponse()
    duplicates = _duplicates([t.name for t in request.topics])
    for name in sorted(duplicates):
        response.results.append(
            CreatePartitionsTopicResult(
                name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=_DUPLICATE
            )
        )
    growing: list[tuple[CreatePartitionsTopicResult, int]] = []
    for wanted in request.topics:
        if wanted.name in duplicates:
            continue
        result = CreatePartitionsTopicResult(name=wanted.name)
        if not allowed(ctx, AclOperation.ALTER, TOPIC, wanted.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = f"not authorized to alter topic {wanted.name}"
        elif is_internal_topic(wanted.name):
            # Its partition count is part of how the broker stores state: never changed.
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = f"the partitions of internal topic {wanted.name} are fixed"
        elif wanted.assignments and (why := _new_partitions_misplaced(ctx, wanted)):
            result.error_code, result.error_message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, why
        else:
            growing.append((result, wanted.count))
        response.results.append(result)
    failures = await ctx.broker.catalog.create_partitions(
        [(result.name, count) for result, count in growing], request.validate_only
    )
    for (result, _), failure in zip(growing, failures, strict=True):
        if failure is not None:
            result.error_code, result.error_message = failure.code, failure.message
    return response


def _new_partitions_misplaced(ctx: RequestContext, wanted: CreatePartitionsTopic) -> str | None:
    """Why CreatePartitions' assignment of the new partitions cannot be honoured, or None."""
    topic = ctx.broker.catalog.get(wanted.name)
    if topic is None:
        return None  # answered UNKNOWN_TOPIC_OR_PARTITION by the catalog
    assignments = [a.broker_ids for a in wanted.assignments or []]
    added = wanted.count - topic.partition_count
    if len(assignments) != added:
        return f"{len(assignments)} assignments for {added} new partitions"
    return _misplaced(ctx, assignments, topic.partition_count)
