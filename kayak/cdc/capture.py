"""The capture loop: read changes from a source, publish them, then let the source forget them.

The order of the three steps is the durability argument: a source trims its log (or advances
its replication slot) only after the broker acknowledged every event of the changes read, so
a crash at any point loses nothing; at worst the next run publishes some events again, and the
target's position guard makes those repeats harmless.

With a transactional publisher each batch is one Kafka transaction: begun before publishing,
committed before the source may forget it, aborted on a failure (the source was not
acknowledged, so a restarted capture reads the batch again). Sources hand out whole source
transactions, so a read_committed reader never sees part of one; a capture killed mid-batch
leaves its transaction open until the restarted capture's ``init_transactions()`` (same
``transactional.id``: :func:`capture_transactional_id`) fences it and aborts it.

Reading overlaps publishing: the next batch is read from the source while the broker
acknowledges the batch before it (one batch in flight at most). That batch is finished (the
broker's acknowledgements awaited, its transaction committed, the source acknowledged up to
its last change, never further) before the batch just read is published, so the order of the
three steps holds batch by batch. A capture stopped with a batch in flight (other than by
:meth:`CaptureLoop.run`'s stop, which finishes it) left it unacknowledged: it is read again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from kayak.cdc.change import Change, Op
from kayak.cdc.errors import SchemaChangeError
from kayak.cdc.publisher import ChangePublisher, SentEvents
from kayak.cdc.source import ChangeSource

__all__ = ["CaptureLoop", "CaptureStats", "capture_transactional_id"]

log = logging.getLogger(__name__)


def capture_transactional_id(prefix: str, db: str, slot: str | None = None) -> str:
    """The ``transactional.id`` of a capture: the same for every run of one capture (topic
    prefix, database, PostgreSQL slot), so a restarted capture fences the one it replaces,
    and different for two captures that could run at once."""
    return f"kayak-capture.{prefix}.{db}.{slot or 'default'}"


@dataclass
class CaptureStats:
    """Running totals of a capture loop."""

    changes: int = 0
    events: int = 0
    batches: int = 0
    started: float = field(default_factory=time.monotonic)
    # The last batch: its changes, how long publishing and acknowledging it took, and how far its
    # oldest change was behind the source when the broker acknowledged it (source commit →
    # acknowledgement; None for a batch of snapshot rows only, which have no commit time).
    last_batch_changes: int = 0
    last_batch_s: float = 0.0
    last_batch_behind_ms: float | None = None
    # Changes per table (``schema.table``), for the pipeline's metrics.
    by_table: dict[str, int] = field(default_factory=dict)


@dataclass
class _InFlight:
    """A batch handed to the producer and not acknowledged by the broker yet: what finishing
    it needs, not its changes (the next batch is read meanwhile; holding both would double
    the capture's memory)."""

    last: Change  # acknowledged to the source once the broker has the batch
    count: int
    by_table: dict[str, int]
    oldest_ms: int | None  # the oldest source commit among its changes (None: snapshot only)
    sent: SentEvents
    started: float


class CaptureLoop:
    """Drives one :class:`~kayak.cdc.source.ChangeSource` into a :class:`ChangePublisher`.

    Reading overlaps publishing: while the broker acknowledges one batch, the next is read
    from the source; the first batch is then finished (acknowledged, committed, and only
    then acknowledged to the source) before the next is published. At most one batch is in
    flight, and everything read while it was is acknowledged to the source only with its own
    batch."""

    def __init__(
        self, source: ChangeSource, publisher: ChangePublisher, *, max_batch: int = 5000,
        poll_timeout_s: float = 0.2,
    ) -> None:  # fmt: skip
        self.source = source
        self.publisher = publisher
        self.max_batch = max_batch
        self.poll_timeout_s = poll_timeout_s
        self.stats = CaptureStats()
        self._in_flight: _InFlight | None = None

    def run_once(self) -> int:
        """Read the next batch (at once while one is in flight, else waiting up to the poll
        timeout), finish the batch in flight, and start publishing the batch read. Returns
        the number of changes read, or else finished: 0 only when nothing was in flight and
        nothing came (idle)."""
        in_flight = self._in_flight
        try:
            changes = self.source.read(self.max_batch, 0.0 if in_flight else self.poll_timeout_s)
        except Exception:
            # What was read before the failure (a change the source refuses, say) is still
            # published whole, as when reading did not overlap publishing.
            self.finish()
            raise
        if in_flight is not None:
            self._in_flight = None
            self._finish(in_flight)
        if changes:
            self._in_flight = self._start(changes)
            return len(changes)
        return 0 if in_flight is None else in_flight.count

    def finish(self) -> None:
        """Finish the batch in flight, if any: wait for the broker, commit, acknowledge."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            self._finish(in_flight)

    def _start(self, changes: list[Change]) -> _InFlight:
        started = time.monotonic()
        publisher = self.publisher
        publisher.begin()
        try:
            sent = publisher.send(changes)
        except SchemaChangeError as e:
            # The whole transactions before the refused change are on the broker: commit them
            # and let the source forget them.
            publisher.commit()
            if e.published:
                self.source.acknowledge(changes[e.published - 1])
            raise
        except BaseException:
            publisher.abort()
            raise
        oldest = min((c.ts_ms for c in changes if c.op is not Op.READ), default=None)
        return _InFlight(changes[-1], len(changes), _by_table(changes), oldest, sent, started)

    def _finish(self, in_flight: _InFlight) -> None:
        publisher = self.publisher
        try:
            publisher.wait(in_flight.sent)
        except BaseException:
            publisher.abort()
            raise
        publisher.commit()
        self.source.acknowledge(in_flight.last)
        self._count(in_flight, time.monotonic() - in_flight.started)
        log.debug("captured %d changes (%d events)", in_flight.count, in_flight.sent.events)

    def _count(self, batch: _InFlight, took_s: float) -> None:
        stats = self.stats
        stats.changes += batch.count
        stats.events += batch.sent.events
        stats.batches += 1
        for table, count in batch.by_table.items():
            stats.by_table[table] = stats.by_table.get(table, 0) + count
        stats.last_batch_changes = batch.count
        stats.last_batch_s = took_s
        oldest = batch.oldest_ms
        stats.last_batch_behind_ms = (
            None if oldest is None else max(0.0, time.time() * 1000 - oldest)
        )

    def run(self, stop: threading.Event) -> None:
        """Capture until ``stop`` is set (finishing the batch in flight), then close the
        source."""
        try:
            while not stop.is_set():
                self.run_once()
            self.finish()
        finally:
            self.source.close()

    def drain(self) -> int:
        """Capture until the source has nothing more and nothing is in flight; the number of
        changes captured."""
        before = self.stats.changes
        while self.run_once():
            pass
        return self.stats.changes - before


def _by_table(changes: list[Change]) -> dict[str, int]:
    """Changes per table (``schema.table``). Changes of one table share one TableSchema, so
    runs of it are counted, not each change."""
    counts: dict[str, int] = {}
    table, run = changes[0].table, 0
    for change in changes:
        if change.table is not table:
            counts[table.qualified_name] = counts.get(table.qualified_name, 0) + run
            table, run = change.table, 0
        run += 1
    counts[table.qualified_name] = counts.get(table.qualified_name, 0) + run
    return counts
