"""Sparse indexes beside each segment: offset → file position, and timestamp → offset.

Both use Kafka's on-disk entry layouts (offset index: relative offset int32 + position int32;
time index: timestamp int64 + relative offset int32), appended as the segment grows and held
in memory as arrays for bisection. They are hints: recovery rebuilds them from the segment
whenever they disagree with it, so they are never fsynced on the produce path.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    """Relative offset → byte position of the batch holding it, every few KiB of log."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets = array("q")
        self._positions = array("q")
        self._file = open(path, "ab")  # noqa: SIM115 - lives as long as the segment

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self, log_size: int) -> bool:
        """Read entries from disk; False if the file is inconsistent and must be rebuilt."""
        data = self.path.read_bytes()
        if len(data) % _OFFSET_ENTRY.size or (log_size and not data):
            return False
        last_offset, last_position = -1, -1
        for rel, position in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_offset or position <= last_position or position >= log_size:
                return False
            self._offsets.append(self.base_offset + rel)
            self._positions.append(position)
            last_offset, last_position = rel, position
        return True

    def append(self, offset: int, position: int) -> None:
        """Record that the batch at ``position`` holds ``offset`` (its base offset)."""
        self._offsets.append(offset)
        self._positions.append(position)
        self._file.write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._positions[i - 1] if i else 0

    def boundary_at_or_before(self, position: int) -> int:
        """The largest indexed batch start ≤ ``position`` (0 if none): a known batch boundary."""
        i = bisect.bisect_right(self._positions, position)
        return self._positions[i - 1] if i else 0

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        del self._offsets[:]
        del self._positions[:]
        self._file.truncate(0)

    def truncate_after(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the log was cut there)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        self._file.truncate(keep * _OFFSET_ENTRY.size)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TimeIndex:
    """Timestamp → first offset at or after which timestamps reach it, every few KiB of log."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._offsets = array("q")
        self._file = open(path, "ab")  # noqa: SIM115 - lives as long as the segment

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def max_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def load(self, log_size: int) -> bool:
        """Read entries from disk; False if the file is inconsistent and must be rebuilt."""
        data = self.path.read_bytes()
        if len(data) % _TIME_ENTRY.size or (log_size and not data):
            return False
        for timestamp, rel in _TIME_ENTRY.iter_unpack(data):
            if self._timestamps and timestamp <= self._timestamps[-1]:
                return False
            self._timestamps.append(timestamp)
            self._offsets.append(self.base_offset + rel)
        return True

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is newer than any indexed so far."""
        if timestamp > self.max_timestamp:
            self._timestamps.append(timestamp)
            self._offsets.append(offset)
            self._file.write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """An offset from which a scan finds the first record with timestamp ≥ ``timestamp``."""
        i = bisect.bisect_left(self._timestamps, timestamp)
        return self._offsets[i - 1] if i else self.base_offset

    def reset(self) -> None:
        del self._timestamps[:]
        del self._offsets[:]
        self._file.truncate(0)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
