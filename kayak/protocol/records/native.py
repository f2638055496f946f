"""Which record codec runs: the C accelerator, or the pure-Python reference code.

``kayak.protocol.records._codec`` is an optional C extension built by ``pip install`` (the
build skips it when no compiler is present). When it imports, the hot loops of
:mod:`.batch` (decoding a batch's records or values) and :mod:`.builder` (encoding the
records section of ``build_record_batch``) run in C; the Python loops stay as the reference
and as the fallback for whatever the C code declines (it never raises for bad data: it
returns None and Python decodes, so errors are always Python's own). Set
``KAYAK_PURE_PYTHON=1`` before importing kayak to force the Python code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kayak.protocol.records.record import Record

if TYPE_CHECKING:
    from kayak.protocol.records.scanner import BatchHeader

__all__ = ["NATIVE", "RecordCodec", "codec"]

_Item = bytes | bytearray | memoryview | None


class RecordCodec(Protocol):
    """What ``_codec`` provides (the module itself satisfies this protocol)."""

    def configure(self, record_type: type[Record], /) -> None:
        """Tell the decoder the Record class whose slots it fills."""

    def decode_records(
        self,
        data: bytes | bytearray | memoryview,
        start: int,
        stop: int,
        count: int,
        base_offset: int,
        base_timestamp: int,
        record_type: type[Record],
        append_time: int | None,
        untracked: bool,
        /,
    ) -> list[Record] | None:
        """``records_section.py_decode_records``, or None: decode in Python."""

    def now_ms(self) -> int:
        """``time.time_ns() // 1_000_000``, cheaper."""

    def unfilled_bytearray(self, size: int, /) -> bytearray:
        """``bytearray(size)`` without zeroing it: for a buffer filled whole before it is read."""

    def murmur2(self, data: bytes | bytearray | memoryview, /) -> int:
        """Kafka's murmur2 of ``data``, signed as Java's ``Utils.murmur2``: what
        ``kayak.client.partitioner._py_murmur2`` returns."""

    def track(self, record: Record, /) -> None:
        """Let the garbage collector follow an untracked record again."""

    def decode_values(
        self, data: bytes | bytearray | memoryview, start: int, stop: int, count: int, /
    ) -> list[bytes | None] | None:
        """``records_section.py_decode_values``, or None: decode in Python."""

    def encode_records(
        self,
        values: list[_Item],
        keys: list[_Item] | None,
        encoded_headers: list[bytes] | None,
        timestamp_deltas: list[int] | None,
        /,
    ) -> bytes | None:
        """A v2 records section, or None: encode in Python."""

    def encode_batch(
        self,
        values: list[_Item],
        keys: list[_Item] | None,
        encoded_headers: list[bytes] | None,
        timestamps: list[int] | None,
        base_offset: int,
        partition_leader_epoch: int,
        attributes: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        crc32c: Callable[[memoryview], int],
        /,
    ) -> bytes | None:
        """A whole uncompressed v2 batch, or None: encode in Python."""

    def validate_records(
        self, data: bytes | bytearray | memoryview, start: int, stop: int, count: int, /
    ) -> tuple[int, int, bool] | None:
        """Walk a produced records section without building records: (earliest timestamp
        delta, latest timestamp delta, any null key), or None: decode in Python for the
        precise error."""

    def check_produced_batches(
        self,
        data: bytes | bytearray | memoryview,
        base_offset: int,
        leader_epoch: int,
        max_batch_size: int,
        compacted: bool,
        log_append_time: bool,
        header_type: type[BatchHeader],
        crc32c: Callable[[memoryview], int],
        /,
    ) -> list[BatchHeader] | None:
        """A producer's batches' headers as they will be stored (``base_offset`` on, the
        leader epoch set), when every batch is valid and uncompressed; None otherwise: check
        in Python (``kayak.broker.log.produced``) for the precise error."""


def _load() -> RecordCodec | None:
    if os.environ.get("KAYAK_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from kayak.protocol.records import _codec
    except ImportError:  # not built (no compiler at install time): the Python code runs
        return None
    _codec.configure(Record)
    return _codec


codec = _load()
"""The C extension module, or None when the pure-Python code runs."""

NATIVE = codec is not None
"""Whether the C record codec is in use."""
