"""A partition's batches: :class:`ProducerBatch` (records sent and acknowledged together) and
:class:`PartitionQueue` (one partition's batches and sequence state).

These are the data the :mod:`~kayak.client.producer.accumulator` gathers records into and the
:mod:`~kayak.client.producer.idempotence` rules number; both import them from here.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Protocol, TypeAlias

import crc32c

from kayak.client.producer.native import per_record
from kayak.client.producer.record_metadata import (
    UNKNOWN_OFFSET,
    RecordMetadata,
    RecordMetadataList,
    StoredRun,
)
from kayak.protocol.records import BATCH_HEADER_SIZE, Codec, build_record_batch
from kayak.protocol.records.record import ATTRIBUTES_POS, CRC_POS, NO_SEQUENCE

log = logging.getLogger(__name__)

__all__ = [
    "CALLBACK",
    "FUTURE",
    "RECORD_MEMORY_OVERHEAD",
    "BulkSend",
    "DeliveryCallback",
    "DeliveryQueue",
    "HeaderList",
    "PartitionQueue",
    "ProducerBatch",
    "SenderHandle",
    "Value",
]

RECORD_MEMORY_OVERHEAD = 120
"""Bytes charged to ``buffer.memory`` per record of ``send`` or ``produce``, for its future
(or callback reference) and the slots that hold it until the batch is encoded, so that the
bound holds for tiny records too."""

# Where the idempotence fields sit in a v2 batch: producer id, producer epoch, base sequence.
_PRODUCER_STATE_POS = 43
_PRODUCER_STATE = struct.Struct(">qhi")

Value = bytes | bytearray | memoryview | None
HeaderList = Sequence[tuple[str, bytes | None]]

DeliveryCallback: TypeAlias = Callable[[BaseException | None, RecordMetadata], object]
"""``produce``'s ``on_delivery(error, metadata)``: ``error`` None when stored; on failure,
``metadata`` still names the topic and partition, with offset -1."""
DeliveryQueue: TypeAlias = deque[tuple[DeliveryCallback, BaseException | None, RecordMetadata]]
"""Where a batch puts its delivery reports instead of calling them, for a caller that runs
them in its own thread (the sync facade's ``poll``)."""

# What a batch holds per record to report delivery through (``ProducerBatch.report_kinds``).
FUTURE = 1  # ``send``: an asyncio future to resolve
CALLBACK = 2  # ``produce``: an ``on_delivery`` callable


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


class BatchCounters:
    """``ProducerBatch``'s ``record_count``, ``size`` and ``report_kinds``: the reference for
    ``_per_record``'s C base class of the same name, which keeps them as C integers for
    ``produce``'s C path."""

    __slots__ = ("record_count", "report_kinds", "size")

    record_count: int
    report_kinds: int
    size: int


if per_record is None or TYPE_CHECKING:
    _BatchCountersBase = BatchCounters
else:
    _BatchCountersBase = per_record.BatchCounters


class ProducerBatch(_BatchCountersBase):
    """Records for one partition, sent and acknowledged together."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "bulk",
        "bulk_charge",
        "created_at",
        "deadline",
        "done",
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
        "records",
        "report_positions",
        "reports",
        "retry_at",
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
        # What reports each record's delivery: a future (send) or a callback (produce), one
        # per record while ``report_positions`` is None; once a record comes without one,
        # ``report_positions`` says which record each report belongs to.
        self.reports: list[asyncio.Future[RecordMetadata] | DeliveryCallback] | None = []
        self.report_positions: list[int] | None = None
        self.report_kinds = 0  # FUTURE | CALLBACK: which kinds ``reports`` holds
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

    def encode(self, codec: Codec, transactional: bool = False) -> bytes | bytearray:
        """The batch as it goes on the wire (encoded once; retries reuse the bytes);
        ``transactional`` sets the attribute bit of a transactional producer's batches."""
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
                is_transactional=transactional,
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
        self.reports, self.report_positions, self.timestamps = None, None, None
        for waiter in self.waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def succeed(
        self, base_offset: int, log_append_time: int, queue: DeliveryQueue | None = None
    ) -> None:
        """Report every record stored: resolve its future or call its callback (offsets from
        ``base_offset``; -1 if unknown). With a ``queue``, callbacks go there, not called."""
        reports = self.reports
        kinds = self.report_kinds
        in_c = kinds == FUTURE or (kinds == CALLBACK and queue is None)
        if reports and in_c and per_record is not None:
            # Each record's metadata made, reported and (unless kept) freed in one C loop.
            stamps = None if log_append_time >= 0 else self.timestamps
            stamp = log_append_time if log_append_time >= 0 else self.timestamp
            per_record.deliver(
                _set_result if kinds == FUTURE else None, reports, _report_failed,
                RecordMetadata, len(reports), self.queue.topic, self.queue.partition,
                base_offset, self.report_positions, stamps, stamp,
            )  # fmt: skip
        elif reports:
            metadata = self._metadata(len(reports), base_offset, log_append_time)
            if kinds == FUTURE:
                # One RecordMetadata and one set_result per record, both looped in C.
                _run_all(map(_set_result, reports, metadata))  # type: ignore[arg-type]
            elif kinds == CALLBACK and queue is not None:
                queue.extend(zip(reports, repeat(None), metadata))  # type: ignore[arg-type]
            elif kinds == CALLBACK:
                # One RecordMetadata and one call per record, looped in C: the callbacks'
                # own Python is all that runs per record.
                _run_all(map(_call, reports, repeat(None), metadata))  # type: ignore[arg-type]
            else:
                _run_all(map(_report, reports, repeat(None), metadata, repeat(queue)))
        if self.bulk is not None:
            timestamp = log_append_time if log_append_time >= 0 else self.timestamp
            self.bulk.batch_stored(
                StoredRun(self.positions, self.queue.partition, base_offset, timestamp)
            )
        self._finish()

    def _metadata(
        self, count: int, base_offset: int, log_append_time: int
    ) -> Iterable[RecordMetadata]:
        """The ``RecordMetadata`` of each record that has a report (in C when built; else
        made as they are read)."""
        positions = self.report_positions
        if per_record is not None:
            stamps = None if log_append_time >= 0 else self.timestamps
            stamp = log_append_time if log_append_time >= 0 else self.timestamp
            return per_record.record_metadata(
                RecordMetadata, count, self.queue.topic, self.queue.partition, base_offset,
                positions, stamps, stamp,
            )  # fmt: skip
        offsets: Iterable[int]
        if base_offset < 0:
            offsets = repeat(UNKNOWN_OFFSET, count)
        elif positions is None:
            offsets = range(base_offset, base_offset + count)
        else:
            offsets = map(operator.add, positions, repeat(base_offset))
        timestamps: Iterable[int]
        if log_append_time >= 0:
            timestamps = repeat(log_append_time, count)
        elif self.timestamps is None:
            timestamps = repeat(self.timestamp, count)
        elif positions is None:
            timestamps = self.timestamps
        else:
            timestamps = map(self.timestamps.__getitem__, positions)
        topic, partition = self.queue.topic, self.queue.partition
        return map(
            _new_tuple,
            repeat(RecordMetadata),
            zip(repeat(topic), repeat(partition), offsets, timestamps),
        )

    def fail(self, error: BaseException, queue: DeliveryQueue | None = None) -> None:
        """Report every record failed with ``error`` (callbacks get offset -1)."""
        reports = self.reports
        if reports:
            metadata = self._metadata(len(reports), UNKNOWN_OFFSET, -1)
            _run_all(map(_report, reports, repeat(error), metadata, repeat(queue)))
        if self.bulk is not None:
            self.bulk.batch_failed(error)
        self._finish()


_new_tuple = tuple.__new__
_set_result = asyncio.Future.set_result
_call = operator.call
_sink: deque[object] = deque(maxlen=0)
_exhaust = _sink.extend  # runs an iterator to its end in C, keeping nothing


def _run_all(calls: Iterator[object]) -> None:
    """Run every call of ``calls``; one that raises is logged and the rest still run (a map
    goes on past an item whose function raised)."""
    while True:
        try:
            _exhaust(calls)
        except asyncio.InvalidStateError:
            pass  # a caller cancelled its send() future: nothing to tell it
        except Exception:
            log.exception("a delivery callback raised (the other records are still reported)")
        else:
            return


def _report_failed(error: Exception) -> None:
    """A report raised: the other records are still reported (``deliver``'s ``on_error``)."""
    if isinstance(error, asyncio.InvalidStateError):
        return  # a caller cancelled its send() future: nothing to tell it
    log.error("a delivery callback raised (the other records are still reported)", exc_info=error)


def _report(
    report: asyncio.Future[RecordMetadata] | DeliveryCallback,
    error: BaseException | None,
    metadata: RecordMetadata,
    queue: DeliveryQueue | None,
) -> None:
    """One record's report, whatever its kind (failures, and batches of send and produce)."""
    if isinstance(report, asyncio.Future):
        if report.done():
            return
        if error is None:
            report.set_result(metadata)
        else:
            report.set_exception(error)
            # Callers who never look would each get a "never retrieved" log line; the
            # failure is logged once per batch instead.
            report.exception()
    elif queue is not None:
        queue.append((report, error, metadata))
    else:
        report(error, metadata)


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
        "acked_bytes",
        "acked_records",
        "batches",
        "end_offset",
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
        # Statistics: records and encoded batch bytes the broker acknowledged, and the offset
        # after the last acknowledged batch (-1 until one is, or with acks=0).
        self.acked_records = 0
        self.acked_bytes = 0
        self.end_offset = -1

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
