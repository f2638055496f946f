"""Topic and broker configs: DescribeConfigs, IncrementalAlterConfigs, and AlterConfigs for
brokers without the incremental API.

A topic's configs can be read and changed through any broker; a broker's only through that
broker, so broker resources are routed to their node.

AlterConfigs replaces every override, so it is sent as the overrides just read with the
changes applied. Apache Kafka answers an alteration once its controller has it and applies
it on the brokers a moment later: a read right after may not show it yet, and a replacement
built on that read would undo it. So the client remembers what it set and deleted lately
(:class:`_RecentWrites`), and a replacement reads again, for a few seconds at most, until the
read shows all of that; a value still different then was changed by someone else since, and
that newer value is kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from kayak.client.admin._core import ANY, BROKER_RETRY, AdminCore, Target, item_error
from kayak.client.admin.models import ConfigEntry, ConfigResource, ConfigSource, ResourceType
from kayak.client.backoff import Deadline
from kayak.client.connection import BrokerConnection
from kayak.errors import (
    BrokerNotAvailableError,
    ErrorCode,
    InvalidConfigurationError,
    UnsupportedVersionError,
)
from kayak.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages import alter_configs_request as legacy
from kayak.protocol.messages import incremental_alter_configs_request as incremental
from kayak.protocol.messages.alter_configs_response import AlterConfigsResponse
from kayak.protocol.messages.describe_configs_request import DescribeConfigsResource
from kayak.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
)
from kayak.protocol.messages.incremental_alter_configs_response import (
    IncrementalAlterConfigsResponse,
)

log = logging.getLogger(__name__)

SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
_SOURCE_VERSION = 1  # DescribeConfigs v1+ tells each value's source

# A write this client made is waited for by a replacing alteration within this long of it;
# older ones are taken as applied (Kafka's brokers apply a change within milliseconds).
RECENT_WRITE_S = 30.0
# How long a replacing alteration reads again for its recent writes to show, at most.
SETTLE_WAIT_S = 3.0
_REREAD_DELAY_S = 0.05


class _RecentWrites:
    """What one admin client set (a value) or deleted (None) lately, per resource, and when."""

    def __init__(self) -> None:
        self._by_resource: dict[ConfigResource, dict[str, tuple[str | None, float]]] = {}

    def record(self, resource: ConfigResource, changes: Mapping[str, str | None]) -> None:
        now = time.monotonic()
        written = self._by_resource.setdefault(resource, {})
        written.update((name, (value, now)) for name, value in changes.items())

    def not_shown(self, resource: ConfigResource, current: Mapping[str, ConfigEntry]) -> list[str]:
        """The recent writes to ``resource`` that ``current`` (a read) does not show yet;
        older writes are forgotten."""
        written = self._by_resource.get(resource)
        if not written:
            return []
        oldest = time.monotonic() - RECENT_WRITE_S
        for name in [n for n, (_, at) in written.items() if at < oldest]:
            del written[name]
        return [name for name, (value, _) in written.items()
                if not _shows(current.get(name), value)]  # fmt: skip


def _shows(entry: ConfigEntry | None, value: str | None) -> bool:
    if value is None:  # deleted: no override left
        return entry is None or not entry.is_override
    if entry is None or not entry.is_override:
        return False
    return entry.is_sensitive or entry.value == value  # a secret's value is never shown


_recent_writes: weakref.WeakKeyDictionary[AdminCore, _RecentWrites] = weakref.WeakKeyDictionary()


def recent_writes(core: AdminCore) -> _RecentWrites:
    """The recent writes of the admin client ``core`` belongs to."""
    writes = _recent_writes.get(core)
    if writes is None:
        writes = _recent_writes[core] = _RecentWrites()
    return writes


def resource_of(resource: str | int | ConfigResource) -> ConfigResource:
    """A ``ConfigResource`` from a topic name (str), a broker id (int) or itself."""
    if isinstance(resource, ConfigResource):
        return resource
    if isinstance(resource, bool):
        raise TypeError(f"expected a topic name, broker id or ConfigResource, not {resource!r}")
    if isinstance(resource, int):
        return ConfigResource.broker(resource)
    return ConfigResource.topic(resource)


def config_value(name: str, value: object) -> str:
    """A config value as the string the protocol carries (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TypeError(f"config {name!r}: expected a str, int, float or bool, not {value!r}")


# -- DescribeConfigs ---------------------------------------------------------------------


async def describe_configs(
    core: AdminCore,
    resource: ConfigResource,
    keys: Collection[str] | None,
    deadline: Deadline,
) -> dict[str, ConfigEntry]:
    async def send(connection: BrokerConnection, deadline: Deadline) -> dict[str, ConfigEntry]:
        return await fetch_configs(core, connection, resource, keys, deadline)

    return await core.single(
        send,
        deadline,
        "describe configs",
        target=await route(core, resource),
        label=str(resource),
    )


async def route(core: AdminCore, resource: ConfigResource) -> Target:
    """Where requests about ``resource`` go: a broker's to that broker, others anywhere.

    Raises ``BrokerNotAvailableError`` for a broker id the cluster does not have.
    """
    if resource.type is not ResourceType.BROKER or not resource.name:
        return ANY
    node = int(resource.name) if resource.name.lstrip("-").isdigit() else None
    cluster = core.cluster
    if node not in cluster.metadata.brokers:
        await cluster.refresh_metadata()
    if node is None or node not in cluster.metadata.brokers:
        known = ", ".join(str(n) for n in sorted(cluster.metadata.brokers))
        raise BrokerNotAvailableError(
            f"{resource}: the cluster has no such broker (it has {known})"
        )
    return node


async def fetch_configs(
    core: AdminCore,
    connection: BrokerConnection,
    resource: ConfigResource,
    keys: Collection[str] | None,
    deadline: Deadline,
) -> dict[str, ConfigEntry]:
    """One DescribeConfigs round trip on ``connection``; raises the resource's error.

    Every config is asked for and ``keys`` picked here: some brokers (Tansu) drop the
    connection when a request names keys, and the answer is small either way.
    """
    version = connection.version_for(DescribeConfigsRequest)
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsResource(resource.type, resource.name, None)]
    )
    response: DescribeConfigsResponse = await core.request(connection, request, deadline, version)
    for result in response.results:
        if result.resource_name == resource.name and result.resource_type == resource.type:
            if result.error_code:
                missing = result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = result.error_message or ("does not exist" if missing else None)
                raise item_error(result.error_code, str(resource), message)
            entries = (
                _entry(c, resource, version)
                for c in result.configs
                if keys is None or c.name in keys
            )
            return {e.name: e for e in sorted(entries, key=lambda e: e.name)}
    raise item_error(ErrorCode.UNKNOWN_SERVER_ERROR, str(resource), "not in the response")


