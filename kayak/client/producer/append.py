"""The one way a record joins its partition's batch, and ``produce``: per-record delivery
reports without a future or a coroutine per record.

``Producer.send`` (a future per record) and ``Producer.produce`` (an ``on_delivery`` callback
per record, or none) both end in :meth:`RecordAppender._append`: partition choice, the batch
with room, the record's value, key, headers and timestamp, and what reports its delivery
(``ProducerBatch.reports``). When the batch completes, one pass over its reports resolves the
futures or calls the callbacks; records produced without a callback cost nothing then.

``produce`` is a plain method: it never waits. Its common case (a bytes value without key,
headers, partition or timestamp, to a known topic whose open batch has room) runs in C when
``_per_record.c`` is built (:mod:`.native`): a started producer's ``produce`` is then a
``PlainAppender``, which hands every other call, unchanged, to the Python method below (the
reference; ``KAYAK_PURE_PYTHON=1`` selects it alone).

``buffer.memory`` full raises
:class:`~kayak.client.producer.errors.BufferFullError` (a ``BufferError``, as confluent-kafka's
``produce`` raises): let the event loop run (``await producer.flush()``, or any ``await``) and
produce again. A topic whose metadata the producer has not seen yet does not fail: its records
wait in order, charged to ``buffer.memory``, until the metadata comes (within ``max.block.ms``;
otherwise each callback gets ``UnknownTopicOrPartitionError``), as librdkafka queues them.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from kayak.client.config import ProducerConfig
from kayak.client.partitioner import Partitioner
from kayak.client.producer.accumulator import RECORD_OVERHEAD, BufferMemory, RecordAccumulator
from kayak.client.producer.batch import (
    CALLBACK,
    FUTURE,
    RECORD_MEMORY_OVERHEAD,
    DeliveryCallback,
    HeaderList,
    PartitionQueue,
    ProducerBatch,
    Value,
)
from kayak.client.producer.errors import BufferFullError, ProducerClosedError
from kayak.client.producer.native import per_record
from kayak.client.producer.record_metadata import UNKNOWN_OFFSET, RecordMetadata
from kayak.client.producer.record_sizes import Headers, measure, too_large
from kayak.client.producer.sender import TopicState
from kayak.client.producer.transactions import TransactionManager
from kayak.errors import KayakError
from kayak.protocol.records.builder import now_ms

if TYPE_CHECKING:
    from kayak.client.producer._per_record import PlainAppender
    from kayak.client.producer.batch import DeliveryQueue

log = logging.getLogger(__name__)

__all__ = ["RecordAppender"]


if per_record is not None:
    per_record.configure(TopicState, PartitionQueue, ProducerBatch, BufferMemory)


class _Waiting(NamedTuple):
    """A ``produce``d record waiting for its topic's metadata (``buffer.memory`` charged)."""

    value: Value
    key: bytes | None
    headers: HeaderList | None
    partition: int | None
    timestamp: int
    size: int
    on_delivery: DeliveryCallback | None


