"""Records waiting to be sent, gathered into one batch per partition (Kafka's RecordAccumulator).

``send`` appends a record to its partition's *open* batch; a batch closes when the next record
would take it past ``batch.size``. A batch is *ready* to go once closed, once it is
``linger.ms`` old, or at once while a ``flush``/``close`` is waiting or ``send`` is waiting for
memory. The sender of the broker leading the partition *drains* ready batches, one per
partition per request, and encodes each in one pass with ``build_record_batch`` only then:
appending costs a few list appends, not an encoding step per record.

Memory is bounded by ``buffer.memory``: every record is charged its encoded size plus what its
future and bookkeeping take (:data:`RECORD_MEMORY_OVERHEAD`) when appended, and the charge is
returned when its batch completes; ``send`` waits for room, at most ``max.block.ms``.

Batches that fail with a retriable error go back to the front of their partition, in the order
they were first made, and wait ``retry.backoff.ms`` (growing); the idempotence rules of
:mod:`~kayak.client.producer.idempotence` decide when a retried batch may go again. A batch not
delivered within ``delivery.timeout.ms`` of its creation fails with ``KafkaTimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Protocol

import crc32c

from kayak.client.producer.idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceManager
from kayak.client.producer.record_metadata import (
    UNKNOWN_OFFSET,
    RecordMetadata,
    RecordMetadataList,
    StoredRun,
)
from kayak.errors import KafkaTimeoutError
from kayak.protocol.records import BATCH_HEADER_SIZE, Codec, build_record_batch
from kayak.protocol.records.record import ATTRIBUTES_POS, CRC_POS, NO_SEQUENCE

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

RECORD_MEMORY_OVERHEAD = 120
"""Bytes charged to ``buffer.memory`` per record sent with ``send``, for its future and the
slots that hold it until the batch is encoded, so that the bound holds for tiny records too."""

# Where the idempotence fields sit in a v2 batch: producer id, producer epoch, base sequence.
_PRODUCER_STATE_POS = 43
_PRODUCER_STATE = struct.Struct(">qhi")

Value = bytes | bytearray | memoryview | None
HeaderList = Sequence[tuple[str, bytes | None]]


class SenderHandle(Protocol):
    """What the accumulator tells the sender of the broker leading a partition."""

    def batch_ready(self) -> None:
        """A batch of one of its partitions is ready: drain soon."""

    def batch_opened(self, ready_at: float) -> None:
        """A batch was opened; it will be ready at ``ready_at`` (loop time) at the latest."""

    def wake_at(self, when: float) -> None:
        """Drain again at loop time ``when``."""


class BulkSend:
    """The one future of a ``send_batch`` call, completed when all of its batches are."""

    __slots__ = ("_failed", "_pending", "_runs", "count", "future", "topic")

    def __init__(self, topic: str, count: int, future: asyncio.Future[RecordMetadataList]) -> None:
        self.topic = topic
        self.count = count
        self.future = future
        self._runs: list[StoredRun] = []
        self._pending = 0
        self._failed = False

    def add_batch(self) -> None:
        self._pending += 1

    def batch_stored(self, run: StoredRun) -> None:
        self._runs.append(run)
        self._pending -= 1
        if self._pending == 0 and not self._failed and not self.future.done():
            self.future.set_result(RecordMetadataList(self.topic, self._runs, self.count))

    def abandon(self, error: BaseException) -> None:
        """``send_batch`` itself failed part-way: fail the future now (the caller has the
        error); batches already queued are still sent."""
        self._failed = True
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()

    def batch_failed(self, error: BaseException) -> None:
        self._pending -= 1
        self._failed = True
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()  # logged once per batch instead of "never retrieved"


class ProducerBatch:
    """Records for one partition, sent and acknowledged together."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "bulk",
        "bulk_charge",
        "created_at",
        "deadline",
        "done",
        "futures",
        "headers",
        "in_flight",
        "keys",
        "last_error",
        "order",
        "plain",
        "positions",
        "producer_epoch",
        "producer_id",
        "queue",
        "record_count",
        "records",
        "retry_at",
        "size",
        "timestamp",
        "timestamps",
        "values",
        "waiters",
    )

    def __init__(
        self, queue: PartitionQueue, order: int, created_at: float, deadline: float, timestamp: int
    ) -> None:
        self.queue = queue
        self.order = order  # creation order: retried batches go back in this order
        self.created_at = created_at
        self.deadline = deadline
        self.values: list[Value] = []
        self.keys: list[Value] | None = None
        self.headers: list[HeaderList | None] | None = None
        # Record timestamps: ``timestamp`` for all of them, until one differs; then one each.
        self.timestamps: list[int] | None = None
        self.timestamp = timestamp
        self.futures: list[asyncio.Future[RecordMetadata]] | None = []
        self.bulk: BulkSend | None = None
        self.positions: range | list[int] = range(0)
        self.record_count = 0
        self.size = BATCH_HEADER_SIZE  # encoded size estimate, uncompressed
        self.plain = True  # no record has a key or headers (yet)
        self.bulk_charge = 0
        self.records: bytes | bytearray | None = None  # encoded, once drained
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.attempts = 0
        self.retry_at = 0.0
        self.in_flight = False
        self.done = False
        self.last_error: BaseException | None = None
        self.waiters: list[asyncio.Future[None]] | None = None

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.queue.topic}-{self.queue.partition} #{self.order} "
            f"{self.record_count} records, seq {self.base_sequence}, attempt {self.attempts}>"
        )

    @property
    def topic(self) -> str:
        return self.queue.topic

    @property
    def partition(self) -> int:
        return self.queue.partition

    @property
    def charge(self) -> int:
        """What the batch holds of ``buffer.memory``: what ``send`` charged per record (its size
        and RECORD_MEMORY_OVERHEAD), or what ``send_batch`` charged for the lot."""
        if self.bulk is not None:
            return self.bulk_charge
        return self.size - BATCH_HEADER_SIZE + self.record_count * RECORD_MEMORY_OVERHEAD

    def add_key_and_headers(self, key: bytes | None, headers: HeaderList | None) -> None:
        """Record the key and headers of the record being appended (before ``record_count``
        counts it). The lists exist only once some record has a key or headers: keyless
        batches stay on ``build_record_batch``'s fast path."""
        self.plain = False
        if key is not None:
            if self.keys is None:
                self.keys = [None] * self.record_count
            self.keys.append(key)
        elif self.keys is not None:
            self.keys.append(None)
        if headers:
            if self.headers is None:
                self.headers = [None] * self.record_count
            self.headers.append(headers)
        elif self.headers is not None:
            self.headers.append(None)

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp the idempotence fields, rewriting them in an already encoded batch."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence = base_sequence
        if self.records is not None:
            self.records = _restamp(self.records, producer_id, producer_epoch, base_sequence)

    def encode(self, codec: Codec) -> bytes | bytearray:
        """The batch as it goes on the wire (encoded once; retries reuse the bytes)."""
        if self.records is None:
            timestamp: int | list[int] = (
                self.timestamps if self.timestamps is not None else self.timestamp
            )
            self.records = build_record_batch(
                self.values,
                self.keys,
                self.headers,
                timestamp=timestamp,
                codec=codec,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
            )
            # The encoded bytes are all a retry needs; drop the records' own objects.
            self.values, self.keys, self.headers = [], None, None
        return self.records

    def wait(self) -> asyncio.Future[None]:
        """A future done when the batch is (flush waits on these)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.done:
            future.set_result(None)
        else:
            if self.waiters is None:
                self.waiters = []
            self.waiters.append(future)
        return future

    def _finish(self) -> None:
        self.done = True
        # Let go of everything: futures nobody else holds die now, not with the batch.
        self.values, self.keys, self.headers, self.records = [], None, None, None
        self.futures, self.timestamps = None, None
        for waiter in self.waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def succeed(self, base_offset: int, log_append_time: int) -> None:
        """Resolve every record's future (offsets from ``base_offset``; -1 if unknown)."""
        topic, partition = self.queue.topic, self.queue.partition
        futures = self.futures
        if futures:
            count = len(futures)
            if base_offset >= 0:
                offsets: Iterable[int] = range(base_offset, base_offset + count)
            else:
                offsets = repeat(UNKNOWN_OFFSET, count)
            # One RecordMetadata and one set_result per record, both looped in C.
            metadata = map(
                _new_tuple,
                repeat(RecordMetadata),
                zip(
                    repeat(topic),
                    repeat(partition),
                    offsets,
                    self._record_timestamps(count, log_append_time),
                ),
            )
            try:
                _exhaust(map(_set_result, futures, metadata))
            except asyncio.InvalidStateError:  # a caller cancelled a future: go one by one
                _resolve_remaining(
                    futures,
                    topic,
                    partition,
                    base_offset,
                    self._record_timestamps(count, log_append_time),
                )
        if self.bulk is not None:
            timestamp = log_append_time if log_append_time >= 0 else self.timestamp
            self.bulk.batch_stored(StoredRun(self.positions, partition, base_offset, timestamp))
        self._finish()

    def _record_timestamps(self, count: int, log_append_time: int) -> Iterable[int]:
        if log_append_time >= 0:
            return repeat(log_append_time, count)
        if self.timestamps is not None:
            return self.timestamps
        return repeat(self.timestamp, count)

    def fail(self, error: BaseException) -> None:
        """Fail every record's future with ``error``."""
        for future in self.futures or ():
            if not future.done():
                future.set_exception(error)
                # Callers who never look would each get a "never retrieved" log line; the
                # failure is logged once per batch instead.
                future.exception()
        if self.bulk is not None:
            self.bulk.batch_failed(error)
        self._finish()


