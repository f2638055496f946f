"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (and the broker's view)."""

from __future__ import annotations

from collections.abc import Callable

from kayak.broker.catalog import Topic
from kayak.broker.context import RequestContext
from kayak.broker.handlers.topics import DEFAULT_CONFIG, TOPIC_CONFIG
from kayak.broker.security.acls import AclOperation
from kayak.broker.security.acls.checks import TOPIC, allowed, allowed_on_cluster
from kayak.broker.security.acls.internal_topics import is_internal_topic
from kayak.errors import ErrorCode, InvalidConfigurationError, KafkaError
from kayak.protocol.messages.alter_configs_request import AlterConfigsRequest
from kayak.protocol.messages.alter_configs_response import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from kayak.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kayak.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kayak.protocol.messages.incremental_alter_configs_request import (
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse as IncrementalResult,
)
from kayak.protocol.messages.incremental_alter_configs_response import (
    IncrementalAlterConfigsResponse,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1
_STRING, _INT, _LONG = 2, 3, 5  # DescribeConfigs config_type codes

# A broker describes its topic defaults under Kafka's broker property names ("Server Default
# Property" in Kafka's topic config documentation), not under the topic-level names.
_BROKER_NAMES = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
}


_DESCRIBE, _ALTER = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS


def _refusal(
    ctx: RequestContext, resource_type: int, name: str, operation: AclOperation
) -> tuple[int, str] | None:
    """Kafka's authorization answer for a config resource: the topic's, or the cluster's
    for a broker; None when allowed (or for a resource type answered otherwise)."""
    verb = "describe" if operation is _DESCRIBE else "alter"
    if resource_type == TOPIC_RESOURCE and operation is not _DESCRIBE and is_internal_topic(name):
        # Retention or cleanup.policy changed on __consumer_offsets could drop committed
        # offsets: as with delete, nobody holds ALTER_CONFIGS on an internal topic.
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{name} is internal: its configs are fixed"
    if resource_type == TOPIC_RESOURCE and not allowed(ctx, operation, TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to {verb} configs of {name}"
    if resource_type == BROKER_RESOURCE and not allowed_on_cluster(ctx, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"not authorized to {verb} broker configs"
    return None


async def handle_describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    response = DescribeConfigsResponse()
    for resource in request.resources:
        response.results.append(_describe(ctx, resource))
    return response


def _describe(ctx: RequestContext, resource: DescribeConfigsResource) -> DescribeConfigsResult:
    result = DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    refusal = _refusal(ctx, resource.resource_type, resource.resource_name, _DESCRIBE)
    if refusal is not None:
        result.error_code, result.error_message = refusal
        return result
    if resource.resource_type == BROKER_RESOURCE:
        if resource.resource_name not in ("", str(ctx.broker.node_id)):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = (
                f"unexpected broker id {resource.resource_name!r}: this is broker "
                f"{ctx.broker.node_id} (or use the empty name)"
            )
            return result
        properties = {
            _BROKER_NAMES.get(name, name): value
            for name, value in ctx.broker.config.log.to_properties().items()
        }
        overrides: dict[str, str] = {}
    elif resource.resource_type == TOPIC_RESOURCE:
        topic = ctx.broker.catalog.get(resource.resource_name)
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"topic {resource.resource_name!r} does not exist"
            return result
        properties, overrides = topic.config.to_properties(), topic.overrides
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {resource.resource_type} is not supported"
        return result
    keys = resource.configuration_keys
    for name, value in sorted(properties.items()):
        if keys is not None and name not in keys:
            continue
        result.configs.append(
            DescribeConfigsResourceResult(
                name=name,
                value=value,
                is_default=name not in overrides,
                config_source=TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG,
                config_type=_STRING if not value.lstrip("-").isdigit() else _LONG,
            )
        )
    return result


async def handle_alter_configs(
    ctx: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    """Replace a topic's overrides with exactly the given set (AlterConfigs semantics)."""
    response = AlterConfigsResponse()
    for resource in request.resources:
        result = AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        wanted = {c.name: c.value for c in resource.configs if c.value is not None}

        def replace_all(_: Topic, wanted: dict[str, str] = wanted) -> dict[str, str]:
            return wanted

        await _alter(ctx, result, replace_all, request.validate_only)
        response.responses.append(result)
    return response


async def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    """Set or delete single overrides (append/subtract apply to list configs only)."""
    response = IncrementalAlterConfigsResponse()
    for resource in request.resources:
        result = IncrementalResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )

        def apply(topic: Topic, resource: AlterConfigsResource = resource) -> dict[str, str]:
            return _apply(topic, resource)

        await _alter(ctx, result, apply, request.validate_only)
        response.responses.append(result)
    return response


def _apply(topic: Topic, resource: AlterConfigsResource) -> dict[str, str]:
    overrides = dict(topic.overrides)
    for change in resource.configs:
        if change.config_operation == SET and change.value is not None:
            overrides[change.name] = change.value
        elif change.config_operation == DELETE:
            overrides.pop(change.name, None)
        else:
            raise _invalid(f"operation {change.config_operation} on {change.name} is not supported")
    return overrides


def _invalid(message: str) -> KafkaError:
    return InvalidConfigurationError(message)


async def _alter(
    ctx: RequestContext,
    result: AlterConfigsResourceResponse | IncrementalResult,
    overrides_for: Callable[[Topic], dict[str, str]],
    validate_only: bool,
) -> None:
    refusal = _refusal(ctx, result.resource_type, result.resource_name, _ALTER)
    if refusal is not None:
        result.error_code, result.error_message = refusal
        return
    if result.resource_type != TOPIC_RESOURCE:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = "only topic configs can be altered"
        return
    topic = ctx.broker.catalog.get(result.resource_name)
    if topic is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"topic {result.resource_name!r} does not exist"
        return
    try:
        overrides = overrides_for(topic)
        await ctx.broker.catalog.alter_topic_configs(topic.name, overrides, validate_only)
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message
