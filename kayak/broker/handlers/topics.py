"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

from kayak.broker.context import RequestContext
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
    for wanted in request.topics:
        if wanted.name not in duplicates:
            response.topics.append(_create(ctx, wanted, request.validate_only))
    for name in sorted(duplicates):
        response.topics.append(
            CreatableTopicResult(
                name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=_DUPLICATE
            )
        )
    return response


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
        if topic is None:
            result.error_code = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
            )
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
        if wanted.assignments:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "manual replica assignment is not supported on one node"
        else:
            try:
                ctx.broker.catalog.add_partitions(wanted.name, wanted.count, request.validate_only)
            except KafkaError as exc:
                result.error_code, result.error_message = exc.code, exc.message
        response.results.append(result)
    return response