_new_tuple = tuple.__new__
_set_result = asyncio.Future.set_result
_sink: deque[object] = deque(maxlen=0)
_exhaust = _sink.extend  # runs an iterator to its end in C, keeping nothing


def _resolve_remaining(
    futures: list[asyncio.Future[RecordMetadata]],
    topic: str,
    partition: int,
    base_offset: int,
    timestamps: Iterable[int],
) -> None:
    for index, (future, timestamp) in enumerate(zip(futures, timestamps, strict=False)):
        if not future.done():
            offset = base_offset + index if base_offset >= 0 else UNKNOWN_OFFSET
            future.set_result(RecordMetadata(topic, partition, offset, timestamp))


def _restamp(records: bytes | bytearray, producer_id: int, epoch: int, sequence: int) -> bytearray:
    """``records`` with new idempotence fields and the CRC-32C recomputed over them."""
    buffer = bytearray(records)
    _PRODUCER_STATE.pack_into(buffer, _PRODUCER_STATE_POS, producer_id, epoch, sequence)
    crc = crc32c.crc32c(memoryview(buffer)[ATTRIBUTES_POS:])
    struct.pack_into(">I", buffer, CRC_POS, crc)
    return buffer


class PartitionQueue:
    """One partition's batches: closed ones waiting in order, then the open one."""

    __slots__ = (
        "batches",
        "in_flight",
        "in_flight_to",
        "last_acked_sequence",
        "leader",
        "next_sequence",
        "open",
        "partition",
        "sender",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None
        self.leader = -1
        self.sender: SenderHandle | None = None
        self.in_flight = 0  # batches sent, not yet answered
        self.in_flight_to = -1  # the broker they went to
        self.next_sequence = 0
        self.last_acked_sequence = -1

    def __repr__(self) -> str:
        return f"<PartitionQueue {self.topic}-{self.partition} leader={self.leader}>"

    @property
    def has_data(self) -> bool:
        return bool(self.batches) or self.open is not None

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch back in creation order (before the batches made after it)."""
        batches = self.batches
        if not batches or batches[-1].order < batch.order:
            batches.append(batch)
            return
        index = 0
        for index, queued in enumerate(batches):  # noqa: B007 - index is used after the loop
            if queued.order > batch.order:
                break
        batches.insert(index, batch)

    def reset_sequences(self) -> None:
        """A new epoch: every unacknowledged batch is numbered again from 0 when drained."""
        self.next_sequence = 0
        self.last_acked_sequence = -1
        for batch in self.batches:
            batch.base_sequence = NO_SEQUENCE


class BufferMemory:
    """``buffer.memory``: bytes charged for buffered records, with FIFO waiters for room."""

    __slots__ = ("limit", "used", "waiters")

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
            await asyncio.wait_for(waiter, timeout)
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
        batch.futures = None
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
            if idempotence is not None and not _may_send_idempotent(queue, batch):
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
        batch.succeed(base_offset, log_append_time)
        self._forget(batch)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.done:
            return
        self._on_batch_failed(batch, error)
        batch.fail(error)
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