def _entry(
    config: DescribeConfigsResourceResult, resource: ConfigResource, version: int
) -> ConfigEntry:
    if version >= _SOURCE_VERSION:
        source = ConfigSource.of(config.config_source)
        is_default = source is ConfigSource.DEFAULT_CONFIG
    else:  # v0 says only whether the value is a default
        is_default = config.is_default
        source = ConfigSource.DEFAULT_CONFIG if is_default else _override_source(resource)
    return ConfigEntry(
        name=config.name,
        value=config.value,
        source=source,
        is_default=is_default,
        read_only=config.read_only,
        is_sensitive=config.is_sensitive,
    )


def _override_source(resource: ConfigResource) -> ConfigSource:
    if resource.type is ResourceType.TOPIC:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if resource.type is ResourceType.BROKER:
        return ConfigSource.DYNAMIC_BROKER_CONFIG
    return ConfigSource.UNKNOWN


# -- AlterConfigs ------------------------------------------------------------------------


async def alter_configs(
    core: AdminCore,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    validate_only: bool,
    use_incremental: bool | None,
    deadline: Deadline,
) -> None:
    """Set (str) or delete (None) configs of ``resource``.

    IncrementalAlterConfigs where the broker has it (or ``use_incremental`` is True); else
    AlterConfigs, which replaces every override: the current ones are read first and sent
    back with the changes applied.
    """

    async def send(connection: BrokerConnection, deadline: Deadline) -> None:
        incremental_ok = _has(connection, IncrementalAlterConfigsRequest)
        if use_incremental or (use_incremental is None and incremental_ok):
            await _incremental(core, connection, resource, changes, validate_only, deadline)
        else:
            await _replace(core, connection, resource, changes, validate_only, deadline)
        if not validate_only:
            recent_writes(core).record(resource, changes)

    await core.single(
        send,
        deadline,
        "alter configs",
        target=await route(core, resource),
        retry=BROKER_RETRY,
        label=str(resource),
    )


