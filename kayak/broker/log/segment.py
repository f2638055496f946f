"""One segment: a ``.log`` file of record batches with its ``.index`` and ``.timeindex``.

Batches are stored exactly as produced (with broker-assigned base offsets), so a fetch can
send file bytes straight to a socket. Reads use ``pread``/``sendfile`` at explicit positions
and never move a shared file offset.

The descriptor belongs to a :class:`SegmentFile` that every :class:`FileSlice` handed to a
fetch holds on to: deleting a segment unlinks its files at once, but the descriptor closes
only when the last fetch that took a slice of it is done. A descriptor number is therefore
never reused by another file while a response still means to send from it.

Every segment but the last is *sealed*: its data fsynced and its indexes saved whole. Only
the last segment can have a torn tail after a crash, so only it is rescanned.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log.files import remove_quietly
from kayak.broker.log.index import IndexFileError, OffsetIndex, TimeIndex
from kayak.broker.log.recovery import SegmentScan
from kayak.errors import CorruptRecordError
from kayak.protocol.records.record import BATCH_HEADER, BATCH_HEADER_SIZE, MAGIC_POS, MAGIC_V2
from kayak.protocol.records.scanner import BatchHeader

log = logging.getLogger(__name__)

# Enough to read any v2 batch header (61 bytes) in one pread.
_HEADER_READ = 64
_MIN_BATCH_SIZE = BATCH_HEADER_SIZE


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset, zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class SegmentFile:
    """An open ``.log`` descriptor, closed once the segment and every slice let go of it."""

    __slots__ = ("__weakref__", "_closer", "fd")

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._closer = weakref.finalize(self, os.close, self.fd)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, ready for ``os.sendfile``.

    Holding a slice keeps its file open even if the segment is deleted meanwhile.
    """

    file: SegmentFile
    position: int
    length: int

    @property
    def fd(self) -> int:
        return self.file.fd

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes themselves (for transports that cannot sendfile, and for tests)."""
        return os.pread(self.file.fd, self.length, self.position)


class Segment:
    """An append-only file of record batches starting at ``base_offset``."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        stem = directory / segment_name(base_offset)
        self.path = stem.with_suffix(".log")
        self.file = SegmentFile(self.path)
        self.size = os.fstat(self.file.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_at = time.time()
        self.index = OffsetIndex(stem.with_suffix(".index"), base_offset)
        self.time_index = TimeIndex(stem.with_suffix(".timeindex"), base_offset)
        self._index_interval = index_interval_bytes
        self._bytes_since_index = 0

    @property
    def fd(self) -> int:
        return self.file.fd

    # -- writing ------------------------------------------------------------------------

    def append(self, data: memoryview, headers: list[BatchHeader]) -> None:
        """Append validated batches (positions in ``headers`` are relative to ``data``).

        If the write fails (a full disk, an I/O error) the file is cut back to where it was
        before re-raising, so a failed append leaves nothing behind; if even that cut fails,
        :class:`SegmentDamagedError` says the file can no longer be trusted.
        """
        start = self.size
        try:
            _write_all(self.fd, data, start)
        except OSError as exc:
            try:
                os.ftruncate(self.fd, start)
            except OSError as cut:
                raise SegmentDamagedError(
                    f"{self.path}: write failed ({exc.strerror}) and cutting back to {start} "
                    f"failed too ({cut.strerror})"
                ) from exc
            raise
        self.size += len(data)
        for header in headers:
            self._track(header, start + header.position)

    def _track(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index >= self._index_interval or not len(self.index):
            self.index.append(header.base_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.time_index.maybe_append(header.max_timestamp, header.base_offset)
        self.next_offset = header.next_offset
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)

    def flush(self) -> None:
        """Make the appended batches durable (blocking)."""
        os.fdatasync(self.fd)

    def seal(self) -> None:
        """fsync the data and save both indexes: from now on the segment needs no recovery.

        The caller fsyncs the directory (the index renames) once for all it sealed.
        """
        self.flush()
        self.save_indexes()

    def save_indexes(self) -> None:
        """Write both indexes whole and durably (the directory fsync is the caller's)."""
        self.index.save()
        self.time_index.save()

    # -- reading ------------------------------------------------------------------------

    def header_at(self, position: int) -> BatchHeader | None:
        """The batch header at a file position, or None exactly at the end of the data.

        A position inside the file that does not hold a whole, sane v2 batch header raises
        :class:`~kayak.errors.CorruptRecordError` naming the file and position: a read never
        walks on through garbage.
        """
        if position >= self.size:
            return None
        raw = os.pread(self.fd, _HEADER_READ, position)
        if len(raw) < BATCH_HEADER_SIZE or raw[MAGIC_POS] != MAGIC_V2:
            raise self._corrupt(position, "no record batch header here")
        header = BatchHeader(position, *BATCH_HEADER.unpack_from(raw, 0))
        if header.size < _MIN_BATCH_SIZE or position + header.size > self.size:
            raise self._corrupt(position, f"batch length {header.batch_length} does not fit")
        if header.last_offset_delta < 0 or header.base_offset < self.base_offset:
            raise self._corrupt(position, f"batch offsets {header.base_offset}+ are impossible")
        return header

    def _corrupt(self, position: int, why: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.path} is corrupt at position {position}: {why}")

    def headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Every batch header from ``position`` to the end, read without decoding records."""
        while (header := self.header_at(position)) is not None:
            yield header
            position = header.end

    def _indexed_header(self, offset: int, position: int) -> BatchHeader | None:
        """The header an index entry points at, checked against the entry.

        A damaged index (an entry pointing anywhere but the batch it names) is rebuilt from
        the log and the caller asks again; it never steers a read into the middle of a batch.
        """
        try:
            header = self.header_at(position)
        except CorruptRecordError:
            header = None
        if (header is None and position < self.size) or (
            header is not None and header.base_offset != offset
        ):
            log.warning("%s: index entry (%d, %d) is wrong; rebuilding the index",
                        self.index.path, offset, position)  # fmt: skip
            self.rebuild_index()
            raise _IndexRebuilt
        return header

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is ≥ ``offset``, or None past the end."""
        while True:
            try:
                header = self._indexed_header(*self.index.lookup(offset))
                break
            except _IndexRebuilt:
                continue
        while header is not None:
            if header.last_offset >= offset:
                return header
            header = self.header_at(header.end)
        return None

    def find_by_timestamp(self, timestamp: int) -> BatchHeader | None:
        """The first batch holding a record with timestamp ≥ ``timestamp``."""
        header = self.find(self.time_index.lookup(timestamp))
        while header is not None:
            if header.max_timestamp >= timestamp:
                return header
            header = self.header_at(header.end)
        return None

    def read(
        self, offset: int, max_bytes: int, min_one: bool, end: int | None = None
    ) -> FileSlice | None:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them.

        With ``min_one`` the first batch comes whole even if larger than ``max_bytes``, as
        Kafka does so that a consumer can always make progress. Nothing at or past file
        position ``end`` (a batch boundary: the high watermark) is returned.
        """
        end = self.size if end is None else end
        first = self.find(offset)
        if first is None or first.position >= end:
            return None
        if first.size > max_bytes and not min_one:
            return None
        limit = min(first.position + max_bytes, end)
        try:
            stop = self._slice_end(first, limit)
        except _IndexRebuilt:
            return self.read(offset, max_bytes, min_one, end)
        return FileSlice(self.file, first.position, stop - first.position)

    def _slice_end(self, first: BatchHeader, limit: int) -> int:
        """Where the whole batches from ``first`` that fit before ``limit`` end.

        Every batch before an indexed boundary ends at or before it, so the index lets us skip
        straight to the last boundary within the limit instead of reading each header; the
        header there is checked against the index entry before it is trusted. Damage after
        the first batch ends the slice before it (as Kafka serves the good batches first); a
        read that starts at the damage is the one that fails.
        """
        stop = first.end
        try:
            indexed_offset, indexed_position = self.index.entry_at_or_before(limit)
            if indexed_position > first.position:
                header = self._indexed_header(indexed_offset, indexed_position)
                stop = indexed_position
            else:
                header = self.header_at(stop) if stop < limit else None
            while header is not None and header.end <= limit:
                stop = header.end
                header = self.header_at(stop) if stop < limit else None
        except CorruptRecordError:
            pass
        return stop

    # -- recovery -----------------------------------------------------------------------

    def load_indexes(self) -> bool:
        """Load both saved indexes and check the log ends where they say; False if not.

        Walks the log from the last indexed batch to its end (headers only), so a sealed
        segment costs a few reads, and learns the next offset and the largest timestamp.
        """
        try:
            self.index.load(self.size)
            last_offset, last_position = self.index.last()
            header = self.header_at(last_position)
            if (header is None and self.size) or (
                header is not None and header.base_offset != last_offset
            ):
                raise IndexFileError(f"{self.index.path}: the last entry is not a batch")
            self.next_offset, self.max_timestamp = self.base_offset, -1
            while header is not None:
                self.next_offset = header.next_offset
                self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
                header = self.header_at(header.end)
            self.time_index.load(self.next_offset)
            self.max_timestamp = max(self.max_timestamp, self.time_index.max_timestamp)
        except (IndexFileError, CorruptRecordError) as exc:
            log.info("%s", exc)
            self.index.reset()
            self.time_index.reset()
            return False
        return True

    def rebuild_index(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC checks; the log is trusted).

        If the log itself is damaged the old indexes stay and CORRUPT_MESSAGE is raised.
        """
        kept = (self.index, self.time_index, self.next_offset, self.max_timestamp)
        self.index = OffsetIndex(self.index.path, self.base_offset)
        self.time_index = TimeIndex(self.time_index.path, self.base_offset)
        self._bytes_since_index = 0
        self.next_offset, self.max_timestamp = self.base_offset, -1
        try:
            for header in self.headers():
                self._track(header, header.position)
        except CorruptRecordError:
            self.index, self.time_index, self.next_offset, self.max_timestamp = kept
            raise

    def recover(self, expected_offset: int) -> SegmentScan:
        """Scan the whole segment with CRC checks and rebuild its indexes.

        Returns what the scan found: where the longest valid prefix ends, and whether what
        follows is a torn tail or damage in the middle. Cutting is the caller's decision.
        """
        self.index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset, self.max_timestamp = self.base_offset, -1
        return SegmentScan.run(self.fd, self.size, expected_offset, self._track_scanned)

    def _track_scanned(self, header: BatchHeader) -> None:
        self._track(header, header.position)

    def truncate_to(self, position: int) -> None:
        """Cut the file at ``position`` (a batch boundary) and make the cut durable."""
        os.ftruncate(self.fd, position)
        os.fsync(self.fd)
        self.size = position
        self.index.truncate_after(position)
        self.time_index.truncate_after(self.next_offset)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Let go of the file (fetches still holding a slice keep it open until done)."""
        self.file = _CLOSED

    def delete(self) -> None:
        """Remove the segment's files; in-flight fetches keep reading the unlinked file."""
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            remove_quietly(path)


class SegmentDamagedError(OSError):
    """A segment file is in a state nothing wrote on purpose (a failed write not undone)."""


class _IndexRebuilt(Exception):
    """The index was wrong and has been rebuilt: look again."""


class _ClosedFile(SegmentFile):
    """Stands in for a released file: any use is a bug, reported as EBADF."""

    def __init__(self) -> None:
        self.fd = -1


_CLOSED = _ClosedFile()


def _write_all(fd: int, data: memoryview, position: int) -> None:
    # Explicit positions: after a reopen or a recovery cut the fd's own offset means nothing.
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], position + written)
