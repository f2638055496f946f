"""Iterating records from another thread (the sync facade's ``for record in consumer``).

Handing each record across threads costs a loop wake-up and a future per record (tens of
µs). Instead the facade asks the loop for the records ``async for`` would return next
*without taking them* (:func:`next_records`), hands them out on its own thread, and reports
the ones it handed out before anything else runs on the consumer (:func:`settle`). Settling
takes exactly those records as that many ``__anext__`` calls would, so positions, processed
positions (auto-commit) and the group's liveness are what they would have been per record,
as of the settle. Records not handed out stay buffered: nothing is lost or fetched again
if the application seeks, pauses or commits between records.
"""

from __future__ import annotations

import time
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self

from kayak.client.consumer.consumer import Consumer
from kayak.client.consumer.native import next_record
from kayak.client.consumer.records import ConsumerRecord, TopicPartition


def settle(consumer: Consumer, handed_out: Sequence[ConsumerRecord]) -> None:
    """Take ``handed_out`` (records :func:`next_records` peeked, in order), stopping at the
    first that is no longer the next buffered one (a seek, rebalance or error since: such a
    record was handed out from data made void, as after a ``getmany``)."""
    if not handed_out:
        return
    fetcher = consumer._ready_for_buffered()
    if fetcher is None:
        return
    peeked = fetcher.peek_next(len(handed_out))
    if (
        len(peeked) == len(handed_out)
        and peeked[0] is handed_out[0]
        and peeked[-1] is handed_out[-1]
    ):
        # Still the same slice of one batch: take all but the last in one step; nothing
        # else ran on the loop in between, so the state is that of one __anext__ per record.
        if len(handed_out) > 1:
            taken: dict[TopicPartition, list[ConsumerRecord]] = {}
            fetcher.take(None, len(handed_out) - 1, taken, max_fetches=1)
            consumer._poll_state.returned = [consumer._subscriptions.assignment[tp] for tp in taken]
        consumer._take_buffered()  # the last: processed now covers the ones before it
        return
    for record in handed_out:
        peeked = fetcher.peek_next(1)
        if not peeked or peeked[0] is not record or consumer._take_buffered() is not record:
            return


async def next_records(
    consumer: Consumer, handed_out: Sequence[ConsumerRecord], limit: int
) -> tuple[list[ConsumerRecord], bool]:
    """Settle ``handed_out``, then the next records: up to ``limit`` peeked (not yet taken:
    ``False``), or, when none is buffered or an error is due, one record that ``__anext__``
    took, waiting for it, followed by up to ``limit`` peeked after it (``True``: the first
    was taken). Raises ``StopAsyncIteration`` once the consumer closed."""
    settle(consumer, handed_out)
    fetcher = consumer._ready_for_buffered()
    if fetcher is not None:
        peeked = fetcher.peek_next(limit)
        if peeked:
            return peeked, False
    taken = await consumer.__anext__()
    # The rest of the batch that record opened, in the same trip: one trip to the loop per
    # batch, not two or three (each trip is two thread switches and a GIL hand-over).
    fetcher = consumer._ready_for_buffered()
    return [taken, *(fetcher.peek_next(limit) if fetcher is not None else ())], True


# The facade settles at least this often while it hands out peeked records, so the group sees
# the application polling (max.poll.interval.ms) and auto-commit lags by no more than this.
_MAX_UNSETTLED_S = 0.1
# At most this many records are peeked per trip to the loop; a trip never crosses a batch,
# so this is above the record count of most batches and a batch costs one trip.
_PEEK_RECORDS = 4096


class PeekedRecords(metaclass=ABCMeta):
    """Hands out ``_peeked[_index]`` per ``next()`` while some are left and ``_settle_by``
    (``time.monotonic()``) has not passed; otherwise returns ``self._refill()``.

    The reference for ``_next_record.PeekedRecords``, which the facade uses when it is built:
    this method call per record cost as much as making the record did.
    """

    __slots__ = ("_index", "_peeked", "_settle_by")

    _peeked: list[ConsumerRecord]
    _index: int
    _settle_by: float

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ConsumerRecord:
        index = self._index
        peeked = self._peeked
        if index < len(peeked) and time.monotonic() < self._settle_by:
            self._index = index + 1
            return peeked[index]
        return self._refill()

    @abstractmethod
    def _refill(self) -> ConsumerRecord:
        """The next record once the peeked ones ran out or went stale (the subclass settles
        and peeks again), or ``StopIteration``."""


if next_record is None or TYPE_CHECKING:
    _PeekedRecordsBase = PeekedRecords
else:
    _PeekedRecordsBase = next_record.PeekedRecords


class Handout(_PeekedRecordsBase, Iterator[ConsumerRecord]):
    """The application thread's side, an iterator: hands out the records
    :func:`next_records` peeked, one per ``next()``, and settles them through ``run`` (runs a
    coroutine on the consumer's loop and waits for it) when they run out, go stale, or before
    any other call (:meth:`settle_pending`)."""

    __slots__ = ("_consumer", "_run")

    def __init__(self, consumer: Consumer, run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        self._consumer = consumer
        self._run = run
        self._peeked = []
        self._index = 0  # records of _peeked handed out
        self._settle_by = 0.0

    def _refill(self) -> ConsumerRecord:
        """The next record, as ``__anext__`` would return it (``StopIteration`` once closed),
        once the peeked ones ran out or went stale."""
        handed_out = self._handed_out()
        try:
            result: tuple[list[ConsumerRecord], bool] = self._run(
                next_records(self._consumer, handed_out, _PEEK_RECORDS)
            )
        except StopAsyncIteration:
            raise StopIteration from None
        records, taken = result
        if taken:  # records[0] is taken already: only the ones after it are peeked
            self._peeked, self._index = records[1:], 0
        else:
            self._peeked, self._index = records, 1
        self._settle_by = time.monotonic() + _MAX_UNSETTLED_S
        return records[0]

    def settle_pending(self) -> None:
        """Report the records handed out so far, and forget the rest of the peeked ones
        (they stay buffered in the consumer), before another call changes what comes next."""
        if self._peeked:
            handed_out = self._handed_out()
            if handed_out:
                self._run(_settle_soon(self._consumer, handed_out))

    def _handed_out(self) -> list[ConsumerRecord]:
        handed_out = self._peeked[: self._index]
        self._peeked, self._index = [], 0
        return handed_out


async def _settle_soon(consumer: Consumer, handed_out: Sequence[ConsumerRecord]) -> None:
    settle(consumer, handed_out)
