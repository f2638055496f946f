"""Where to start reading: ListOffsets lookups and the positions of newly assigned partitions.

A partition without a position gets one, in order, from: the group's committed offset (when
there is a group), else ``auto.offset.reset`` (earliest or latest, looked up with
ListOffsets; ``none`` raises :class:`~.errors.NoOffsetForPartitionError`).
``seek_to_beginning``/``seek_to_end`` ask for the same lookup explicitly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from kayak.client.backoff import backoff_from_config
from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.consumer.errors import NoOffsetForPartitionError
from kayak.client.consumer.subscription import PartitionState, SubscriptionState
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import ErrorClass, KafkaTimeoutError, KayakError, error_for_code
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.list_offsets_response import ListOffsetsResponse

log = logging.getLogger(__name__)

__all__ = ["EARLIEST", "LATEST", "PositionResolver", "list_offsets"]

EARLIEST = -2  # ListOffsets timestamp: the log start offset
LATEST = -1  # ListOffsets timestamp: the high watermark (read_committed: last stable offset)
_TIMESTAMP_OF = {"earliest": EARLIEST, "latest": LATEST}
# v1 returns one offset per partition (v0 a list); 7 is what librdkafka 2.x sends.
_MAX_VERSION = 7
_MIN_VERSION = 1

CommittedLookup = Callable[
    [set[TopicPartition]], Awaitable[dict[TopicPartition, OffsetAndMetadata]]
]


async def list_offsets(
    cluster: Cluster,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int,
    timeout: float,
    retry_backoff_ms: int = 100,
) -> dict[TopicPartition, int]:
    """The offset for each partition's timestamp (``EARLIEST``, ``LATEST`` or a time in ms),
    asking each leader, retrying moved leaders until ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    remaining = dict(timestamps)
    found: dict[TopicPartition, int] = {}
    attempt = 0
    while remaining:
        if attempt:
            await cluster.refresh_metadata({tp.topic for tp in remaining})
        by_leader = _by_leader(cluster, remaining)
        results = await asyncio.gather(
            *(
                _list_from(cluster, node, parts, isolation_level)
                for node, parts in by_leader.items()
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, KayakError):
                    raise result
                log.debug("ListOffsets failed: %s", result)
                continue
            for tp, offset in result.items():
                found[tp] = offset
                remaining.pop(tp, None)
        if not remaining:
            break
        if time.monotonic() >= deadline:
            names = ", ".join(sorted(str(tp) for tp in remaining))
            raise KafkaTimeoutError(f"could not look up offsets of {names} in {timeout:g}s")
        await asyncio.sleep(min(retry_backoff_ms / 1000 * 2**attempt, 1.0))
        attempt += 1
    return found


def _by_leader(
    cluster: Cluster, timestamps: Mapping[TopicPartition, int]
) -> dict[int, dict[TopicPartition, int]]:
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    for tp, timestamp in timestamps.items():
        leader = cluster.leader(tp.topic, tp.partition)
        if leader >= 0:
            by_leader.setdefault(leader, {})[tp] = timestamp
    return by_leader


async def _list_from(
    cluster: Cluster, node: int, timestamps: dict[TopicPartition, int], isolation_level: int
) -> dict[TopicPartition, int]:
    """Ask one broker; returns what it answered without a retriable error."""
    connection = await cluster.connection(node)
    version = max(connection.version_for(ListOffsetsRequest, _MAX_VERSION), _MIN_VERSION)
    topics: dict[str, ListOffsetsTopic] = {}
    for tp, timestamp in timestamps.items():
        topic = topics.setdefault(tp.topic, ListOffsetsTopic(tp.topic, []))
        topic.partitions.append(ListOffsetsPartition(tp.partition, -1, timestamp, 1))
    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation_level, topics=list(topics.values())
    )
    response: ListOffsetsResponse = await connection.request(request, version)
    found: dict[TopicPartition, int] = {}
    for answer in response.topics:
        for p in answer.partitions:
            tp = TopicPartition(answer.name, p.partition_index)
            if p.error_code:
                error = error_for_code(p.error_code)
                if error.error_class is ErrorClass.FATAL:
                    raise error(f"looking up the offset of {tp}: {error.default_message}")
                log.debug("ListOffsets %s: %s", tp, error.error_name)
                continue
            found[tp] = p.offset
    return found


class PositionResolver:
    """Gives every assigned partition without a position one (committed offset or reset)."""

    def __init__(
        self,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        committed: CommittedLookup | None,
    ) -> None:
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._config = config
        self._committed = committed
        self._isolation_level = 1 if config.isolation_level == "read_committed" else 0
        self._backoff = backoff_from_config(config)

    async def resolve(self) -> None:
        """Fill in missing positions; raises NoOffsetForPartitionError for ``none``."""
        missing = self._subscriptions.missing_positions()
        if not missing:
            return
        lookup = [s for s in missing if s.position is None and s.reset_strategy is None]
        if lookup and self._committed is not None:
            await self._use_committed(lookup)
        await self._reset([s for s in missing if not s.has_position])
        self._subscriptions.changed()

    async def _use_committed(self, states: list[PartitionState]) -> None:
        epochs = {s.tp: (s, s.epoch) for s in states}
        assert self._committed is not None
        committed = await self._committed(set(epochs))
        for tp, (state, epoch) in epochs.items():
            offset = committed.get(tp)
            if offset is not None and offset.offset >= 0 and self._is_current(state, epoch):
                log.debug("%s: starting at committed offset %d", tp, offset.offset)
                state.seek(offset.offset)

    async def _reset(self, states: Iterable[PartitionState]) -> None:
        wanted: dict[TopicPartition, tuple[PartitionState, int, int]] = {}
        undefined: list[TopicPartition] = []
        for state in states:
            strategy = state.reset_strategy or self._config.auto_offset_reset
            if strategy == "none":
                undefined.append(state.tp)
            else:
                wanted[state.tp] = (state, state.epoch, _TIMESTAMP_OF[strategy])
        if undefined:
            raise NoOffsetForPartitionError(undefined)
        if not wanted:
            return
        offsets = await list_offsets(
            self._cluster,
            {tp: timestamp for tp, (_, _, timestamp) in wanted.items()},
            isolation_level=self._isolation_level,
            timeout=self._config.default_api_timeout_ms / 1000,
            retry_backoff_ms=self._config.retry_backoff_ms,
        )
        for tp, (state, epoch, timestamp) in wanted.items():
            if tp in offsets and self._is_current(state, epoch):
                where = "earliest" if timestamp == EARLIEST else "latest"
                log.debug("%s: reset to %s offset %d", tp, where, offsets[tp])
                state.seek(offsets[tp])

    def _is_current(self, state: PartitionState, epoch: int) -> bool:
        return state.epoch == epoch and self._subscriptions.assignment.get(state.tp) is state
