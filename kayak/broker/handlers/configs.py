"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and the broker.

Every topic configuration of Kafka is described (see :mod:`.config_entries` for sources and
synonyms) and may be set; IncrementalAlterConfigs APPENDs to and SUBTRACTs from list
configurations. A broker configuration Kafka cannot change at runtime is refused as Kafka
refuses it (INVALID_REQUEST, "Cannot update these configs dynamically"); Kafka's dynamic
configs kayak does not use, and custom ones, are accepted and kept, as Kafka accepts them;
those kayak acts on are refused unless they leave the value as it is (kayak applies no
broker change at runtime): see :mod:`.broker_configs`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kayak.broker.context import RequestContext
from kayak.broker.handlers import broker_configs
from kayak.broker.handlers.broker_configs import with_kept
from kayak.broker.handlers.config_entries import (
    DEFAULT_CONFIG,
    Entry,
    broker_entries,
    topic_entries,
)
from kayak.broker.log.config_defs import LIST_CONFIGS, TOPIC_CONFIGS
from kayak.broker.security.acls import AclOperation
from kayak.broker.security.acls.checks import TOPIC, allowed, allowed_on_cluster
from kayak.broker.security.acls.internal_topics import is_internal_topic
from kayak.broker.topic import Topic
from kayak.errors import (
    ErrorCode,
    InvalidConfigurationError,
    InvalidRequestError,
    KafkaError,
)
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
    DescribeConfigsSynonym,
)
from kayak.protocol.messages.incremental_alter_configs_request import (
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse as IncrementalResult,
)
from kayak.protocol.messages.incremental_alter_configs_response import (
    IncrementalAlterConfigsResponse,
)

log = logging.getLogger(__name__)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_VERBS = {APPEND: "append", SUBTRACT: "subtract"}

_DESCRIBE, _ALTER = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS

Change = tuple[str, int, str | None]  # (name, operation, value) of one requested change
_Result = AlterConfigsResourceResponse | IncrementalResult


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


def _wrong_broker(ctx: RequestContext, name: str) -> str | None:
    if name in ("", str(ctx.broker.node_id)):
        return None
    return (
        f"unexpected broker id {name!r}: this is broker {ctx.broker.node_id} "
        "(or use the empty name)"
    )


# -- DescribeConfigs ----------------------------------------------------------------------------


async def handle_describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    synonyms = ctx.version >= 1 and request.include_synonyms
    response = DescribeConfigsResponse()
    for resource in request.resources:
        response.results.append(_describe(ctx, resource, synonyms))
    return response


def _describe(
    ctx: RequestContext, resource: DescribeConfigsResource, synonyms: bool
) -> DescribeConfigsResult:
    result = DescribeConfigsResult(
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        error_message=None,
    )
    refusal = _refusal(ctx, resource.resource_type, resource.resource_name, _DESCRIBE)
    if refusal is not None:
        result.error_code, result.error_message = refusal
        return result
    entries: list[Entry]
    if resource.resource_type == BROKER_RESOURCE:
        wrong = _wrong_broker(ctx, resource.resource_name)
        if wrong is not None:
            result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, wrong
            return result
        entries = _broker_entries(ctx)
    elif resource.resource_type == TOPIC_RESOURCE:
        topic = ctx.broker.catalog.get(resource.resource_name)
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"topic {resource.resource_name!r} does not exist"
            return result
        entries = list(
            topic_entries(
                topic.config.to_properties(), topic.overrides, ctx.broker.catalog.defaults
            )
        )
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {resource.resource_type} is not supported"
        return result
    keys = resource.configuration_keys
    result.configs = [
        _described(entry, synonyms) for entry in entries if keys is None or entry.name in keys
    ]
    return result


def _broker_entries(ctx: RequestContext) -> list[Entry]:
    """The broker's configs, with those accepted at runtime (broker_configs) in front."""
    coordinator = ctx.broker.coordinator
    configured = broker_entries(ctx.broker.config, coordinator.config if coordinator else None)
    return with_kept(ctx.broker, configured)


def _described(entry: Entry, synonyms: bool) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        is_default=entry.source == DEFAULT_CONFIG,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=[DescribeConfigsSynonym(*s) for s in entry.synonyms] if synonyms else [],
        config_type=entry.type,
        documentation=None,
    )


