"""Records waiting to be sent, gathered into one batch per partition (Kafka's RecordAccumulator).

``send`` appends a record to its partition's *open* batch; a batch closes when the next record
would take it past ``batch.size``. A batch is *ready* to go once closed, once it is
``linger.ms`` old, or at once while a ``flush``/``close`` is waiting or ``send`` is waiting for
memory. The sender of the broker leading the partition *drains* ready batches, one per
partition per request, and encodes each in one pass with ``build_record_batch`` only then:
appending costs a few list appends, not an encoding step per record.

Memory is bounded by ``buffer.memory``: every record is charged its encoded size plus what its
future and bookkeeping take (:data:`~kayak.client.producer.batch.RECORD_MEMORY_OVERHEAD`) when
appended, and the charge is returned when its batch completes; ``send`` waits for room, at most
``max.block.ms``.

The batches themselves, :class:`~kayak.client.producer.batch.ProducerBatch` and
:class:`~kayak.client.producer.batch.PartitionQueue`, live in :mod:`~kayak.client.producer.batch`
(re-exported here).

Batches that fail with a retriable error go back to the front of their partition, in the order
they were first made, and wait ``retry.backoff.ms`` (growing); the idempotence rules of
:mod:`~kayak.client.producer.idempotence` decide when a retried batch may go again. A batch not
delivered within ``delivery.timeout.ms`` of its creation fails with ``KafkaTimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from kayak.client.producer.batch import (
    RECORD_MEMORY_OVERHEAD,
    BulkSend,
    DeliveryQueue,
    HeaderList,
    PartitionQueue,
    ProducerBatch,
    Value,
)
from kayak.client.producer.idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceManager
from kayak.client.producer.native import per_record
from kayak.errors import KafkaTimeoutError
from kayak.protocol.records import Codec
from kayak.protocol.records.record import NO_SEQUENCE

log = logging.getLogger(__name__)

__all__ = [
    "RECORD_MEMORY_OVERHEAD",
    "RECORD_OVERHEAD",
    "BufferMemory",
    "BulkSend",
    "PartitionQueue",
    "ProducerBatch",
    "RecordAccumulator",
]

RECORD_OVERHEAD = 11
"""Bytes a record adds to a batch besides its key, value and headers: length, attributes,
timestamp and offset deltas, key and value lengths, header count. Exact for values and keys
under 8 KiB in batches of under 8,192 records spanning less than 8 s; an estimate otherwise."""


class MemoryCounters:
    """``BufferMemory``'s ``limit`` and ``used``: the reference for ``_per_record``'s C base
    class of the same name, which keeps them as C integers for ``produce``'s C path."""

    __slots__ = ("limit", "used")

    limit: int
    used: int


if per_record is None or TYPE_CHECKING:
    _MemoryCountersBase = MemoryCounters
else:
    _MemoryCountersBase = per_record.MemoryCounters


