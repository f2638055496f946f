"""Reading Kafka partitions into Spark: the batch reader, the stream reader, and the executor
side both share.

Planning happens on the driver (:class:`~kayak.spark.offsets.OffsetResolver`): one
:class:`KafkaInputPartition` per offset range of one Kafka partition (big ranges split with
``minPartitions``/``maxRecordsPerPartition``). An executor reads its range with kayak's
blocking consumer: ``assign`` the one partition, ``seek`` to the range's start, poll until
the range's end, and hand Spark one Arrow record batch per poll.

A Python worker that Spark reuses (``spark.python.worker.reuse``, the default) keeps its
consumers between tasks (:class:`_ConsumerCache`): connecting and loading metadata costs more
than reading a small range.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kayak.client.consumer import Consumer as AsyncConsumer
from kayak.client.sync import Consumer, shared_loop
from kayak.client.types import TopicPartition
from kayak.errors import KayakError, OffsetOutOfRangeError
from kayak.spark.arrow import kafka_arrow_schema, records_to_batch
from kayak.spark.offsets import (
    OffsetRange,
    OffsetResolver,
    from_json,
    limit_offsets,
    report_data_loss,
    split_ranges,
    to_json,
)
from kayak.spark.options import KayakSparkError, ReadOptions

__all__ = ["KafkaInputPartition", "KayakBatchReader", "KayakStreamReader", "read_range"]

log = logging.getLogger(__name__)

_offset_of = attrgetter("offset")
# Records per poll, so per Arrow batch: big enough to amortise the per-batch costs, small
# enough (~10 MiB of 1 KiB values) to keep a task's memory flat.
_ROWS_PER_BATCH = 10_000
_POLL_MS = 1_000


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task's work: offsets ``[from_offset, until_offset)`` of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


class _ConsumerCache:
    """A few blocking consumers per Python worker, by configuration, reused across tasks."""

    def __init__(self, size: int = 2) -> None:
        self._size = size
        self._consumers: OrderedDict[tuple[tuple[str, str], ...], Consumer] = OrderedDict()

    def get(self, config: dict[str, object]) -> Consumer:
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        consumer = self._consumers.pop(key, None)
        if consumer is None or consumer.closed:
            consumer = Consumer(config)
        self._consumers[key] = consumer
        while len(self._consumers) > self._size:
            _, oldest = self._consumers.popitem(last=False)
            _close_quietly(oldest)
        return consumer

    def discard(self, consumer: Consumer) -> None:
        for key, cached in list(self._consumers.items()):
            if cached is consumer:
                del self._consumers[key]
        _close_quietly(consumer)


def _close_quietly(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception as exc:  # closing a consumer of a broker that went away
        log.debug("closing a cached consumer failed: %s", exc)


_consumers = _ConsumerCache()


def read_range(
    options: ReadOptions, work: KafkaInputPartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Read ``work``'s offsets with kayak's consumer, as Arrow record batches (executor side).

    Offsets deleted since planning (retention, DeleteRecords) fail the task or, with
    failOnDataLoss=false, are skipped. Offsets with no record (compaction, transaction
    markers) are simply not there. If the range's end is not reached within
    ``kafkaConsumer.pollTimeoutMs`` of no progress, the task fails.
    """
    tp = TopicPartition(work.topic, work.partition)
    until = work.until_offset
    try:
        consumer = _consumers.get(options.consumer_config())
    except KayakError as exc:
        raise KayakSparkError(
            f"cannot reach Kafka at kafka.bootstrap.servers={options.bootstrap_servers!r}: {exc}"
        ) from exc
    healthy = False
    try:
        # One step on the loop: between a separate assign() and seek() the consumer would
        # try to find a starting position by itself (and fail: auto.offset.reset=none).
        shared_loop().call(_assign_at, consumer.async_client, tp, work.from_offset)
        position = work.from_offset
        patience = options.poll_timeout_ms / 1000
        deadline = time.monotonic() + patience
        while position < until:
            try:
                polled = consumer.getmany(tp, max_records=_ROWS_PER_BATCH, timeout_ms=_POLL_MS)
            except OffsetOutOfRangeError:
                position = _after_out_of_range(consumer, options, tp, position, until)
                continue
            records: Sequence[Any] | None = polled.get(tp)
            if not records:
                # Nothing came: offsets without records (compacted away, transaction markers)
                # move the position on without records; else wait, but not forever.
                position = max(position, consumer.position(tp))
                if position >= until:
                    break
                if time.monotonic() > deadline:
                    raise KayakSparkError(
                        f"{tp}: no records after offset {position} for "
                        f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}, though the "
                        f"range to read ends at {until}"
                    )
                continue
            deadline = time.monotonic() + patience
            last = records[-1].offset
            if last >= until:
                records = records[: bisect_left(records, until, key=_offset_of)]
            if records:
                yield records_to_batch(records, work.topic, work.partition, schema)
            position = last + 1
        healthy = True
    except GeneratorExit:
        healthy = True  # Spark stopped early (a limit): the consumer itself is fine
        raise
    finally:
        if healthy:
            # Stop fetching past the range in the background while the consumer waits for
            # the next task.
            consumer.assign([])
        else:
            _consumers.discard(consumer)