class RecordAppender(ABC):
    """The record path of :class:`~kayak.client.producer.producer.Producer`: ``produce`` and
    the append ``send`` shares with it. (A base class of ``Producer``, which sets these.)"""

    config: ProducerConfig
    _partitioner: Partitioner
    _sticky_without_key: bool
    _batch_size: int
    _max_record_size: int
    _max_block: float
    _create_future: Callable[[], asyncio.Future[RecordMetadata]]
    _closed: bool
    _memory: BufferMemory
    _accumulator: RecordAccumulator
    _topics: dict[str, TopicState]
    _transaction: TransactionManager | None
    _waiting: dict[str, list[_Waiting]]
    _waiting_tasks: set[asyncio.Task[None]]
    _plain_appender: PlainAppender | None  # produce's and send's common case in C, once started

    @abstractmethod
    def _require_started(self) -> None:
        """Raise unless the producer has been started (the subclass knows how it starts)."""

    @abstractmethod
    async def _topic_state(self, topic: str) -> TopicState:
        """``_fetch_topic_state``, once the producer is known to be started and open."""

    @abstractmethod
    async def _fetch_topic_state(self, topic: str) -> TopicState:
        """The topic's partitions, from metadata (waiting for it within max.block.ms)."""

    # -- produce ----------------------------------------------------------------------------------

    def _install_plain_appender(self) -> None:
        """Once started: let ``produce``'s and ``send``'s common case run in C (not for
        transactional producers, whose every record checks the transaction's state first)."""
        if (
            per_record is None
            or self._transaction is not None
            or type(self).produce is not RecordAppender.produce  # a subclass's own produce
        ):
            return
        appender = per_record.PlainAppender(
            RecordAppender.produce.__get__(self), self._topics, self._waiting, self._memory,
            self._batch_size, self._max_record_size, RECORD_OVERHEAD, RECORD_MEMORY_OVERHEAD,
            CALLBACK, FUTURE,
        )  # fmt: skip
        self._plain_appender = appender
        # An instance attribute: ``producer.produce`` finds it before the method. (Set as
        # attributes are, not through vars(self), which would give the instance a dict of its
        # own and slow every other attribute read of ``send``.)
        setattr(self, "produce", appender)  # noqa: B010

    def _uninstall_plain_appender(self) -> None:
        """Closing: every ``produce``, even through a reference taken earlier, goes to Python
        (which raises ProducerClosedError)."""
        appender, self._plain_appender = self._plain_appender, None
        if appender is not None:
            appender.enabled = False
            delattr(self, "produce")

    def produce(
        self,
        topic: str,
        value: Value,
        key: bytes | bytearray | memoryview | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Add one record to its partition's batch, now, without waiting; ``on_delivery(error,
        metadata)`` is called on the event loop once the record is stored (``error`` None) or
        has failed (``metadata.offset`` -1).

        Call it from the producer's event loop. It never suspends: records leave while the
        loop runs (any ``await``; ``await producer.flush()`` sends them at once and waits).
        Raises ``BufferFullError`` when ``buffer.memory`` is full (let the loop run, then
        produce again), ``RecordTooLargeError``, ``TypeError`` for a value that is not bytes,
        ``ValueError`` for a partition the topic does not have, ``ProducerClosedError``.
        A topic not known yet: see the module docstring. ``on_delivery`` must not block; an
        exception it raises is logged.
        """
        if self._transaction is not None:
            self._transaction.check_can_send()
        state = self._topics.get(topic)
        if state is None or self._closed:
            self._require_started()
            if self._closed:
                raise ProducerClosedError("the producer is closed")
        size, key_bytes, header_list, timestamp = self._measure(value, key, headers, timestamp)
        charge = size + RECORD_MEMORY_OVERHEAD
        memory = self._memory
        if memory.waiters or memory.used + charge > memory.limit:
            raise BufferFullError(
                f"buffer.memory ({memory.limit} bytes) is full: let the event loop run "
                "(await producer.flush(), or any await) and produce again"
            )
        memory.used += charge
        if state is None or (self._waiting and topic in self._waiting):
            self._produce_unrouted(
                topic, _Waiting(value, key_bytes, header_list, partition, timestamp, size,
                                on_delivery),
            )  # fmt: skip
            return
        if partition is not None and not 0 <= partition < state.partition_count:
            memory.release(charge)
            raise _no_such_partition(topic, partition, state)
        self._append(
            state, value, key_bytes, header_list, partition, timestamp, size, on_delivery, CALLBACK
        )

    def _produce_unrouted(self, topic: str, record: _Waiting) -> None:
        """``produce`` (memory charged) for a topic whose metadata is not here yet, or whose
        earlier records still wait for it (they go first)."""
        waiting = self._waiting.get(topic)
        if waiting is not None:
            waiting.append(record)
        else:
            self._waiting[topic] = [record]
            task = asyncio.ensure_future(self._route_waiting(topic))
            self._waiting_tasks.add(task)
            task.add_done_callback(self._waiting_tasks.discard)

    async def _route_waiting(self, topic: str) -> None:
        """Get ``topic``'s metadata, then append its waiting records in order (or fail them)."""
        try:
            state = await self._fetch_topic_state(topic)
        except (KayakError, ValueError) as exc:
            for record in self._waiting.pop(topic, []):
                self._memory.release(record.size + RECORD_MEMORY_OVERHEAD)
                _report_failure(topic, record, exc, self._accumulator.delivery_queue)
            return
        # No await from here on: records produced meanwhile join the list, not the batch.
        for record in self._waiting.pop(topic, []):
            self._append_waited(state, topic, record)

    def _append_waited(self, state: TopicState, topic: str, record: _Waiting) -> None:
        """Append a record whose memory is charged; a bad partition goes to its callback."""
        partition = record.partition
        if partition is not None and not 0 <= partition < state.partition_count:
            self._memory.release(record.size + RECORD_MEMORY_OVERHEAD)
            error = _no_such_partition(topic, partition, state)
            _report_failure(topic, record, error, self._accumulator.delivery_queue)
            return
        self._append(
            state, record.value, record.key, record.headers, partition, record.timestamp,
            record.size, record.on_delivery, CALLBACK,
        )  # fmt: skip

    def _abandon_waiting(self, error: BaseException) -> None:
        """Closing gave up: records still waiting for metadata fail with ``error``."""
        # Emptied in place: the C fast path of produce holds this dict.
        waiting = dict(self._waiting)
        self._waiting.clear()
        for task in list(self._waiting_tasks):
            task.cancel()
        for topic, records in waiting.items():
            for record in records:
                self._memory.release(record.size + RECORD_MEMORY_OVERHEAD)
                _report_failure(topic, record, error, self._accumulator.delivery_queue)

    async def _wait_for_waiting_topics(self) -> None:
        """Until every topic ``produce`` waits on has its records appended (or failed)."""
        while self._waiting_tasks:
            await asyncio.wait(list(self._waiting_tasks))

    # -- the append -------------------------------------------------------------------------------

    def _measure(
        self,
        value: Value,
        key: bytes | bytearray | memoryview | None,
        headers: Headers | None,
        timestamp: int | None,
    ) -> tuple[int, bytes | None, HeaderList | None, int]:
        """A record's size (checked against the largest that fits), its key and headers as
        they are stored, and its timestamp (now, unless given)."""
        key_bytes: bytes | None = None
        header_list: HeaderList | None = None
        if type(value) is bytes and key is None and not headers:
            size = len(value) + RECORD_OVERHEAD  # the common case, checked at once
        else:
            size, key_bytes, header_list = measure(value, key, headers)
        if size > self._max_record_size:
            raise too_large(size, self.config)
        if timestamp is None:
            timestamp = now_ms()  # time_ns() // 1_000_000, in C when built
        return size, key_bytes, header_list, timestamp

    async def _append_in_python(
        self,
        topic: str,
        value: Value,
        key: bytes | bytearray | memoryview | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
        future: asyncio.Future[RecordMetadata] | None,
    ) -> asyncio.Future[RecordMetadata]:
        """``send``'s append, with everything the C path leaves to Python: topics without
        metadata yet, a full ``buffer.memory``, keys, headers, partitions, timestamps. The
        record's future (``future``, or a new one once the record is accepted)."""
        state = self._topics.get(topic)
        if state is None or self._closed or self._waiting:
            state = await self._topic_state(topic)
            if topic in self._waiting:  # produce()d records go first: wait for their metadata
                await self._wait_for_waiting_topics()
        size, key_bytes, header_list, timestamp = self._measure(value, key, headers, timestamp)
        charge = size + RECORD_MEMORY_OVERHEAD
        memory = self._memory
        if memory.waiters or memory.used + charge > memory.limit:
            await memory.reserve(charge, self._max_block)
        else:
            memory.used += charge

        if partition is not None and not 0 <= partition < state.partition_count:
            memory.release(charge)
            raise ValueError(
                f"partition {partition} of {topic!r} does not exist: it has "
                f"{state.partition_count} partitions"
            )
        if future is None:
            future = self._create_future()
        self._append(
            state, value, key_bytes, header_list, partition, timestamp, size, future, FUTURE
        )
        return future

    def _append(
        self,
        state: TopicState,
        value: Value,
        key_bytes: bytes | None,
        header_list: HeaderList | None,
        partition: int | None,
        timestamp: int,
        size: int,
        report: object,
        kind: int,
    ) -> None:
        """Append a record (memory charged, partition checked) with what reports its delivery
        (``report``, of ``kind`` FUTURE or CALLBACK; None: nothing to report)."""
        chosen = partition is None
        if partition is None:
            partition = state.sticky if key_bytes is None else -1
            if partition < 0:
                partition = self._choose_partition(state, key_bytes)
        batch = state.queues[partition].open
        if batch is None or (batch.size + size > self._batch_size and batch.record_count):
            batch = self._batch_with_room(state, partition, key_bytes, chosen, size, timestamp)
        # ProducerBatch's append, inlined: this runs once per record.
        if report is not None:
            reports = batch.reports
            positions = batch.report_positions
            if positions is not None:
                positions.append(batch.record_count)
            reports.append(report)  # type: ignore[union-attr, arg-type]  # open: a list
            batch.report_kinds |= kind
        elif batch.report_positions is None:
            # The first record without a report: from now on each report says its record.
            batch.report_positions = list(range(batch.record_count))
        batch.values.append(value)
        stamps = batch.timestamps
        if stamps is not None:
            stamps.append(timestamp)
        elif timestamp != batch.timestamp:
            batch.timestamps = [batch.timestamp] * batch.record_count + [timestamp]
        if key_bytes is not None or header_list or not batch.plain:
            batch.add_key_and_headers(key_bytes, header_list)
        batch.record_count += 1
        batch.size += size  # the memory charged follows from it: see ProducerBatch.charge

    def _choose_partition(self, state: TopicState, key: bytes | None) -> int:
        partition = self._partitioner(state.name, key, state.partition_count, state.available)
        if key is None and self._sticky_without_key:
            # The partitioner gives keyless records this partition until on_new_batch: skip
            # asking it for every record.
            state.sticky = partition
        return partition

    def _batch_with_room(
        self,
        state: TopicState,
        partition: int,
        key: bytes | None,
        chosen: bool,
        size: int,
        timestamp: int,
    ) -> ProducerBatch:
        """The record does not fit its partition's open batch (or there is none)."""
        if chosen:
            # KIP-480: a new batch is due, so a sticky partitioner moves on first.
            self._partitioner.on_new_batch(state.name, partition)
            state.sticky = -1
            partition = self._choose_partition(state, key)
        queue = state.queues[partition]
        batch = queue.open
        if batch is None or (batch.size + size > self._batch_size and batch.record_count):
            batch = self._accumulator.open_batch(queue, timestamp)
        return batch


def _no_such_partition(topic: str, partition: int, state: TopicState) -> ValueError:
    return ValueError(
        f"partition {partition} of {topic!r} does not exist: it has "
        f"{state.partition_count} partitions"
    )


def _report_failure(
    topic: str, record: _Waiting, error: BaseException, queue: DeliveryQueue | None
) -> None:
    """A record that never reached a batch failed: tell its callback (or the log)."""
    callback = record.on_delivery
    partition = record.partition if record.partition is not None else -1
    metadata = RecordMetadata(topic, partition, UNKNOWN_OFFSET, record.timestamp)
    if callback is None:
        log.warning("a record produced to %r failed: %s", topic, error)
    elif queue is not None:
        queue.append((callback, error, metadata))
    else:
        try:
            callback(error, metadata)
        except Exception:
            log.exception("a delivery callback raised")
