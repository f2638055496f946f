"""Which per-record producer code runs: the C extension ``_per_record``, or the Python
reference code.

``kayak.client.producer._per_record`` is an optional C extension built by ``pip install`` (the
build skips it when no compiler is present). When it imports, ``produce``'s common case
(:mod:`.append`) and a stored batch's ``RecordMetadata`` and delivery reports (:mod:`.batch`)
run in C; the Python code stays as the reference and takes every case the C code declines. Set
``KAYAK_PURE_PYTHON=1`` before importing kayak to force the Python code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kayak.client.producer._per_record import BatchCounters, MemoryCounters, PlainAppender
    from kayak.client.producer.record_metadata import RecordMetadata

__all__ = ["NATIVE_PRODUCE", "PerRecordCode", "per_record"]


class PerRecordCode(Protocol):
    """What ``_per_record`` provides (the module itself satisfies this protocol)."""

    PlainAppender: type[PlainAppender]
    MemoryCounters: type[MemoryCounters]
    BatchCounters: type[BatchCounters]

    def configure(
        self, topic_state: type, partition_queue: type, producer_batch: type, memory: type, /
    ) -> None:
        """Tell the C code the classes whose slots it reads."""

    def record_metadata(
        self,
        metadata_type: type[RecordMetadata],
        count: int,
        topic: str,
        partition: int,
        base_offset: int,
        positions: list[int] | None,
        timestamps: list[int] | None,
        timestamp: int,
        /,
    ) -> list[RecordMetadata]:
        """``ProducerBatch._metadata``'s records, as a list."""

    def deliver(
        self,
        set_result: Callable[[Any, RecordMetadata], object] | None,
        reports: list[Any],
        on_error: Callable[[Exception], object],
        metadata_type: type[RecordMetadata],
        count: int,
        topic: str,
        partition: int,
        base_offset: int,
        positions: list[int] | None,
        timestamps: list[int] | None,
        timestamp: int,
        /,
    ) -> None:
        """``ProducerBatch.succeed``'s reports: each record's metadata made and reported in
        turn (a future's result set, or a callback called)."""


def _load() -> PerRecordCode | None:
    if os.environ.get("KAYAK_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from kayak.client.producer import _per_record
    except ImportError:  # not built (no compiler at install time): the Python code runs
        return None
    return _per_record


per_record = _load()
"""The C extension module, or None when the Python code runs."""

NATIVE_PRODUCE = per_record is not None
"""Whether the producer's per-record work runs in C."""