def _assign_at(client: AsyncConsumer, tp: TopicPartition, offset: int) -> None:
    client.assign([tp])
    client.seek(tp, offset)


def _after_out_of_range(
    consumer: Consumer, options: ReadOptions, tp: TopicPartition, position: int, until: int
) -> int:
    """Where to go on after the broker said ``position`` is not in the log any more."""
    earliest = consumer.beginning_offsets([tp])[tp]
    if earliest <= position:
        raise KayakSparkError(f"{tp}: offset {position} is out of range (log starts at {earliest})")
    last_missing = min(earliest, until) - 1
    report_data_loss(
        options.fail_on_data_loss,
        f"{tp}: offsets {position} to {last_missing} were deleted (retention or "
        f"DeleteRecords) before they were read; the log now starts at {earliest}",
    )
    if earliest < until:
        consumer.seek(tp, earliest)
    return earliest


def _input_partitions(ranges: list[OffsetRange], options: ReadOptions) -> list[KafkaInputPartition]:
    split = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [KafkaInputPartition(r.topic, r.partition, r.from_offset, r.until_offset) for r in split]


class _ReaderBase:
    """What both readers share: options, the Arrow schema, a lazily made resolver."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.arrow_schema = kafka_arrow_schema(options.include_headers)
        self._resolver: OffsetResolver | None = None

    @property
    def resolver(self) -> OffsetResolver:
        if self._resolver is None:
            self._resolver = OffsetResolver(self.options)
        return self._resolver

    def __getstate__(self) -> dict[str, Any]:
        # The reader travels to executors; the driver's admin connection must not.
        state = dict(self.__dict__)
        state["_resolver"] = None
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition's range (runs in an executor)."""
        if not isinstance(partition, KafkaInputPartition):
            # Spark plans one placeholder partition when there is nothing to read.
            return iter(())
        return read_range(self.options, partition, self.arrow_schema)


class KayakBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("kayak")``: from startingOffsets to endingOffsets, once."""

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve the offsets now (driver) and cut them into tasks."""
        resolver = self.resolver
        try:
            tps = resolver.partitions()
            start = resolver.start_offsets(tps)
            end = resolver.end_offsets(tps)
            ranges = []
            for tp in tps:
                if start[tp] > end[tp]:
                    raise KayakSparkError(
                        f"{tp}: the starting offset {start[tp]} is after the ending offset "
                        f"{end[tp]} (startingOffsets/endingOffsets)"
                    )
                ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
            ranges = resolver.checked_ranges(ranges)
        finally:
            resolver.close()
            self._resolver = None
        log.info("batch read of %s: %d ranges", self.options.describe_subscription(), len(ranges))
        return _input_partitions(ranges, self.options)


class KayakStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kayak")``: micro-batches of offset ranges.

    Offsets (Spark's checkpoint keeps them) are ``{"topic": {"partition": next_offset}}``.
    Each trigger asks for the partitions the subscription covers now and their latest
    offsets; partitions that appeared since the last batch start at their earliest offset.
    ``maxOffsetsPerTrigger`` caps a batch (spread over partitions by backlog).
    """

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self._available_now: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Where a new query starts: startingOffsets or startingTimestamp, resolved."""
        resolver = self.resolver
        return to_json(resolver.start_offsets(resolver.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as a row limit, else everything available."""
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: remember what exists now; never read past it."""
        resolver = self.resolver
        self._available_now = resolver.latest(resolver.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        """Where the next micro-batch ends (``start`` itself when there is nothing new)."""
        resolver = self.resolver
        begin = from_json(start)
        tps = resolver.partitions()
        current = set(tps)
        gone = sorted(tp for tp in begin if tp not in current)
        if gone:
            report_data_loss(
                self.options.fail_on_data_loss,
                "partitions " + ", ".join(map(str, gone)) + " are no longer there (deleted?)",
            )
        new = [tp for tp in tps if tp not in begin]
        if new:
            log.info("new partitions %s: reading them from their earliest offsets", new)
            begin.update(resolver.earliest(new))
        latest = resolver.latest(tps)
        if self._available_now is not None:
            cap = self._available_now
            # A partition that was not there at the snapshot stays where it is.
            latest = {
                tp: min(end, cap[tp]) if tp in cap else begin[tp] for tp, end in latest.items()
            }
        if isinstance(limit, ReadMaxRows):
            latest = limit_offsets(begin, latest, limit.max_rows)
        return to_json(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of one micro-batch: each partition's range between the two offsets."""
        begin = from_json(start)
        finish = from_json(end)
        resolver = self.resolver
        new = [tp for tp in finish if tp not in begin]
        if new:
            begin.update(resolver.earliest(new))
        ranges = [
            OffsetRange(tp.topic, tp.partition, begin[tp], until)
            for tp, until in sorted(finish.items())
        ]
        return _input_partitions(resolver.checked_ranges(ranges), self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """Close the driver's admin connection."""
        if self._resolver is not None:
            self._resolver.close()
            self._resolver = None
