"""Finding the longest valid prefix of a segment file after a crash.

The scan reads the file in large chunks and checks every batch: a whole v2 header, a length
that fits the file, its CRC-32C, and a base offset that continues the previous batch. A
batch larger than a chunk, or one that straddles a chunk's end, is read again by itself,
so the answer does not depend on batch sizes or where chunks happen to fall.

Where it stops, it also tells a torn tail (a write the crash interrupted: nothing valid
follows) from damage in the middle (a valid batch continues right after the bad one), so
that recovery cuts only what a crash can leave and reports anything else.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from kayak.errors import CorruptRecordError, KafkaError
from kayak.protocol.records.record import (
    BASE_OFFSET_AND_LENGTH,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
)
from kayak.protocol.records.scanner import BatchHeader, validate_batch

# Recovery reads this much at a time; any batch that does not fit is read by itself.
RECOVERY_CHUNK = 4 * 1024 * 1024


@dataclass(slots=True)
class SegmentScan:
    """What a CRC scan of one segment found."""

    valid_end: int  # bytes of the longest valid prefix
    next_offset: int  # the offset after the last valid batch
    batches: int
    problem: str | None = None  # why the scan stopped before the end of the file
    damage_inside: bool = False  # valid data follows the bad spot: not a torn tail

    @classmethod
    def run(
        cls,
        fd: int,
        size: int,
        expected_offset: int,
        on_batch: Callable[[BatchHeader], None],
        chunk_size: int = RECOVERY_CHUNK,
    ) -> SegmentScan:
        """Scan ``fd`` (``size`` bytes) from the start, calling ``on_batch`` per valid batch."""
        reader = _ChunkReader(fd, size, chunk_size)
        scan = cls(0, expected_offset, 0)
        position = 0
        while position < size:
            try:
                header = reader.batch_at(position, scan.next_offset)
            except KafkaError as exc:
                scan.problem = str(exc)
                scan.damage_inside = reader.valid_batch_follows(position)
                break
            on_batch(header)
            scan.batches += 1
            scan.next_offset = header.next_offset
            position = scan.valid_end = header.end
        return scan


class _ChunkReader:
    """Batches of one file, read through a chunk buffer."""

    def __init__(self, fd: int, size: int, chunk_size: int) -> None:
        self._fd, self._size, self._chunk_size = fd, size, chunk_size
        self._buf = b""
        self._start = 0

    def _window(self, position: int, length: int) -> int:
        """Make ``[position, position + length)`` buffered; returns its index in the buffer."""
        if position < self._start or position + length > self._start + len(self._buf):
            self._buf = os.pread(self._fd, max(length, self._chunk_size), position)
            self._start = position
        return position - self._start

    def batch_at(self, position: int, expected_offset: int) -> BatchHeader:
        """The valid batch at ``position``; raises if there is none (torn or damaged)."""
        remaining = self._size - position
        where = f"position {position}"
        if remaining < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"{remaining} bytes at {where} are not a whole header")
        at = self._window(position, BATCH_HEADER_SIZE)
        _, batch_length = BASE_OFFSET_AND_LENGTH.unpack_from(self._buf, at)
        if self._buf[at + MAGIC_POS] != MAGIC_V2 or batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"no v2 batch header at {where}")
        if LOG_OVERHEAD + batch_length > remaining:
            raise CorruptRecordError(
                f"batch at {where} claims {LOG_OVERHEAD + batch_length} bytes, "
                f"{remaining} remain"
            )
        at = self._window(position, LOG_OVERHEAD + batch_length)
        header = BatchHeader(at, *BATCH_HEADER.unpack_from(self._buf, at))
        validate_batch(header, self._buf, strict=False)
        if header.base_offset != expected_offset:
            raise CorruptRecordError(
                f"batch at {where} has base offset {header.base_offset}, expected "
                f"{expected_offset}: offsets are not continuous"
            )
        if header.last_offset_delta < 0:
            raise CorruptRecordError(f"batch at {where} holds no offsets")
        return header._replace(position=position)

    def valid_batch_follows(self, position: int) -> bool:
        """Whether the bytes at ``position`` claim a size after which a valid batch starts.

        A batch whose CRC failed but whose successor is intact was damaged in place; a crash
        mid-write leaves nothing valid behind the tear.
        """
        if self._size - position < LOG_OVERHEAD:
            return False
        at = self._window(position, LOG_OVERHEAD)
        base_offset, batch_length = BASE_OFFSET_AND_LENGTH.unpack_from(self._buf, at)
        after = position + LOG_OVERHEAD + batch_length
        if batch_length < MIN_BATCH_LENGTH or after >= self._size:
            return False
        try:
            at = self._window(position, BATCH_HEADER_SIZE)
            claimed = BatchHeader(at, *BATCH_HEADER.unpack_from(self._buf, at))
            self.batch_at(after, base_offset + claimed.last_offset_delta + 1)
        except KafkaError:
            return False
        return True
