"""The application's side of the fetch path: the buffer of fetched responses.

The fetcher (:mod:`.fetcher`) appends each response, undecoded, as a
:class:`~.completed.CompletedFetch`; polls take records out of the oldest ones first
(``take``, ``take_values``, ``take_one``), dropping responses made void by a seek, a
rebalance or a pause, and raise (once) the errors fetching met that the application must see.
Every response used up frees buffer space, so the fetcher is woken to fetch again.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from kayak.client.consumer.completed import CompletedFetch
from kayak.client.consumer.records import ConsumerRecord
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.types import TopicPartition
from kayak.errors import KayakError

__all__ = ["FetchBuffer"]

T = TypeVar("T")


class FetchBuffer(ABC):
    """Fetched responses waiting for the application (``Fetcher`` fills it)."""

    _subscriptions: SubscriptionState
    _completed: deque[CompletedFetch]
    _buffered_bytes: int
    _data_ready: asyncio.Event
    _errors: list[KayakError]
    _waiting_for: set[TopicPartition] | None  # what a poll waits for, if not every partition

    @abstractmethod
    def wake(self) -> None:
        """Send whatever Fetch requests can go now: the fetcher's, called here when a
        response is used up (its space in the buffer is free again)."""

    @property
    def has_errors(self) -> bool:
        """An error waits for :meth:`raise_errors`."""
        return bool(self._errors)

    def raise_errors(self) -> None:
        """Raise (once) an error a fetch met that the application must see."""
        if self._errors:
            error = self._errors.pop(0)
            raise error

    def _drainable(self, partitions: set[TopicPartition] | None) -> list[CompletedFetch]:
        """Buffered fetches the application may read now, dropping void ones."""
        ready = []
        for fetch in list(self._completed):
            state = fetch.state
            if not fetch.is_current or self._subscriptions.assignment.get(state.tp) is not state:
                self._discard(fetch)
            elif not state.paused and (partitions is None or state.tp in partitions):
                ready.append(fetch)
        return ready

    def take(
        self,
        partitions: set[TopicPartition] | None,
        max_records: int,
        into: dict[TopicPartition, list[ConsumerRecord]],
        *,
        max_fetches: int | None = None,
    ) -> int:
        """Move up to ``max_records`` buffered records into ``into`` (by partition, in offset
        order), from at most ``max_fetches`` responses; returns how many."""
        return self._drain(CompletedFetch.take, partitions, max_records, into, max_fetches)

    def take_values(
        self,
        partitions: set[TopicPartition] | None,
        max_records: int,
        into: dict[TopicPartition, list[bytes | None]],
        *,
        max_fetches: int | None = None,
    ) -> int:
        """Like :meth:`take`, values only (nothing else of a record is decoded)."""
        return self._drain(CompletedFetch.take_values, partitions, max_records, into, max_fetches)

    def _drain(
        self,
        take: Callable[[CompletedFetch, int], list[T]],
        partitions: set[TopicPartition] | None,
        max_records: int,
        into: dict[TopicPartition, list[T]],
        max_fetches: int | None,
    ) -> int:
        taken = 0
        for count, fetch in enumerate(self._drainable(partitions)):
            if max_fetches is not None and count >= max_fetches:
                break
            items = take(fetch, max_records - taken)
            if items:
                _merge(into, fetch.state.tp, items)
                taken += len(items)
            if fetch.exhausted:
                self._discard(fetch)
            if taken >= max_records:
                break
        return taken

    def take_one(
        self, partitions: set[TopicPartition] | None
    ) -> tuple[CompletedFetch, ConsumerRecord] | None:
        """The next buffered record and the response it came from, or None."""
        if self._completed:  # the usual case, first: the oldest response has one
            fetch = self._completed[0]
            state = fetch.state
            if (
                fetch.epoch == state.epoch  # fetch.is_current, without a property call
                and not state.paused
                and (partitions is None or state.tp in partitions)
                and self._subscriptions.assignment.get(state.tp) is state
            ):
                record = fetch.take_one()
                if record is not None and fetch.has_more_in_batch:
                    return fetch, record  # the usual case: no exhausted check needed
                if fetch.exhausted:
                    self._discard(fetch)
                if record is not None:
                    return fetch, record
        for fetch in self._drainable(partitions):
            record = fetch.take_one()
            if fetch.exhausted:
                self._discard(fetch)
            if record is not None:
                return fetch, record
        return None

    def is_front(self, fetch: CompletedFetch) -> bool:
        """``fetch`` is the oldest buffered response (the one ``take_one(None)`` reads)."""
        return bool(self._completed) and self._completed[0] is fetch

    def peek_next(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records that ``take_one(None)`` would return next, not taken: from
        the oldest response's batch being handed out, or none if that needs more work."""
        if not self._completed:
            return []
        fetch = self._completed[0]
        state = fetch.state
        if (
            fetch.epoch != state.epoch
            or state.paused
            or self._subscriptions.assignment.get(state.tp) is not state
        ):
            return []
        return fetch.peek(limit)

    def _discard(self, fetch: CompletedFetch) -> None:
        try:
            self._completed.remove(fetch)
        except ValueError:
            return
        self._buffered_bytes -= fetch.size
        if fetch.is_current:
            fetch.state.buffered_bytes -= fetch.size
        self.wake()

    def has_buffered(self, partitions: set[TopicPartition] | None = None) -> bool:
        return bool(self._drainable(partitions))

    async def wait_for_data(
        self, timeout: float, partitions: set[TopicPartition] | None = None
    ) -> None:
        """Return when a response arrives (or ``timeout`` seconds pass). While a poll waits
        for some ``partitions`` only, partitions outside them that the buffer holds back
        no longer keep the fetcher from long-polling for the ones it waits for."""
        self._data_ready.clear()
        if timeout <= 0:
            return
        if partitions is not None:
            self._waiting_for = partitions
            self.wake()
        # Not asyncio.wait_for: before Python 3.12 it swallows a cancel that arrives in the
        # loop turn the event is set (python/cpython#86296), so a cancelled poll kept
        # running. asyncio.wait always lets the caller's cancel through.
        waiter = asyncio.ensure_future(self._data_ready.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()
            self._waiting_for = None


def _merge(into: dict[TopicPartition, list[T]], tp: TopicPartition, items: list[T]) -> None:
    if tp in into:
        into[tp] += items
    else:
        into[tp] = items
