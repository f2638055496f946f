"""Replaying a segment into producer state, and its aborted-transactions index with it.

A start replays the batches that the producer-state snapshot does not cover. The markers
among them close transactions; the aborted ones are the segment's index entries from that
point on, so the index is rewritten from the log rather than trusted (its appends are not
synced before a crash, and a torn tail cut from the log must take its entries along).
"""

from __future__ import annotations

import os

from kayak.broker.log.aborted_index import AbortedTxn
from kayak.broker.log.producer_state import CompletedTxn, ProducerStateTable
from kayak.broker.log.segment import Segment
from kayak.protocol.records import RecordBatch, parse_batches
from kayak.protocol.records.record import ControlRecordType
from kayak.protocol.records.scanner import BatchHeader


def rebuild_aborted_index(segment: Segment, table: ProducerStateTable) -> None:
    """Replay ``segment`` into ``table`` from ``table.next_offset``, rewriting the segment's
    aborted-transactions index for the replayed part."""
    replayed_from = table.next_offset
    entries = [e for e in segment.aborted.entries if e.last_offset < replayed_from]
    before = len(entries)

    def completed(header: BatchHeader, txn: CompletedTxn) -> None:
        if _marker_type(segment, header) is ControlRecordType.ABORT:
            stable = table.first_unstable_offset()
            entries.append(AbortedTxn(*txn, header.base_offset if stable is None else stable))

    table.rebuild(segment.headers(), completed)
    if len(entries) != before or len(segment.aborted.entries) != before:
        segment.aborted.replace(entries)


def _marker_type(segment: Segment, header: BatchHeader) -> ControlRecordType | None:
    raw = os.pread(segment.fd, header.size, header.position)
    batch = parse_batches(raw)[0]
    return batch.control_type if isinstance(batch, RecordBatch) else None