class BufferMemory(_MemoryCountersBase):
    """``buffer.memory``: bytes charged for buffered records, with FIFO waiters for room."""

    __slots__ = ("waiters",)

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def reserve(self, amount: int, timeout: float) -> None:
        """Charge ``amount`` once it fits (behind earlier waiters), or raise KafkaTimeoutError
        after ``timeout`` seconds."""
        if not self.waiters and self.used + amount <= self.limit:
            self.used += amount
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, waiter)
        self.waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise KafkaTimeoutError(
                f"buffer.memory ({self.limit} bytes) stayed full for max.block.ms "
                f"({timeout * 1000:g} ms): records are produced faster than the brokers take "
                "them, or the brokers are unreachable"
            ) from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(amount)  # granted just as the caller gave up: give it back
            raise
        finally:
            if not waiter.done() or waiter.cancelled():
                self._remove(entry)

    def _remove(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        with contextlib.suppress(ValueError):
            self.waiters.remove(entry)
        self._grant()

    def release(self, amount: int) -> None:
        self.used -= amount
        if self.waiters:
            self._grant()

    def _grant(self) -> None:
        while self.waiters:
            amount, waiter = self.waiters[0]
            if waiter.done():
                self.waiters.popleft()
                continue
            if self.used + amount > self.limit and self.used > 0:
                return
            self.waiters.popleft()
            self.used += amount
            waiter.set_result(None)


class RecordAccumulator:
    """Every partition's queue of batches, and the rules for when a batch is ready."""

    def __init__(
        self,
        *,
        linger_ms: int,
        delivery_timeout_ms: int,
        max_request_size: int,
        codec: Codec,
        memory: BufferMemory,
        idempotence: IdempotenceManager | None,
        on_batch_failed: Callable[[ProducerBatch, BaseException], None],
        on_unrouted_data: Callable[[], None],
    ) -> None:
        self.linger = linger_ms / 1000
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.max_request_size = max_request_size
        self.codec = codec
        self.memory = memory
        self.idempotence = idempotence
        self._on_batch_failed = on_batch_failed
        # Records for a partition with no known leader: metadata must be looked at again.
        self._on_unrouted_data = on_unrouted_data
        self._loop = asyncio.get_running_loop()
        self._order = 0
        self.queues: dict[tuple[str, int], PartitionQueue] = {}
        self.incomplete: dict[ProducerBatch, None] = {}  # insertion-ordered set
        self.flushing = 0
        self.closing = False
        self.aborted = False  # close() gave up on what was left: stop retrying, stop logging
        self.in_flight_batches = 0
        # Set by a caller that runs produce()'s callbacks in a thread of its own (the sync
        # facade): reports go there instead of being called on the event loop.
        self.delivery_queue: DeliveryQueue | None = None

    # -- appending ------------------------------------------------------------------------------

    def queue(self, topic: str, partition: int) -> PartitionQueue:
        key = (topic, partition)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = PartitionQueue(topic, partition)
        return queue

    def open_batch(self, queue: PartitionQueue, timestamp: int) -> ProducerBatch:
        """Close the partition's open batch (it is ready now) and open a new one for a record
        stamped ``timestamp``."""
        now = self._loop.time()
        full = queue.open
        batch = self._new_batch(queue, now, timestamp)
        queue.open = batch
        if full is not None:
            queue.batches.append(full)
        sender = queue.sender
        if sender is None:
            self._on_unrouted_data()
        elif full is not None or not self.linger:
            sender.batch_ready()
        else:
            sender.batch_opened(now + self.linger)
        return batch

    def _new_batch(self, queue: PartitionQueue, now: float, timestamp: int) -> ProducerBatch:
        self._order += 1
        batch = ProducerBatch(queue, self._order, now, now + self.delivery_timeout, timestamp)
        self.incomplete[batch] = None
        if self.idempotence is not None:
            self.idempotence.batch_opened(queue)
        return batch

    def add_bulk_batch(
        self,
        queue: PartitionQueue,
        bulk: BulkSend,
        values: Sequence[Value],
        keys: Sequence[Value] | None,
        headers: Sequence[HeaderList | None] | None,
        positions: range | list[int],
        timestamp: int,
        size: int,
    ) -> ProducerBatch:
        """Queue a closed batch of ``send_batch`` records, behind the partition's open batch
        (which closes: records sent earlier go first)."""
        now = self._loop.time()
        full = queue.open
        if full is not None:
            queue.open = None
            queue.batches.append(full)
        batch = self._new_batch(queue, now, timestamp)
        batch.values = values  # type: ignore[assignment]  # read-only from here on
        batch.keys = keys  # type: ignore[assignment]
        batch.headers = headers  # type: ignore[assignment]
        batch.reports = None
        batch.record_count = len(values)
        batch.size = size
        batch.bulk_charge = size
        batch.bulk = bulk
        batch.positions = positions
        bulk.add_batch()
        queue.batches.append(batch)
        if queue.sender is not None:
            queue.sender.batch_ready()
        else:
            self._on_unrouted_data()
        return batch

    # -- draining -------------------------------------------------------------------------------

    def drain(
        self, queues: Sequence[PartitionQueue], start: int, now: float, node: int = -1
    ) -> tuple[list[ProducerBatch], float]:
        """Ready batches for one request to broker ``node``, one per partition, starting at
        ``queues[start]`` (rotated by the caller so no partition starves); and the loop time at
        which another batch of these partitions becomes ready (``inf``: when something
        changes)."""
        drained: list[ProducerBatch] = []
        request_size = 0
        next_ready = float("inf")
        urgent = self.flushing > 0 or self.closing or bool(self.memory.waiters)
        idempotence = self.idempotence
        if idempotence is not None and not idempotence.can_send:
            return drained, next_ready
        count = len(queues)
        for step in range(count):
            queue = queues[(start + step) % count]
            if queue.batches:
                batch = queue.batches[0]
                if batch.retry_at > now:
                    next_ready = min(next_ready, batch.retry_at)
                    continue
            elif queue.open is not None and queue.open.record_count:
                batch = queue.open
                ready_at = batch.created_at + self.linger
                if ready_at > now and not urgent:
                    next_ready = min(next_ready, ready_at)
                    continue
            else:
                continue
            if queue.in_flight and queue.in_flight_to != node:
                continue  # the partition moved: its answers from the old leader come first
            if idempotence is not None and not (
                _may_send_idempotent(queue, batch) and idempotence.may_drain(queue)
            ):
                continue
            if drained and request_size + batch.size > self.max_request_size:
                next_ready = now
                break
            if batch is queue.open:
                queue.open = None
            else:
                queue.batches.popleft()
            if idempotence is not None and batch.base_sequence == NO_SEQUENCE:
                idempotence.assign_sequence(queue, batch)
            request_size += batch.size
            batch.in_flight = True
            queue.in_flight += 1
            queue.in_flight_to = node
            self.in_flight_batches += 1
            drained.append(batch)
        return drained, next_ready

    def sent(self, batch: ProducerBatch) -> None:
        """``batch``'s request is answered (or failed): it is no longer in flight."""
        if batch.in_flight:
            batch.in_flight = False
            batch.queue.in_flight -= 1
            self.in_flight_batches -= 1

    # -- completing -----------------------------------------------------------------------------

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.done:
            return
        if self.idempotence is not None and batch.base_sequence != NO_SEQUENCE:
            self.idempotence.acknowledged(batch.queue, batch)
        queue = batch.queue  # statistics: a few additions per batch
        queue.acked_records += batch.record_count
        if batch.records is not None:
            queue.acked_bytes += len(batch.records)
        if base_offset >= 0:
            queue.end_offset = base_offset + batch.record_count
        batch.succeed(base_offset, log_append_time, self.delivery_queue)
        self._forget(batch)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.done:
            return
        self._on_batch_failed(batch, error)
        batch.fail(error, self.delivery_queue)
        self._forget(batch)

    def _forget(self, batch: ProducerBatch) -> None:
        self.incomplete.pop(batch, None)
        self.memory.release(batch.charge)

    def retry(self, batch: ProducerBatch, error: BaseException, delay: float) -> None:
        """Put ``batch`` back in its partition to go again in ``delay`` seconds."""
        if batch.done:
            return
        batch.last_error = error
        batch.retry_at = self._loop.time() + delay
        batch.queue.requeue(batch)

    def expire(self, now: float) -> float:
        """Fail batches older than ``delivery.timeout.ms`` that are not in flight; return the
        loop time of the next deadline (``inf`` if nothing is waiting)."""
        next_deadline = float("inf")
        for queue in self.queues.values():
            while queue.batches and queue.batches[0].deadline <= now:
                batch = queue.batches.popleft()
                self.fail(batch, expired(batch, self.delivery_timeout))
            if queue.batches:
                next_deadline = min(next_deadline, queue.batches[0].deadline)
            elif queue.open is not None:
                if queue.open.deadline <= now:
                    batch, queue.open = queue.open, None
                    self.fail(batch, expired(batch, self.delivery_timeout))
                else:
                    next_deadline = min(next_deadline, queue.open.deadline)
        return next_deadline

    def abort_all(self, error_for: Callable[[ProducerBatch], BaseException]) -> int:
        """Fail every incomplete batch (closing after the timeout); returns the record count."""
        self.aborted = True
        records = 0
        for queue in self.queues.values():
            queue.batches.clear()
            queue.open = None
        for batch in list(self.incomplete):
            records += batch.record_count
            self.fail(batch, error_for(batch))
        return records

    def drop_unsent(self, error_for: Callable[[ProducerBatch], BaseException]) -> int:
        """Fail every batch not sent yet (its transaction is over); returns the record count.
        Batches in flight are left to their answers."""
        dropped: list[ProducerBatch] = []
        for queue in self.queues.values():
            dropped += queue.batches
            queue.batches.clear()
            if queue.open is not None:
                dropped.append(queue.open)
                queue.open = None
        for batch in dropped:
            self.fail(batch, error_for(batch))
        return sum(batch.record_count for batch in dropped)

    def batches_in(self, queues: Iterable[PartitionQueue]) -> Iterator[ProducerBatch]:
        for queue in queues:
            yield from queue.batches
            if queue.open is not None:
                yield queue.open

    def waiters(self) -> list[asyncio.Future[None]]:
        """Futures done when each batch incomplete now is (for ``flush``)."""
        return [batch.wait() for batch in self.incomplete]


def _may_send_idempotent(queue: PartitionQueue, batch: ProducerBatch) -> bool:
    if queue.in_flight >= MAX_IN_FLIGHT_PER_PARTITION:
        return False
    if queue.in_flight and queue.last_acked_sequence < 0:
        # Until the broker has stored a batch of this epoch it has no sequence to check ours
        # against and takes any (Kafka: its state may have expired). Were the first batch
        # refused for a moment (a leader not ready yet) while later ones were in flight,
        # those would be stored first and its retry refused as out of order for good: the
        # first batch goes alone.
        return False
    # A batch that was sent before goes again only when nothing else of its partition is in
    # flight: then it reaches the broker before the batches that followed it.
    return not (batch.attempts and queue.in_flight)


def expired(batch: ProducerBatch, delivery_timeout: float) -> KafkaTimeoutError:
    """The error of a batch not delivered within ``delivery.timeout.ms``."""
    last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
    return KafkaTimeoutError(
        f"{batch.record_count} records for {batch.topic}-{batch.partition} not delivered "
        f"within delivery.timeout.ms ({delivery_timeout * 1000:g} ms){last}"
    )


def describe_failure(batch: ProducerBatch, error: BaseException) -> str:
    """One log line for a failed batch."""
    return (
        f"failed to deliver {batch.record_count} records to {batch.topic}-{batch.partition} "
        f"after {batch.attempts} attempts: {type(error).__name__}: {error}"
    )
