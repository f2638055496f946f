"""Writing transaction markers into the partitions a transaction touched.

The coordinator (EndTxn, a timed-out or fenced transaction, recovery at start) and the
WriteTxnMarkers API both come here: a COMMIT or ABORT control batch is appended to each
partition and made durable through the log writer like any produce. Whoever keeps state
derived from a topic (the offsets of ``__consumer_offsets`` committed inside a transaction)
listens for the markers of that topic and settles its pending state once one is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from kayak.broker.catalog import TopicCatalog
from kayak.broker.log import LogWriter
from kayak.broker.topic import Partition
from kayak.broker.txn import crash_points
from kayak.errors import KafkaError, UnknownTopicOrPartitionError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class MarkerListener(Protocol):
    """Told (on the event loop) of each durable marker in one topic's partitions."""

    def marker_written(self, partition: int, producer_id: int, commit: bool) -> None: ...


class MarkerWriter:
    """Appends transaction markers to this shard's partitions and waits until durable."""

    def __init__(self, catalog: TopicCatalog, writer: LogWriter) -> None:
        self._catalog = catalog
        self._writer = writer
        self._listeners: dict[str, MarkerListener] = {}

    def listen(self, topic: str, listener: MarkerListener) -> None:
        self._listeners[topic] = listener

    async def write(
        self,
        partitions: Iterable[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
    ) -> dict[TopicPartition, KafkaError]:
        """Write the marker to every partition; what failed, by partition.

        A partition that no longer exists (its topic was deleted) needs no marker and is
        not a failure.
        """
        failed: dict[TopicPartition, KafkaError] = {}
        written: list[tuple[TopicPartition, Partition]] = []
        for topic, index in partitions:
            try:
                partition = self._catalog.partition(topic, index)
                partition.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
            except UnknownTopicOrPartitionError:
                continue
            except KafkaError as exc:
                log.warning(
                    "marker for producer %d in %s-%d not written: %s",
                    producer_id,
                    topic,
                    index,
                    exc,
                )
                failed[(topic, index)] = exc
                continue
            written.append(((topic, index), partition))
        crash_points.crash_point(crash_points.MARKERS_APPENDED)
        synced = await asyncio.gather(
            *(self._writer.durable(p.log) for _, p in written), return_exceptions=True
        )
        for (tp, _), outcome in zip(written, synced, strict=True):
            if isinstance(outcome, KafkaError):
                failed[tp] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                listener = self._listeners.get(tp[0])
                if listener is not None:
                    listener.marker_written(tp[1], producer_id, commit)
        crash_points.crash_point(crash_points.MARKERS_DURABLE)
        return failed
