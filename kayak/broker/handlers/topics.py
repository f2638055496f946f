"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import TOPIC, allowed, allowed_on_cluster
from kayak.errors import ErrorCode, KafkaError
from kayak.protocol.messages.create_partitions_request import CreatePartitionsRequest
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

# DescribeConfigs' config_source for a topic-level override, and for a default.
TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5

_DUPLICATE = "the request names this topic more than once"


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
    for wanted in request.topics:
        if wanted.name in duplicates:
            continue
        if is_internal_topic(wanted.name):
            response.topics.append(_internal_creation(ctx, wanted.name))
        elif not (may_create_any or allowed(ctx, AclOperation.CREATE, TOPIC, wanted.name)):
            response.topics.append(_unauthorized(wanted.name, "create"))
        else:
            response.topics.append(_create(ctx, wanted, request.validate_only))
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


def _create(
    ctx: RequestContext, wanted: CreatableTopic, validate_only: bool
) -> CreatableTopicResult:
    result = CreatableTopicResult(name=wanted.name)
    if wanted.replication_factor not in (-1, 1):
        result.error_code = ErrorCode.INVALID_REPLICATION_FACTOR
        result.error_message = f"replication factor {wanted.replication_factor}: one node holds 1"
        return result
    if wanted.assignments:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = "manual replica assignment is not supported on one node"
        return result
    partitions = wanted.num_partitions
    if partitions == -1:
        partitions = ctx.broker.config.num_partitions
    configs = {c.name: c.value for c in wanted.configs if c.value is not None}
    try:
        topic = ctx.broker.catalog.create(
            wanted.name, partitions, configs, validate_only=validate_only
        )
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message
        return result
    result.topic_id = topic.topic_id
    result.num_partitions = partitions
    result.replication_factor = 1
    result.configs = [
        CreatableTopicConfigs(
            name=name,
            value=value,
            config_source=TOPIC_CONFIG if name in configs else DEFAULT_CONFIG,
        )
        for name, value in topic.config.to_properties().items()
    ]
    return result


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
            try:
                catalog.delete(topic.name)
            except KafkaError as exc:
                result.error_code, result.error_message = exc.code, exc.message
        response.responses.append(result)
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
        elif wanted.assignments:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "manual replica assignment is not supported on one node"
        else:
            try:
                ctx.broker.catalog.add_partitions(wanted.name, wanted.count, request.validate_only)
            except KafkaError as exc:
                result.error_code, result.error_message = exc.code, exc.message
        response.results.append(result)
    return response
