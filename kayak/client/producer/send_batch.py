"""``send_batch``'s path: a whole list of records, each partition's share queued as closed batches.

``Producer.send_batch`` checks that it may send and finds the topic; :class:`BulkEnqueuer` does
the rest: it checks and sizes the records (:mod:`~kayak.client.producer.record_sizes`), asks the
partitioner once per batch where it can (:func:`sticky_without_key`) or once per record, cuts each
partition's records at ``batch.size``, charges ``buffer.memory`` per batch and hands the batches
to the :class:`~kayak.client.producer.accumulator.RecordAccumulator`. One
:class:`~kayak.client.producer.batch.BulkSend` future resolves to all of their metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import cast

from kayak.client.config import ProducerConfig
from kayak.client.partitioner import (
    ConsistentPartitioner,
    ConsistentRandomPartitioner,
    DefaultPartitioner,
    Murmur2Partitioner,
    Murmur2RandomPartitioner,
    Partitioner,
    StickyPartitioner,
)
from kayak.client.producer.accumulator import RECORD_OVERHEAD, BufferMemory, RecordAccumulator
from kayak.client.producer.batch import BulkSend, HeaderList, Value
from kayak.client.producer.errors import ProducerClosedError
from kayak.client.producer.record_metadata import RecordMetadataList
from kayak.client.producer.record_sizes import (
    Headers,
    all_bytes,
    bulk_headers,
    chunk_ends,
    record_sizes,
    too_large,
)
from kayak.client.producer.sender import TopicState
from kayak.protocol.records import BATCH_HEADER_SIZE
from kayak.protocol.records.builder import now_ms

__all__ = ["BulkEnqueuer", "sticky_without_key"]


class BulkEnqueuer:
    """Queues the records of ``send_batch`` calls; made by ``Producer.start()``, with the
    producer's accumulator and memory. ``is_closed`` tells whether the producer was closed
    while a batch waited for memory."""

    def __init__(
        self,
        *,
        config: ProducerConfig,
        partitioner: Partitioner,
        accumulator: RecordAccumulator,
        memory: BufferMemory,
        batch_size: int,
        max_record_size: int,
        max_block: float,
        loop: asyncio.AbstractEventLoop,
        is_closed: Callable[[], bool],
    ) -> None:
        self._config = config
        self._partitioner = partitioner
        self._accumulator = accumulator
        self._memory = memory
        self._batch_size = batch_size
        self._max_record_size = max_record_size
        self._max_block = max_block
        self._loop = loop
        self._is_closed = is_closed

    async def enqueue(
        self,
        topic: str,
        state: TopicState,
        values: Sequence[Value],
        keys: Sequence[Value] | None,
        headers: Sequence[Headers | None] | None,
        partition: int | None,
    ) -> asyncio.Future[RecordMetadataList]:
        """``Producer.send_batch`` after its checks: see there."""
        count = len(values)
        future: asyncio.Future[RecordMetadataList] = self._loop.create_future()
        if count == 0:
            future.set_result(RecordMetadataList(topic, [], 0))
            return future
        if partition is not None and not 0 <= partition < state.partition_count:
            raise ValueError(
                f"partition {partition} of {topic!r} does not exist: it has "
                f"{state.partition_count} partitions"
            )
        sizes: list[int] | None = None
        if keys is None and headers is None and all_bytes(values):
            # The common case needs no per-record sizes unless the lot must be split.
            lengths = cast("Sequence[bytes]", values)  # all bytes, just checked
            largest = max(map(len, lengths)) + RECORD_OVERHEAD
            total = sum(map(len, lengths)) + count * RECORD_OVERHEAD
            if total + BATCH_HEADER_SIZE > self._batch_size:
                sizes = record_sizes(values, None, None, count)
        else:
            sizes = record_sizes(values, keys, headers, count)
            largest, total = max(sizes), sum(sizes)
        if largest > self._max_record_size:
            raise too_large(largest, self._config)
        header_lists = bulk_headers(headers)
        bulk = BulkSend(topic, count, future)
        try:
            await self._enqueue_records(
                state, bulk, values, keys, header_lists, partition, sizes, total
            )
        except BaseException as exc:
            bulk.abandon(exc)  # whatever was queued still goes; the caller has the error
            raise
        return future

    async def _enqueue_records(
        self,
        state: TopicState,
        bulk: BulkSend,
        values: Sequence[Value],
        keys: Sequence[Value] | None,
        headers: Sequence[HeaderList | None] | None,
        partition: int | None,
        sizes: list[int] | None,
        total: int,
    ) -> None:
        """Queue the records as closed batches; ``sizes`` (each record's) may be None when
        they all fit one batch (``total`` bytes)."""
        timestamp = now_ms()
        topic, count = state.name, len(values)
        partitioner = self._partitioner
        state.sticky = -1  # the partitioner is asked directly here: forget send's shortcut
        if partition is not None or (keys is None and sticky_without_key(partitioner)):
            # Every record goes to one partition, or (sticky) one partition per batch.
            start = 0
            for end in [count] if sizes is None else chunk_ends(sizes, self._batch_size):
                if partition is None:
                    target = partitioner(topic, None, state.partition_count, state.available)
                else:
                    target = partition
                size = total if sizes is None else sum(sizes[start:end])
                chunk = range(start, end)
                await self._enqueue_chunk(
                    state, bulk, target, chunk, values, keys, headers, size, timestamp
                )
                if partition is None and end < count:
                    partitioner.on_new_batch(topic, target)
                start = end
            return
        # Records may go anywhere: group them by partition, in order.
        if sizes is None:
            sizes = record_sizes(values, None, None, count)
        groups: dict[int, list[int]] = {}
        count_p, available = state.partition_count, state.available
        if keys is None:
            targets = [partitioner(topic, None, count_p, available) for _ in range(count)]
        else:
            targets = [
                partitioner(topic, key if key is None or type(key) is bytes else bytes(key),
                            count_p, available)
                for key in keys
            ]  # fmt: skip
        for index, target in enumerate(targets):
            group = groups.get(target)
            if group is None:
                group = groups[target] = []
            group.append(index)
        for target, positions in groups.items():
            group_sizes = [sizes[i] for i in positions]
            start = 0
            for end in chunk_ends(group_sizes, self._batch_size):
                await self._enqueue_chunk(
                    state, bulk, target, positions[start:end], values, keys, headers,
                    sum(group_sizes[start:end]), timestamp,
                )  # fmt: skip
                start = end

    async def _enqueue_chunk(
        self,
        state: TopicState,
        bulk: BulkSend,
        partition: int,
        positions: range | list[int],
        values: Sequence[Value],
        keys: Sequence[Value] | None,
        headers: Sequence[HeaderList | None] | None,
        records_size: int,
        timestamp: int,
    ) -> None:
        size = BATCH_HEADER_SIZE + records_size
        if isinstance(positions, range):
            whole = positions.start == 0 and positions.stop == len(values)
            chunk_values = values if whole else values[positions.start : positions.stop]
            chunk_keys = keys if keys is None or whole else keys[positions.start : positions.stop]
            chunk_headers = (
                headers if headers is None or whole else headers[positions.start : positions.stop]
            )
        else:
            chunk_values = [values[i] for i in positions]
            chunk_keys = None if keys is None else [keys[i] for i in positions]
            chunk_headers = None if headers is None else [headers[i] for i in positions]
        memory = self._memory
        if memory.waiters or memory.used + size > memory.limit:
            await memory.reserve(size, self._max_block)
        else:
            memory.used += size
        if self._is_closed():
            memory.release(size)
            raise ProducerClosedError("the producer was closed while send_batch waited")
        self._accumulator.add_bulk_batch(
            state.queues[partition], bulk, chunk_values, chunk_keys, chunk_headers,
            positions, timestamp, size,
        )  # fmt: skip


def sticky_without_key(partitioner: Partitioner) -> bool:
    """True if the partitioner sends every keyless record to the same partition until told of
    a new batch (KIP-480 sticky, or a fixed hash of no key): then ``send_batch`` asks it once per
    batch instead of once per record."""
    if isinstance(partitioner, DefaultPartitioner | StickyPartitioner):
        return True
    if isinstance(partitioner, Murmur2Partitioner | ConsistentPartitioner):
        return True
    if isinstance(partitioner, Murmur2RandomPartitioner | ConsistentRandomPartitioner):
        # Sticky unless built with sticky=False, which leaves no sticky state behind.
        return getattr(partitioner, "_sticky", None) is not None
    return False
