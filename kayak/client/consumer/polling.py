"""The record path of the consumer: polls hand out what the fetcher has buffered.

``getmany``/``getmany_values`` drain up to ``max_records`` records, waiting up to
``timeout_ms`` when nothing has arrived; ``getone`` and iteration hand out one record at a
time, giving the event loop a turn every ``_RECORDS_BETWEEN_YIELDS`` records. Every poll
first marks what the previous one returned as processed (auto-commit commits those
positions) and raises the errors waiting for the application. ``Consumer`` builds on this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.consumer.completed import CompletedFetch
from kayak.client.consumer.errors import ConsumerClosedError
from kayak.client.consumer.fetcher import Fetcher
from kayak.client.consumer.group import GroupMember
from kayak.client.consumer.native import next_record
from kayak.client.consumer.position_lookup import PositionLookup
from kayak.client.consumer.records import ConsumerRecord
from kayak.client.consumer.subscription import PartitionState, SubscriptionState
from kayak.client.types import TopicPartition
from kayak.errors import KayakError
from kayak.protocol.records import Record

__all__ = ["PollState", "RecordPolling"]

# Hand this many records out through getone()/iteration between chances for the event loop
# to take in responses and send the next fetches.
_RECORDS_BETWEEN_YIELDS = 500


class PollState:
    """What the last poll handed out, and whether the consumer is closed: read on every
    record ``async for`` takes, so its C path finds these at slot offsets."""

    __slots__ = ("closed", "fetch", "returned")

    def __init__(self) -> None:
        self.returned: list[PartitionState] = []  # partitions the last poll returned records of
        # The buffered response the last record iterated came from, while its batch has more:
        # the next record comes from it unless something changed (_take_within_batch).
        self.fetch: CompletedFetch | None = None
        self.closed = False


if next_record is not None:
    next_record.configure(CompletedFetch, PartitionState, Record, PollState)


class RecordPolling:
    """Polling and iteration of a consumer, and the checks every call starts with."""

    config: ConsumerConfig
    _subscriptions: SubscriptionState
    _cluster: Cluster | None
    _fetcher: Fetcher | None
    _group: GroupMember | None
    _positions: PositionLookup | None
    _poll_state: PollState
    _since_yield: int

    def _check_open(self) -> None:
        if self._poll_state.closed:
            raise ConsumerClosedError("the consumer is closed")

    def _require_started(self) -> tuple[Cluster, Fetcher]:
        self._check_open()
        if self._cluster is None or self._fetcher is None:
            raise KayakError("the consumer is not started: await consumer.start() first")
        return self._cluster, self._fetcher

    async def _positions_ready(self, deadline: float) -> None:
        """Wait (until ``deadline``) for a position lookup that is due."""
        if self._positions is not None:
            await self._positions.ready(deadline)

    def _raise_position_error(self) -> None:
        if self._positions is not None:
            self._positions.raise_error()

    # -- polling ------------------------------------------------------------------------

    def _before_poll(self) -> Fetcher:
        """Bookkeeping every poll starts with: errors to raise, processed positions."""
        _, fetcher = self._require_started()
        self._poll_state.fetch = None
        for state in self._poll_state.returned:
            state.processed = state.position
        self._poll_state.returned = []
        if self._group is not None:
            self._group.polled()
            error, self._group.error = self._group.error, None
            if error is not None:
                raise error
        self._raise_position_error()
        fetcher.raise_errors()
        return fetcher

    def _partitions(self, partitions: tuple[TopicPartition, ...]) -> set[TopicPartition] | None:
        if not partitions:
            return None
        chosen = {TopicPartition(*tp) for tp in partitions}
        for tp in chosen:
            self._subscriptions.state(tp)  # raises if not assigned
        return chosen

    async def getmany(
        self, *partitions: TopicPartition, max_records: int | None = None, timeout_ms: int = 0
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition (of ``partitions``, or of all assigned), at most
        ``max_records`` (default ``max.poll.records``), waiting up to ``timeout_ms`` if none
        have arrived. An empty dict if none did."""
        records: dict[TopicPartition, list[ConsumerRecord]] = {}
        fetcher = self._before_poll()

        def take(chosen: set[TopicPartition] | None, limit: int) -> int:
            return fetcher.take(chosen, limit, records, max_fetches=1)

        await self._poll(partitions, max_records, timeout_ms, take)
        self._poll_state.returned = [self._subscriptions.assignment[tp] for tp in records]
        return records

    async def getmany_values(
        self, *partitions: TopicPartition, max_records: int | None = None, timeout_ms: int = 0
    ) -> dict[TopicPartition, list[bytes | None]]:
        """Like :meth:`getmany`, values only: keys, headers and timestamps are never decoded,
        no record objects are made. The fast path for reading a log."""
        values: dict[TopicPartition, list[bytes | None]] = {}
        fetcher = self._before_poll()

        def take(chosen: set[TopicPartition] | None, limit: int) -> int:
            return fetcher.take_values(chosen, limit, values, max_fetches=1)

        await self._poll(partitions, max_records, timeout_ms, take)
        self._poll_state.returned = [self._subscriptions.assignment[tp] for tp in values]
        return values

    async def _poll(
        self,
        partitions: tuple[TopicPartition, ...],
        max_records: int | None,
        timeout_ms: int,
        take: Callable[[set[TopicPartition] | None, int], int],
    ) -> None:
        """Run ``take`` until it has ``max_records``, the buffer is empty, or (with nothing
        taken) ``timeout_ms`` passes. Between responses' worth of records the event loop
        gets a turn: arrived responses are taken in and the next fetches sent while the
        application still has plenty to decode."""
        _, fetcher = self._require_started()
        chosen = self._partitions(partitions)
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        await self._positions_ready(deadline)
        taken = 0
        while True:
            await asyncio.sleep(0)
            if not taken:
                self._raise_position_error()
                fetcher.raise_errors()
            taken += take(chosen, limit - taken)
            if taken >= limit:
                return
            if fetcher.has_buffered(chosen):
                continue
            if taken:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await fetcher.wait_for_data(remaining, chosen)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions``, or of all assigned), waiting as long as it
        takes."""
        fetcher = self._before_poll()
        chosen = self._partitions(partitions)
        while True:
            taken = fetcher.take_one(chosen)
            if taken is not None:
                fetch, record = taken
                self._poll_state.returned = [fetch.state]
                if chosen is None:
                    self._hand_out_from(fetcher, fetch)
                self._since_yield += 1
                if self._since_yield >= _RECORDS_BETWEEN_YIELDS:
                    self._since_yield = 0
                    await asyncio.sleep(0)
                return record
            self._since_yield = 0
            await self._positions_ready(
                time.monotonic() + self.config.default_api_timeout_ms / 1000
            )
            self._raise_position_error()
            fetcher.raise_errors()
            await fetcher.wait_for_data(self.config.fetch_max_wait_ms / 1000 or 0.1, chosen)
            self._check_open()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """``async for``: with the C extension, an iterator that takes the usual case (the
        next record of the batch being handed out) itself and calls ``__anext__`` for the
        rest; a subclass with its own ``__anext__`` iterates through it alone."""
        if next_record is not None and type(self).__anext__ is RecordPolling.__anext__:
            return next_record.RecordIterator(self, _RECORDS_BETWEEN_YIELDS)
        return self

    async def __anext__(self) -> ConsumerRecord:
        # A buffered record is served without a suspension (and without the getone
        # coroutine), which was most of the cost of a record iterated; the loop still gets
        # a turn every _RECORDS_BETWEEN_YIELDS records (in getone).
        if self._since_yield < _RECORDS_BETWEEN_YIELDS:
            record = self._take_within_batch()
            if record is None:
                record = self._take_buffered()
            if record is not None:
                self._since_yield += 1
                return record
        return await self._anext_slowly()

    def _take_within_batch(self) -> ConsumerRecord | None:
        """``_take_buffered``'s usual case, shortened (the lookup through the buffer was most
        of a record's cost): the next record of the batch the previous record came from, if
        that data is still current, nothing is pending and it is not the batch's last."""
        fetch = self._poll_state.fetch
        if fetch is None:
            return None
        state = fetch.state
        if fetch.epoch != state.epoch or state.paused:  # seeked, reset, unassigned, paused
            return None
        if self._ready_for_buffered() is None:
            return None
        return fetch.take_within_batch()

    def _ready_for_buffered(self) -> Fetcher | None:
        """What ``getone`` does before taking a record (processed positions, liveness), and
        the fetcher if nothing is pending that it would raise first; else None."""
        fetcher = self._fetcher
        if fetcher is None:
            return None
        for state in self._poll_state.returned:
            state.processed = state.position
        group = self._group
        if group is not None:
            group.polled()
        if (
            self._poll_state.closed
            or fetcher.has_errors
            or (group is not None and group.error is not None)
            or (self._positions is not None and self._positions.has_error)
        ):
            return None
        return fetcher

    def _take_buffered(self) -> ConsumerRecord | None:
        """The next record if one is buffered and nothing is pending, as ``getone``."""
        self._poll_state.fetch = None
        fetcher = self._ready_for_buffered()
        if fetcher is None:
            return None
        taken = fetcher.take_one(None)
        if taken is None:
            return None
        fetch, record = taken
        self._poll_state.returned = [fetch.state]
        self._hand_out_from(fetcher, fetch)
        return record

    def _hand_out_from(self, fetcher: Fetcher, fetch: CompletedFetch) -> None:
        """The record just taken came from ``fetch``: the next may too (if its batch has more
        and nothing older is buffered)."""
        if fetch.has_more_in_batch and fetcher.is_front(fetch):
            self._poll_state.fetch = fetch

    async def _anext_slowly(self) -> ConsumerRecord:
        """``getone`` (errors raised, waits for data, a turn for the loop every so often)."""
        if self._poll_state.closed:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except ConsumerClosedError:
            raise StopAsyncIteration from None
