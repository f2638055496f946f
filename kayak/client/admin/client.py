"""``Admin``: the asyncio admin client (topics, partitions, groups, offsets, configs).

Routing follows Kafka's admin client: topic administration goes to the controller (any
broker if it cannot be reached), group calls to the group's coordinator, ListGroups to every
broker, ListOffsets and DeleteRecords to each partition's leader, configs to any broker (a
broker's own configs to that broker). See ``kayak.client.admin`` for the error conventions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from kayak.client.admin import _commit, _configs, _groups, _offsets, _topics
from kayak.client.admin._core import AdminCore, settle
from kayak.client.admin.models import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    NewTopic,
    OffsetAndTimestamp,
    OffsetSpec,
    TopicDescription,
)
from kayak.client.cluster import Cluster
from kayak.client.config import AdminConfig
from kayak.client.statistics import (
    ClientStatistics,
    StatsReporter,
    cluster_connections,
    reporter_for,
)
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import KafkaTimeoutError, KayakError

log = logging.getLogger(__name__)

ConfigValue = str | int | float | bool


class AdminClosedError(KayakError):
    """The admin client was used after ``close()``."""


class Admin:
    """Kafka's admin operations over asyncio, against any Kafka-compatible cluster.

    ``Admin(config, **kwargs)`` takes ``AdminConfig`` settings (a mapping of Kafka property
    names and/or keyword arguments, ``bootstrap_servers="host:9092"``). Use it as ``async
    with Admin(...) as admin:`` or call ``await admin.start()`` and ``await admin.close()``;
    calls made before ``start()`` start it.

    Calls taking many items (topics, groups, partitions) act on each separately. If any
    fails, the error of the first one that failed is raised (a ``kayak.errors`` exception
    whose message starts with the item, e.g. ``TopicExistsError("orders: ...")``) after the
    others were done. Pass ``errors={}`` to collect failures there instead: the call then
    returns the successful items only. Each call ends within ``timeout_ms`` (default
    ``default.api.timeout.ms``), each request within ``request.timeout.ms``; retriable
    failures are retried with backoff until then.
    """

    def __init__(
        self, config: AdminConfig | Mapping[str, object] | None = None, /, **kwargs: object
    ) -> None:
        if isinstance(config, AdminConfig):
            if kwargs:
                raise TypeError("pass settings either as an AdminConfig or as keywords, not both")
            self.config = config
        else:
            self.config = AdminConfig.from_user(config, **kwargs)
        self.cluster = Cluster(self.config)
        self._core = AdminCore(self.config, self.cluster)
        self._statistics = ClientStatistics(
            "admin", self.config.client_id, lambda: cluster_connections(self.cluster)
        )
        self._reporter: StatsReporter | None = None
        self._started = False
        self._closed = False
        self._starting: asyncio.Lock | None = None

    def __repr__(self) -> str:
        servers = ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers)
        state = "closed" if self._closed else "started" if self._started else "new"
        return f"<Admin {servers} {state}>"

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to a bootstrap server and load metadata, within ``default.api.timeout.ms``."""
        if self._closed:
            raise AdminClosedError("the admin client is closed")
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._started:
                return
            deadline = self._core.deadline(None)
            try:
                async with asyncio.timeout(deadline.remaining()):
                    await self.cluster.bootstrap()
            except TimeoutError:
                servers = ", ".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers)
                raise KafkaTimeoutError(
                    f"none of the bootstrap servers ({servers}) answered within "
                    f"default.api.timeout.ms ({self.config.default_api_timeout_ms} ms)"
                ) from None
            self._started = True
            self._reporter = reporter_for(
                self.config.statistics_interval_ms, self.config.stats_cb, self.statistics
            )
            if self._reporter is not None:
                self._reporter.start()

    async def close(self) -> None:
        """Close every connection; the client cannot be used afterwards."""
        self._closed = True
        if self._reporter is not None:
            await self._reporter.stop()
        await self.cluster.close()

    def statistics(self) -> dict[str, Any]:
        """Requests, bytes and round-trip times per broker connection, as a dict laid out
        like librdkafka's statistics (``type`` "admin"; see :mod:`kayak.client.statistics`).
        Also delivered every ``statistics.interval.ms`` to ``stats_cb``."""
        return self._statistics.snapshot()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _ready(self) -> AdminCore:
        if not self._started:
            await self.start()
        elif self._closed:
            raise AdminClosedError("the admin client is closed")
        return self._core

    # -- topics -----------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Iterable[NewTopic | str],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> dict[str, CreatedTopic]:
        """Create topics (a bare name takes the broker's defaults); ``validate_only`` only
        checks that they could be created. Returns what the broker created, by name."""
        core = await self._ready()
        wanted = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        outcome = await _topics.create_topics(
            core, wanted, validate_only, core.deadline(timeout_ms)
        )
        return settle(outcome, errors)

    async def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> list[str]:
        """Delete topics; returns the names deleted."""
        core = await self._ready()
        outcome = await _topics.delete_topics(core, list(names), core.deadline(timeout_ms))
        return list(settle(outcome, errors))

    async def create_partitions(
        self,
        totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> list[str]:
        """Grow topics to the given total partition counts; returns the topics grown."""
        for topic, total in totals.items():
            _check_int(total, 1, f"{topic}: the partition count")
        core = await self._ready()
        outcome = await _topics.create_partitions(
            core, dict(totals), validate_only, core.deadline(timeout_ms)
        )
        return list(settle(outcome, errors))

    async def list_topics(
        self, internal: bool = False, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Every topic (internal ones too with ``internal=True``), sorted by name."""
        core = await self._ready()
        response = await _topics.metadata(core, None, core.deadline(timeout_ms))
        found: dict[str, TopicDescription] = {}
        for topic in response.topics:
            described = _topics.describe_topic(topic)
            if isinstance(described, KayakError):
                log.debug("list_topics: skipping %s", described)
            elif internal or not described.internal:
                found[described.name] = described
        return dict(sorted(found.items()))

    async def describe_topics(
        self,
        names: Iterable[str],
        *,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas, in-sync replicas and id of each topic."""
        core = await self._ready()
        wanted = list(dict.fromkeys(names))
        response = await _topics.metadata(core, wanted, core.deadline(timeout_ms))
        answered = {t.name: _topics.describe_topic(t) for t in response.topics if t.name}
        outcome: dict[str, TopicDescription | KayakError] = {
            name: answered.get(name, _topics.no_such_topic(name)) for name in wanted
        }
        return settle(outcome, errors)

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, controller and brokers (DescribeCluster, else Metadata)."""
        core = await self._ready()
        return await _topics.describe_cluster(core, core.deadline(timeout_ms))

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(
        self, *, timeout_ms: int | None = None, errors: dict[int, KayakError] | None = None
    ) -> list[GroupListing]:
        """Every group of every broker, sorted by id. With ``errors``, brokers that failed
        to answer are collected there (by node id) instead of raising."""
        core = await self._ready()
        outcome = await _groups.list_groups(core, core.deadline(timeout_ms))
        by_broker = settle(outcome, errors, label=lambda node: f"broker {node}")
        merged = {g.group_id: g for listed in by_broker.values() for g in listed}
        return sorted(merged.values(), key=lambda g: g.group_id)

    async def describe_groups(
        self,
        group_ids: Iterable[str],
        *,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> dict[str, GroupDescription]:
        """State, protocol and members (with decoded assignments) of each group. A group
        that does not exist is described with state ``Dead`` and no members, as Kafka does."""
        core = await self._ready()
        outcome = await _groups.describe_groups(core, list(group_ids), core.deadline(timeout_ms))
        return settle(outcome, errors)

    async def delete_groups(
        self,
        group_ids: Iterable[str],
        *,
        timeout_ms: int | None = None,
        errors: dict[str, KayakError] | None = None,
    ) -> list[str]:
        """Delete groups that have no members, with their committed offsets."""
        core = await self._ready()
        outcome = await _groups.delete_groups(core, list(group_ids), core.deadline(timeout_ms))
        return list(settle(outcome, errors))

    async def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
        errors: dict[TopicPartition, KayakError] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets, sorted, for ``partitions`` or all it committed.
        Partitions without a committed offset are left out."""
        core = await self._ready()
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        committed = await _groups.group_offsets(core, group_id, wanted, core.deadline(timeout_ms))
        return dict(sorted(settle(committed, errors).items()))

    async def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: int | None = None,
        errors: dict[TopicPartition, KayakError] | None = None,
    ) -> list[TopicPartition]:
        """Commit ``offsets`` for a group from outside it (Kafka's
        ``alterConsumerGroupOffsets``); returns the partitions committed. The coordinator
        refuses while the group has active members (UNKNOWN_MEMBER_ID): stop them first."""
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            committed = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            _check_int(committed.offset, 0, f"{tp}: the offset to commit")
            wanted[TopicPartition(*tp)] = committed
        core = await self._ready()
        outcome = await _commit.alter_group_offsets(
            core, group_id, wanted, core.deadline(timeout_ms)
        )
        return list(settle(outcome, errors))

    async def group_lag(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Records each committed partition is behind: latest offset minus committed offset.

        Partitions whose latest offset cannot be had (a deleted topic) are left out.
        """
        deadline = self._core.deadline(timeout_ms)
        committed = await self.list_group_offsets(group_id, timeout_ms=int(deadline.remaining_ms()))
        failed: dict[TopicPartition, KayakError] = {}
        latest = await self.list_offsets(
            dict.fromkeys(committed, OffsetSpec.LATEST),
            timeout_ms=int(deadline.remaining_ms()),
            errors=failed,
        )
        for tp, error in failed.items():
            log.info("group_lag(%s): no latest offset for %s: %s", group_id, tp, error)
        return {tp: lag_of(committed[tp], latest[tp]) for tp in latest}

    # -- offsets ----------------------------------------------------------------------------

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: int | None = None,
        errors: dict[TopicPartition, KayakError] | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Look up offsets: ``{tp: OffsetSpec.EARLIEST | LATEST | MAX_TIMESTAMP |
        OffsetSpec.timestamp(ms)}`` -> ``{tp: (offset, timestamp)}``. With
        ``read_committed``, LATEST is the last stable offset."""
        if isolation_level not in _offsets.ISOLATION_LEVELS:
            raise ValueError(
                f"isolation_level must be one of {', '.join(_offsets.ISOLATION_LEVELS)}"
            )
        wanted = {TopicPartition(*tp): spec for tp, spec in specs.items()}
        for tp, spec in wanted.items():
            _check_int(spec, OffsetSpec.MAX_TIMESTAMP, f"{tp}: an OffsetSpec")
        core = await self._ready()
        outcome = await _offsets.list_offsets(
            core, wanted, _offsets.ISOLATION_LEVELS[isolation_level], core.deadline(timeout_ms)
        )
        return settle(outcome, errors)

    async def delete_records(
        self,
        before: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        errors: dict[TopicPartition, KayakError] | None = None,
    ) -> dict[TopicPartition, int]:
        """Delete every record before the given offset of each partition (-1: before the
        high watermark, i.e. all); returns each partition's new low watermark."""
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}
        for tp, offset in wanted.items():
            _check_int(offset, -1, f"{tp}: the offset to delete records before")
        core = await self._ready()
        outcome = await _offsets.delete_records(core, wanted, core.deadline(timeout_ms))
        return settle(outcome, errors)

    # -- configs ----------------------------------------------------------------------------

    async def describe_configs(
        self,
        resource: str | int | ConfigResource,
        keys: Collection[str] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[str, ConfigEntry]:
        """Configs of a topic (a name), a broker (its node id) or a ``ConfigResource``, by
        name; only ``keys`` if given."""
        core = await self._ready()
        return await _configs.describe_configs(
            core, _configs.resource_of(resource), keys, core.deadline(timeout_ms)
        )

    async def alter_configs(
        self,
        resource: str | int | ConfigResource,
        changes: Mapping[str, ConfigValue | None],
        *,
        validate_only: bool = False,
        incremental: bool | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Set configs (``None`` deletes an override, restoring the default); others are
        kept. Uses IncrementalAlterConfigs, or AlterConfigs (read, merge, replace) on brokers
        without it; ``incremental=False`` forces the latter."""
        core = await self._ready()
        wanted = {
            name: None if value is None else _configs.config_value(name, value)
            for name, value in changes.items()
        }
        await _configs.alter_configs(
            core,
            _configs.resource_of(resource),
            wanted,
            validate_only,
            incremental,
            core.deadline(timeout_ms),
        )


def _check_int(value: object, minimum: int, what: str) -> None:
    """``ValueError`` unless ``value`` is an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, not {value!r}")


def lag_of(committed: OffsetAndMetadata, latest: OffsetAndTimestamp) -> int:
    """How far a committed offset is behind the latest offset (never negative)."""
    return max(latest.offset - committed.offset, 0)