# -- AlterConfigs, IncrementalAlterConfigs --------------------------------------------------------


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
        changes: list[Change] = [(name, SET, value) for name, value in wanted.items()]

        def replace_all(_: Topic, wanted: dict[str, str] = wanted) -> dict[str, str]:
            return wanted

        await _alter(ctx, result, changes, replace_all, request.validate_only, replace=True)
        response.responses.append(result)
    return response


async def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    """SET, DELETE, and APPEND/SUBTRACT on list configurations, one resource at a time."""
    response = IncrementalAlterConfigsResponse()
    for resource in request.resources:
        result = IncrementalResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        changes: list[Change] = [(c.name, c.config_operation, c.value) for c in resource.configs]

        def apply(topic: Topic, changes: list[Change] = changes) -> dict[str, str]:
            return applied(topic.overrides, topic.config.to_properties(), changes)

        await _alter(ctx, result, changes, apply, request.validate_only)
        response.responses.append(result)
    return response


def applied(
    overrides: dict[str, str], effective: dict[str, str], changes: Sequence[Change]
) -> dict[str, str]:
    """A topic's overrides after IncrementalAlterConfigs ``changes`` (validated later, as a
    whole, by the catalog). APPEND adds the list items not there yet, SUBTRACT removes
    items, both starting from the current value (the override, else the default)."""
    result = dict(overrides)
    for name, operation, value in changes:
        if operation == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for : {name}")
            result[name] = value
        elif operation == DELETE:
            result.pop(name, None)
        elif operation in _VERBS:
            if name not in TOPIC_CONFIGS:
                raise InvalidConfigurationError(f"Unknown topic config name: {name}")
            if name not in LIST_CONFIGS:
                raise InvalidConfigurationError(
                    f"Config value {_VERBS[operation]} is not allowed for config key: {name}"
                )
            current = _items(result.get(name, effective.get(name, "")))
            given = _items(value or "")
            if operation == APPEND:
                current += [item for item in given if item not in current]
            else:
                current = [item for item in current if item not in given]
            result[name] = ",".join(current)
        else:
            raise InvalidRequestError(f"unknown config operation {operation} on {name}")
    return result


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


async def _alter(
    ctx: RequestContext,
    result: _Result,
    changes: list[Change],
    overrides_for: Callable[[Topic], dict[str, str]],
    validate_only: bool,
    *,
    replace: bool = False,
) -> None:
    refusal = _refusal(ctx, result.resource_type, result.resource_name, _ALTER)
    if refusal is not None:
        result.error_code, result.error_message = refusal
        return
    names = [name for name, _, _ in changes]
    if len(set(names)) != len(names):
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = "Error due to duplicate config keys"
        return
    if result.resource_type == BROKER_RESOURCE:
        _alter_broker(ctx, result, changes, validate_only, replace)
        return
    if result.resource_type != TOPIC_RESOURCE:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {result.resource_type} is not supported"
        return
    topic = ctx.broker.catalog.get(result.resource_name)
    if topic is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"topic {result.resource_name!r} does not exist"
        return
    was_compacted = topic.config.compacted
    try:
        overrides = overrides_for(topic)
        await ctx.broker.catalog.alter_topic_configs(topic.name, overrides, validate_only)
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message
        return
    if not validate_only and not was_compacted:
        warn_if_compacted(topic)


def warn_if_compacted(topic: Topic) -> None:
    """One line for a topic that asks for compaction: the log cleaner takes it from here
    (``kayak.broker.log.cleaner``; unless ``log.cleaner.enable`` is false)."""
    if topic.config.compacted and not topic.internal:
        log.info(
            "topic %s: cleanup.policy=%s: the log cleaner keeps each key's latest record",
            topic.name,
            topic.config.cleanup_policy,
        )


def _alter_broker(
    ctx: RequestContext, result: _Result, changes: list[Change], validate_only: bool,
    replace: bool,
) -> None:  # fmt: skip
    """Kafka's answer (see :mod:`.broker_configs`); what is accepted is kept."""
    wrong = _wrong_broker(ctx, result.resource_name)
    if wrong is not None:
        result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, wrong
        return
    current = {entry.name: entry for entry in _broker_entries(ctx)}
    refused = broker_configs.refusal(ctx.broker, result.resource_name, changes, current)
    if refused is not None:
        result.error_code, result.error_message = refused
        return
    if not validate_only:
        broker_configs.keep(ctx.broker, result.resource_name, changes, replace)
