"""``Consumer``: kayak's asyncio Kafka consumer.

::

    async with Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g"}) as consumer:
        consumer.subscribe(["events"])
        async for record in consumer:
            handle(record.value)

Reading a manual assignment, in batches::

    consumer = Consumer(bootstrap_servers="localhost:9092")
    await consumer.start()
    consumer.assign([TopicPartition("events", 0)])
    consumer.seek(TopicPartition("events", 0), 1000)
    batches = await consumer.getmany(timeout_ms=500)   # {TopicPartition: [ConsumerRecord]}

Fetching runs in the background from the moment partitions are assigned (see
:mod:`.fetcher`); polling (``getmany``, ``getone``, iteration) only decodes what already
arrived, waiting up to ``timeout_ms`` when nothing has (:mod:`.polling`). ``getmany_values``
is the fast path for applications that need only values.

Offsets: a poll hands records out and moves each partition's ``position`` past them.
``commit()`` commits positions; auto-commit (``enable.auto.commit``) commits, every
``auto.commit.interval.ms``, the positions as they were when the application last polled,
that is what it has finished processing, and everything returned on ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.consumer.commits import CommitCallback, commit_and_report, offsets_to_commit
from kayak.client.consumer.fetcher import Fetcher, FetchStats
from kayak.client.consumer.group import GroupMember
from kayak.client.consumer.listener import RebalanceListener, call_listener
from kayak.client.consumer.offsets import EARLIEST, LATEST, PositionResolver, list_offsets
from kayak.client.consumer.polling import PollState, RecordPolling
from kayak.client.consumer.position_lookup import PositionLookup
from kayak.client.consumer.statistics import ConsumerStatistics
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kayak.errors import ConfigError, KayakError

__all__ = ["Consumer"]


class Consumer(RecordPolling):
    """Reads records from Kafka partitions: a group's share of subscribed topics, or a
    manual assignment. Configure by Kafka property names (``ConsumerConfig``)."""

    def __init__(
        self, config: Mapping[str, object] | ConsumerConfig | None = None, /, **kwargs: object
    ) -> None:
        if isinstance(config, ConsumerConfig) and not kwargs:
            self.config = config
        elif isinstance(config, ConsumerConfig):
            self.config = ConsumerConfig.from_user({**config.as_dict(), **_dotted(kwargs)})
        else:
            self.config = ConsumerConfig.from_user(config, **kwargs)
        self._subscriptions = SubscriptionState(on_change=self._assignment_changed)
        self._statistics = ConsumerStatistics(self.config, self._subscriptions)
        self._cluster: Cluster | None = None
        self._fetcher: Fetcher | None = None
        self._group: GroupMember | None = None
        self._positions: PositionLookup | None = None
        self._poll_state = PollState()
        self._since_yield = 0
        self._background: set[asyncio.Future[None]] = set()
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster; fetching (and joining the group) starts from here."""
        self._check_open()
        if self._started:
            return
        cluster = Cluster(self.config)
        await cluster.bootstrap()
        self._cluster = cluster
        self._fetcher = Fetcher(
            cluster, self._subscriptions, self.config, on_reset_needed=self._schedule_positions
        )
        if self.config.group_id is not None:
            self._group = GroupMember(
                cluster, self._subscriptions, self.config, on_assigned=self._schedule_positions
            )
        resolver = PositionResolver(
            cluster,
            self._subscriptions,
            self.config,
            self._committed_lookup if self._group is not None else None,
        )
        self._positions = PositionLookup(
            resolver, self._subscriptions, self._fetcher, lambda: self._poll_state.closed
        )
        self._started = True
        self._statistics.started(cluster, self._group)
        cluster.add_topics(self._subscriptions.topics)
        if self._subscriptions.uses_group_assignment:
            self._start_group()
        self._assignment_changed()

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, stop fetching, close connections."""
        if self._poll_state.closed:
            return
        self._poll_state.closed = True
        await self._statistics.stop()
        if self._positions is not None:
            self._positions.cancel()
        if self._group is not None:
            final = None
            if self.config.enable_auto_commit:
                final = {
                    tp: OffsetAndMetadata(o) for tp, o in self._subscriptions.positions().items()
                }
            await self._group.close(commit=final)
        for task in self._background:
            task.cancel()
        if self._fetcher is not None:
            await self._fetcher.close()
        if self._cluster is not None:
            await self._cluster.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- what to read ---------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group membership; commits still go to
        ``group.id`` if set). Replaces any previous assignment."""
        self._check_open()
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._subscriptions.assign_manually(wanted)
        if self._cluster is not None:
            self._cluster.add_topics({tp.topic for tp in wanted})

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join ``group.id`` and read the group's share of ``topics`` (or of every topic
        ``pattern`` matches, checked every ``metadata.max.age.ms``)."""
        self._check_open()
        if self.config.group_id is None:
            raise KayakError("subscribe() needs a group.id; use assign() to read without one")
        if isinstance(topics, str):
            topics = [topics]
        if pattern is not None:
            if list(topics):
                raise ValueError("give topics or a pattern, not both")
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subscriptions.subscribe_pattern(compiled, listener)
        else:
            self._subscriptions.subscribe(topics, listener)
        if self._started:
            assert self._cluster is not None
            self._cluster.add_topics(self._subscriptions.topics)
            self._start_group()
            if self._group is not None:
                self._group.request_rejoin("the subscription changed")

    def _start_group(self) -> None:
        if self._group is not None:
            self._group.start()

    def unsubscribe(self) -> None:
        """Stop reading: revoke the partitions (listener told), leave the group."""
        self._check_open()
        owned = set(self._subscriptions.assignment)
        was_group = self._subscriptions.uses_group_assignment
        listener = self._subscriptions.listener
        self._subscriptions.unsubscribe()
        if was_group and self._group is not None:
            self._spawn(self._leave_after_unsubscribe(self._group, owned, listener))

    async def _leave_after_unsubscribe(
        self, group: GroupMember, owned: set[TopicPartition], listener: RebalanceListener | None
    ) -> None:
        if owned:
            await call_listener(listener, "on_partitions_revoked", owned)
        with contextlib.suppress(KayakError, TimeoutError):
            async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                await group.leave("unsubscribed")

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assignment)

    def subscription(self) -> set[str]:
        return set(self._subscriptions.topics)

    # -- positions ------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (anything already fetched is dropped)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        self._subscriptions.state(TopicPartition(*partition)).seek(offset)
        self._subscriptions.changed()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read from the earliest offset (of all assigned partitions if none are given)."""
        self._request_reset(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records written from now on (of all assigned partitions if none given)."""
        self._request_reset(partitions, "latest")

    def _request_reset(self, partitions: tuple[TopicPartition, ...], strategy: str) -> None:
        self._check_open()
        chosen = partitions or tuple(self._subscriptions.assignment)
        for state in self._subscriptions.states(TopicPartition(*tp) for tp in chosen):
            state.request_reset(strategy)
        self._subscriptions.changed()

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record the application will get from ``partition``."""
        self._require_started()
        state = self._subscriptions.state(TopicPartition(*partition))
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        while not state.has_position:
            await self._positions_ready(deadline)
            self._raise_position_error()
            if time.monotonic() >= deadline:
                raise KayakError(f"{partition}: no position within default.api.timeout.ms")
        assert state.position is not None
        return state.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as of the last fetch response (None before one)."""
        return self._subscriptions.state(TopicPartition(*partition)).high_watermark

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        return self._subscriptions.state(TopicPartition(*partition)).last_stable_offset

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self._list_offsets(partitions, EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermarks (with ``read_committed``: the last stable offsets)."""
        return await self._list_offsets(partitions, LATEST)

    async def offsets_for_time(
        self, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """Per partition, the earliest offset whose record has a timestamp at or after
        ``timestamp_ms`` (ms since the epoch); -1 where no record is that recent."""
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
            raise ValueError(f"a timestamp is a non-negative int of ms, not {timestamp_ms!r}")
        return await self._list_offsets(partitions, timestamp_ms)

    async def _list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        cluster, _ = self._require_started()
        wanted = {TopicPartition(*tp): timestamp for tp in partitions}
        cluster.add_topics({tp.topic for tp in wanted})
        return await list_offsets(
            cluster,
            wanted,
            isolation_level=1 if self.config.isolation_level == "read_committed" else 0,
            timeout=self.config.default_api_timeout_ms / 1000,
            retry_backoff_ms=self.config.retry_backoff_ms,
        )

    def _assignment_changed(self) -> None:
        if self._fetcher is None or self._poll_state.closed:
            return
        if self._subscriptions.missing_positions():
            self._schedule_positions()
        self._fetcher.wake()

    def _schedule_positions(self) -> None:
        if self._positions is not None:
            self._positions.schedule()

    async def _committed_lookup(
        self, partitions: set[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        assert self._group is not None
        return await self._group.committed(
            partitions, timeout=self.config.default_api_timeout_ms / 1000
        )

    # -- flow control ---------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning these partitions until ``resume``."""
        for state in self._subscriptions.states(TopicPartition(*tp) for tp in partitions):
            state.paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for state in self._subscriptions.states(TopicPartition(*tp) for tp in partitions):
            state.paused = False
        self._subscriptions.changed()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._subscriptions.assignment.items() if state.paused}

    # -- commits --------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition), or the positions of
        every assigned partition; waits for the coordinator's answer.

        Raises :class:`~.errors.CommitFailedError` if the group rebalanced meanwhile.
        """
        group = self._require_group()
        await group.commit(
            offsets_to_commit(self._subscriptions, offsets),
            timeout=self.config.default_api_timeout_ms / 1000,
        )

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> asyncio.Future[None]:
        """Start a commit and return at once; ``callback(offsets, error)`` runs when it
        completes (error None on success). Failures without a callback are logged."""
        group = self._require_group()
        chosen = offsets_to_commit(self._subscriptions, offsets)
        timeout = self.config.default_api_timeout_ms / 1000
        return self._spawn(commit_and_report(group, chosen, timeout, callback))

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None if it has none)."""
        group = self._require_group()
        tp = TopicPartition(*partition)
        found = await group.committed({tp}, timeout=self.config.default_api_timeout_ms / 1000)
        return found[tp].offset if tp in found else None

    def _require_group(self) -> GroupMember:
        self._require_started()
        if self._group is None:
            raise KayakError("committed offsets belong to a group: set group.id")
        return self._group

    # -- cluster facts --------------------------------------------------------------------

    async def topics(self) -> set[str]:
        """Every topic in the cluster (internal ones excluded)."""
        cluster, _ = self._require_started()
        snapshot = await cluster.refresh_metadata(all_topics=True)
        return {name for name, info in snapshot.topics.items() if not info.internal}

    async def partitions_for_topic(self, topic: str, *, timeout: float | None = None) -> set[int]:
        """The topic's partition numbers; ``UnknownTopicOrPartitionError`` if it does not
        appear within ``timeout`` seconds (default ``request.timeout.ms``)."""
        cluster, _ = self._require_started()
        info = await cluster.topic(topic, timeout)
        return set(info.partitions)

    def partition_leader(self, partition: TopicPartition) -> int:
        """The node id leading ``partition`` as last known from metadata (-1 if unknown)."""
        cluster, _ = self._require_started()
        return cluster.leader(partition[0], partition[1])

    def statistics(self) -> dict[str, Any]:
        """What this consumer has done, as a dict laid out like librdkafka's statistics:
        ``rxmsgs``/``rxmsg_bytes`` (records handed to the application, and their batches'
        bytes), ``brokers``, ``topics`` (per partition: offsets, ``consumer_lag`` = high
        watermark - position) and, in a group, ``cgrp``. See :mod:`kayak.client.statistics`;
        also delivered every ``statistics.interval.ms`` to ``stats_cb``."""
        return self._statistics.snapshot()

    @property
    def fetch_stats(self) -> FetchStats:
        """Fetch counters (requests, bytes, the most requests in flight to one broker)."""
        _, fetcher = self._require_started()
        return fetcher.stats

    @property
    def group_member(self) -> GroupMember | None:
        """This consumer's group membership (member id, generation, state), if it has one."""
        return self._group

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Who this consumer is in its group, for ``Producer.send_offsets_to_transaction``:
        group id, generation, member id and ``group.instance.id`` as of now (generation -1
        and no member id before the first join). Raises ``ConfigError`` without ``group.id``.
        """
        group_id = self.config.group_id
        if group_id is None:
            raise ConfigError(
                "group.id", "is not set: a consumer without a group has no group metadata"
            )
        member = self._group
        return ConsumerGroupMetadata(
            group_id,
            member.generation if member is not None else -1,
            member.member_id if member is not None else "",
            self.config.group_instance_id,
        )

    # -- background tasks -----------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


def _dotted(kwargs: Mapping[str, object]) -> dict[str, object]:
    return {key.replace("_", "."): value for key, value in kwargs.items()}
