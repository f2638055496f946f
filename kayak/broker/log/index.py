"""Sparse indexes beside each segment: offset → file position, and timestamp → offset.

Both are Kafka's, entry for entry, so Kafka's ``kafka-dump-log`` reads and verifies them:
offset index entries are (relative offset int32, position int32), the offset being the *last*
offset of the batch at that position; time index entries are (timestamp int64, relative
offset int32): a batch's largest timestamp, whenever it is the largest so far, with that
batch's last offset. Unlike Kafka's, the first batch of a segment is always indexed, and the
files are never preallocated (they hold exactly their entries). They live in memory as arrays for
bisection while a segment is written, and reach the disk only whole: when the segment is
sealed (rolled) and at a clean shutdown, written to a temporary file, fsynced and renamed.
So an index file on disk is either complete for its segment or absent; the active segment's
index after a crash is rebuilt by recovery, which scans that segment anyway.

An index is still only a hint: a loaded file is checked against the log, and every entry a
read uses is checked against the batch header it points at (see ``Segment``).
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class IndexFileError(Exception):
    """An index file disagrees with its segment; the segment's index is rebuilt."""


class OffsetIndex:
    """Offset → byte position of the batch ending at it, every few KiB of log."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets = array("q")
        self._positions = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self, log_size: int) -> None:
        """Read the saved entries; :class:`IndexFileError` if missing or inconsistent."""
        data = _read(self.path)
        if len(data) % OFFSET_ENTRY.size or (log_size and not data):
            raise IndexFileError(f"{self.path}: {len(data)} bytes is not a whole index")
        offsets, positions = array("q"), array("q")
        last_offset, last_position = -1, -1
        for rel, position in OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_offset or position <= last_position or position >= log_size:
                raise IndexFileError(f"{self.path}: entry ({rel}, {position}) is out of order")
            offsets.append(self.base_offset + rel)
            positions.append(position)
            last_offset, last_position = rel, position
        if positions and positions[0] != 0:
            raise IndexFileError(f"{self.path}: the first entry is not the segment's start")
        self._offsets, self._positions = offsets, positions

    def save(self) -> None:
        """Write every entry to disk durably (temp file, fsync, rename)."""
        entries = bytearray(OFFSET_ENTRY.size * len(self._offsets))
        for i, (offset, position) in enumerate(zip(self._offsets, self._positions, strict=True)):
            OFFSET_ENTRY.pack_into(entries, i * OFFSET_ENTRY.size, offset - self.base_offset,
                                   position)  # fmt: skip
        _write_durably(self.path, entries)

    def append(self, offset: int, position: int) -> None:
        """Record that the batch at ``position`` ends at ``offset`` (its last offset)."""
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """(last offset, position) of the last indexed batch ending at or before ``offset``,
        from which a scan finds it; None if ``offset`` is in the first indexed batch or before
        (scan from the segment's start)."""
        i = bisect.bisect_right(self._offsets, offset)
        return (self._offsets[i - 1], self._positions[i - 1]) if i else None

    def entry_at_or_before(self, position: int) -> tuple[int, int] | None:
        """(last offset, position) of the last indexed batch starting at or before
        ``position``; None if there is none."""
        i = bisect.bisect_right(self._positions, position)
        return (self._offsets[i - 1], self._positions[i - 1]) if i else None

    def last(self) -> tuple[int, int]:
        """The last entry, or the segment's start when there is none."""
        return (self._offsets[-1], self._positions[-1]) if self._offsets else (self.base_offset, 0)

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        del self._offsets[:]
        del self._positions[:]

    def truncate_after(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the log was cut there)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]


class TimeIndex:
    """Timestamp → the last offset of the batch that first reached it (each new largest)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def max_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def load(self, next_offset: int) -> None:
        """Read the saved entries; :class:`IndexFileError` if missing or inconsistent."""
        data = _read(self.path)
        if len(data) % TIME_ENTRY.size:
            raise IndexFileError(f"{self.path}: {len(data)} bytes is not a whole time index")
        timestamps, offsets = array("q"), array("q")
        for timestamp, rel in TIME_ENTRY.iter_unpack(data):
            offset = self.base_offset + rel
            in_order = not timestamps or (timestamp > timestamps[-1] and offset >= offsets[-1])
            if not in_order or not self.base_offset <= offset < max(next_offset, 1):
                raise IndexFileError(f"{self.path}: entry ({timestamp}, {rel}) is out of order")
            timestamps.append(timestamp)
            offsets.append(offset)
        self._timestamps, self._offsets = timestamps, offsets

    def save(self) -> None:
        entries = bytearray(TIME_ENTRY.size * len(self._timestamps))
        for i, (stamp, offset) in enumerate(zip(self._timestamps, self._offsets, strict=True)):
            TIME_ENTRY.pack_into(entries, i * TIME_ENTRY.size, stamp, offset - self.base_offset)
        _write_durably(self.path, entries)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is newer than any indexed so far."""
        if timestamp > self.max_timestamp:
            self._timestamps.append(timestamp)
            self._offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which a scan finds the first record with timestamp ≥ ``timestamp``."""
        i = bisect.bisect_left(self._timestamps, timestamp)
        return self._offsets[i - 1] if i else self.base_offset

    def reset(self) -> None:
        del self._timestamps[:]
        del self._offsets[:]

    def truncate_after(self, offset: int) -> None:
        """Drop entries for offsets at or beyond ``offset`` (the log was cut there)."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise IndexFileError(f"{path} is missing") from None
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size)
        while len(data) < size and (more := os.read(fd, size - len(data))):
            data += more
        return data
    finally:
        os.close(fd)


def _write_durably(path: Path, data: bytes | bytearray) -> None:
    # Temp name, fsync, rename: a crash leaves the old file or the new one, never half.
    # The caller fsyncs the directory once for all the files it renamed.
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view, written = memoryview(data), 0
        while written < len(view):
            written += os.write(fd, view[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