def _has(connection: BrokerConnection, cls: type[IncrementalAlterConfigsRequest]) -> bool:
    try:
        connection.version_for(cls)
    except UnsupportedVersionError:
        return False
    return True


async def _incremental(
    core: AdminCore,
    connection: BrokerConnection,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    validate_only: bool,
    deadline: Deadline,
) -> None:
    configs = [
        incremental.AlterableConfig(name, SET if value is not None else DELETE, value)
        for name, value in changes.items()
    ]
    request = IncrementalAlterConfigsRequest(
        resources=[incremental.AlterConfigsResource(resource.type, resource.name, configs)],
        validate_only=validate_only,
    )
    response: IncrementalAlterConfigsResponse = await core.request(connection, request, deadline)
    _raise_resource_errors(response.responses, resource)


async def _replace(
    core: AdminCore,
    connection: BrokerConnection,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    validate_only: bool,
    deadline: Deadline,
) -> None:
    current = await _read_after_writes(core, connection, resource, deadline)
    overrides: dict[str, str | None] = {
        e.name: e.value for e in current.values() if e.is_override and e.name not in changes
    }
    secret = sorted(name for name, value in overrides.items() if value is None)
    if secret:
        raise InvalidConfigurationError(
            f"{resource}: the broker has no IncrementalAlterConfigs, and AlterConfigs would "
            f"drop the sensitive override(s) {', '.join(secret)}, whose values it does not show"
        )
    overrides.update({k: v for k, v in changes.items() if v is not None})
    configs = [legacy.AlterableConfig(k, v) for k, v in sorted(overrides.items())]
    log.debug("AlterConfigs %s: replacing the overrides with %s", resource, overrides)
    request = AlterConfigsRequest(
        resources=[legacy.AlterConfigsResource(resource.type, resource.name, configs)],
        validate_only=validate_only,
    )
    response: AlterConfigsResponse = await core.request(connection, request, deadline)
    _raise_resource_errors(response.responses, resource)


async def _read_after_writes(
    core: AdminCore, connection: BrokerConnection, resource: ConfigResource, deadline: Deadline
) -> dict[str, ConfigEntry]:
    """The configs of ``resource`` once they show this client's recent writes (see the module
    docstring), or as read after :data:`SETTLE_WAIT_S`."""
    writes = recent_writes(core)
    give_up_at = time.monotonic() + min(SETTLE_WAIT_S, deadline.remaining() / 2)
    while True:
        current = await fetch_configs(core, connection, resource, None, deadline)
        missing = writes.not_shown(resource, current)
        if not missing:
            return current
        if time.monotonic() >= give_up_at:
            log.info("%s: %s still differ from what this client set %.0fs after; taking "
                     "them as changed by someone else since", resource, ", ".join(missing),
                     SETTLE_WAIT_S)  # fmt: skip
            return current
        log.debug("%s: the read does not show %s yet; reading again", resource, missing)
        await asyncio.sleep(_REREAD_DELAY_S)


class _ResourceResult(Protocol):
    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...


def _raise_resource_errors(results: Sequence[_ResourceResult], resource: ConfigResource) -> None:
    for result in results:
        if result.error_code:
            raise item_error(result.error_code, str(resource), result.error_message)
