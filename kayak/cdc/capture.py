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
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from kayak.cdc.change import Change, Op
from kayak.cdc.errors import SchemaChangeError
from kayak.cdc.publisher import ChangePublisher
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


class CaptureLoop:
    """Drives one :class:`~kayak.cdc.source.ChangeSource` into a :class:`ChangePublisher`."""

    def __init__(
        self, source: ChangeSource, publisher: ChangePublisher, *, max_batch: int = 5000,
        poll_timeout_s: float = 0.2,
    ) -> None:  # fmt: skip
        self.source = source
        self.publisher = publisher
        self.max_batch = max_batch
        self.poll_timeout_s = poll_timeout_s
        self.stats = CaptureStats()

    def run_once(self) -> int:
        """Read, publish and acknowledge one batch; the number of changes (0 when idle)."""
        changes = self.source.read(self.max_batch, self.poll_timeout_s)
        if not changes:
            return 0
        started = time.monotonic()
        publisher = self.publisher
        publisher.begin()
        try:
            events = publisher.publish(changes)
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
        publisher.commit()
        self.source.acknowledge(changes[-1])
        self._count(changes, events, time.monotonic() - started)
        log.debug("captured %d changes (%d events)", len(changes), events)
        return len(changes)

    def _count(self, changes: list[Change], events: int, took_s: float) -> None:
        stats = self.stats
        stats.changes += len(changes)
        stats.events += events
        stats.batches += 1
        for change in changes:
            table = change.table.qualified_name
            stats.by_table[table] = stats.by_table.get(table, 0) + 1
        stats.last_batch_changes = len(changes)
        stats.last_batch_s = took_s
        committed = [c.ts_ms for c in changes if c.op is not Op.READ]
        stats.last_batch_behind_ms = (
            max(0.0, time.time() * 1000 - min(committed)) if committed else None
        )

    def run(self, stop: threading.Event) -> None:
        """Capture until ``stop`` is set, then close the source."""
        try:
            while not stop.is_set():
                self.run_once()
        finally:
            self.source.close()

    def drain(self) -> int:
        """Capture until the source has nothing more; the number of changes captured."""
        total = 0
        while n := self.run_once():
            total += n
        return total
