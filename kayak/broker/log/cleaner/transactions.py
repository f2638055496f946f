"""What a cleaning must know of transactions, learned from the log itself.

A pre-pass over the batch headers (and the one record of each control batch) from the log
start to the high watermark finds, per producer id, each transaction's first offset and how
it ended (its COMMIT or ABORT marker), the last batch each producer wrote, and the first
offset of any transaction still open (nothing at or past it may be cleaned: its outcome is
not known; the broker's last stable offset says the same).

:class:`TxnTracker` then follows a pass over the batches in offset order as Kafka's
``CleanedTransactionMetadata`` does: data batches of an aborted transaction are discarded
(and never enter the offset map); a marker may go once its transaction has no data left in
the log (an ABORT whose batches this pass did not meet, a COMMIT whose transaction this pass
kept no batch of), and only after its delete horizon.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kayak.broker.log.cleaner.batches import ReadBatch, decode
from kayak.protocol.records.record import ControlRecordType
from kayak.protocol.records.scanner import BatchHeader

_CONTROL_KEY = struct.Struct(">hh")  # version, type


class AbortedRange(NamedTuple):
    """An aborted transaction: its producer, first offset and ABORT marker's offset."""

    producer_id: int
    first_offset: int
    marker_offset: int


class LastBatch(NamedTuple):
    """A producer's last batch in the log."""

    last_offset: int
    is_control: bool


@dataclass(slots=True)
class TxnFacts:
    """What the pre-pass learned (see the module doc)."""

    aborted: list[AbortedRange] = field(default_factory=list)  # by first offset
    last_batches: dict[int, LastBatch] = field(default_factory=dict)
    first_open_offset: int | None = None  # the oldest transaction without a marker yet


def control_type(batch: ReadBatch) -> ControlRecordType | None:
    """The marker type of a control batch; None for an empty one (already cleaned)."""
    if batch.header.record_count == 0:
        return None
    records = decode(batch)
    key = records[0].key if records else None
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    kind = _CONTROL_KEY.unpack_from(key)[1]
    return ControlRecordType(kind) if kind in (0, 1) else None


def scan_transactions(batches: Iterable[ReadBatch]) -> TxnFacts:
    """The pre-pass over every batch in offset order."""
    facts = TxnFacts()
    open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
    for batch in batches:
        header = batch.header
        if header.producer_id < 0:
            continue
        facts.last_batches[header.producer_id] = LastBatch(header.last_offset, header.is_control)
        if header.is_control:
            kind = control_type(batch)
            first = open_txns.pop(header.producer_id, None)
            if kind is ControlRecordType.ABORT and first is not None:
                facts.aborted.append(AbortedRange(header.producer_id, first, header.base_offset))
        elif header.is_transactional and header.record_count:
            open_txns.setdefault(header.producer_id, header.base_offset)
    facts.aborted.sort(key=lambda a: a.first_offset)
    if open_txns:
        facts.first_open_offset = min(open_txns.values())
    return facts


@dataclass(slots=True)
class _Ongoing:
    aborted: AbortedRange
    observed: bool = False  # a batch of it was met (and discarded) in this pass


class TxnTracker:
    """One pass's view of which batches belong to aborted transactions (see module doc)."""

    def __init__(self, facts: TxnFacts) -> None:
        self._pending = list(facts.aborted)
        self._last_batches = facts.last_batches
        self._next = 0
        self._aborted: dict[int, _Ongoing] = {}
        self._committed: set[int] = set()  # producers whose open transaction kept data

    def _reach(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= offset:
            txn = self._pending[self._next]
            self._aborted[txn.producer_id] = _Ongoing(txn)
            self._next += 1

    def data_batch_aborted(self, header: BatchHeader) -> bool:
        """Whether a data batch belongs to an aborted transaction (and is to be discarded)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None and header.base_offset <= ongoing.aborted.marker_offset:
            ongoing.observed = True
            return True
        self._committed.add(header.producer_id)
        return False

    def is_last_batch(self, header: BatchHeader) -> bool:
        """Whether this is its producer's last batch in the log: kept (if only as an empty
        batch) so that a restart rebuilds the producer's sequence and epoch from it."""
        last = self._last_batches.get(header.producer_id)
        return last is not None and last.last_offset == header.last_offset

    def marker_removable(self, batch: ReadBatch) -> bool:
        """Whether a control batch's transaction has no data left, so the marker may go
        (once past its delete horizon)."""
        header = batch.header
        self._reach(header.last_offset)
        kind = control_type(batch)
        if kind is None:
            return True
        if kind is ControlRecordType.ABORT:
            ongoing = self._aborted.pop(header.producer_id, None)
            self._committed.discard(header.producer_id)
            return ongoing is None or not ongoing.observed
        if header.producer_id in self._committed:
            self._committed.discard(header.producer_id)
            return False
        return True
