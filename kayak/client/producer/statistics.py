"""The producer's part of ``Producer.statistics()``: queued records and, per partition,
records and bytes the brokers acknowledged (see :mod:`kayak.client.statistics`)."""

from __future__ import annotations

from typing import Any

from kayak.client.producer.accumulator import RecordAccumulator
from kayak.client.statistics import (
    ClientStatistics,
    nest_partitions,
    partition_entry,
    sum_partitions,
)

__all__ = ["producer_statistics"]


def producer_statistics(
    stats: ClientStatistics, accumulator: RecordAccumulator | None
) -> dict[str, Any]:
    """The statistics dict of a producer whose accumulator is ``accumulator`` (None before
    ``start``)."""
    if accumulator is None:
        return stats.snapshot()
    queued: dict[tuple[str, int], tuple[int, int]] = {}
    for batch in accumulator.incomplete:
        key = (batch.topic, batch.partition)
        count, size = queued.get(key, (0, 0))
        queued[key] = (count + batch.record_count, size + batch.size)
    entries = []
    for (topic, partition), queue in accumulator.queues.items():
        count, size = queued.get((topic, partition), (0, 0))
        entry = partition_entry(
            txmsgs=queue.acked_records,
            txbytes=queue.acked_bytes,
            hi_offset=queue.end_offset,
            msgq_cnt=count,
            msgq_bytes=size,
        )
        entries.append((topic, partition, entry))
    topics = nest_partitions(entries)
    return stats.snapshot(
        topics,
        msg_cnt=sum(count for count, _ in queued.values()),
        msg_size=sum(size for _, size in queued.values()),
        txmsgs=sum_partitions(topics, "txmsgs"),
        txmsg_bytes=sum_partitions(topics, "txbytes"),
    )
