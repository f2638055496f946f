"""One segment: a ``.log`` file of record batches with its ``.index`` and ``.timeindex``.

Batches are stored exactly as produced (with broker-assigned base offsets), so a fetch can
send file bytes straight to a socket. Reads use ``pread``/``sendfile`` at explicit positions
and never move a shared file offset.

A segment's file is opened on use through the process's bounded cache of open files
(:mod:`~kayak.broker.log.open_files`) and may be closed again when other files need the room.
The descriptor belongs to a :class:`SegmentFile` that every :class:`FileSlice` handed to a
fetch holds on to: deleting a segment (or evicting its file) lets go of it at once, but the
descriptor closes only when the last fetch that took a slice of it is done. A descriptor
number is therefore never reused by another file while a response still means to send from
it. When too many evicted files are held that way, a read copies its bytes instead
(:class:`CopiedSlice`).

Every segment but the last is *sealed*: its data fsynced and its indexes saved whole. Only
the last segment can have a torn tail after a crash, so only it is rescanned. A sealed
segment that a start found as the catalogue of sealed segments describes it (see
``loader``) is opened lazily: its indexes are loaded, and checked against the log, on first
use, and dropped again when its file leaves the cache.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log.aborted_index import AbortedTxnIndex
from kayak.broker.log.batch_walk import frame_fault
from kayak.broker.log.files import fsync_directory, remove_quietly
from kayak.broker.log.index import IndexFileError, OffsetIndex, TimeIndex
from kayak.broker.log.open_files import OPEN_FILES, OpenFiles, SegmentFile, closed_error
from kayak.broker.log.recovery import SegmentScan
from kayak.errors import CorruptRecordError, KafkaStorageError
from kayak.protocol.primitives import Buffer
from kayak.protocol.records.record import BATCH_HEADER, BATCH_HEADER_SIZE, MAGIC_POS, MAGIC_V2
from kayak.protocol.records.scanner import BatchHeader

log = logging.getLogger(__name__)

# Enough to read any v2 batch header (61 bytes) in one pread.
_HEADER_READ = 64
_IOV_MAX = 1024  # Linux's UIO_MAXIOV: buffers per pwritev
_MIN_BATCH_SIZE = BATCH_HEADER_SIZE


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset, zero-padded to 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class SealedFacts:
    """What a sealed segment was when it was sealed: enough to use it without opening it."""

    size: int
    next_offset: int
    max_timestamp: int


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
        """The descriptor to send from (valid while this slice lives)."""
        return self.file.fd

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes themselves (for transports that cannot sendfile, and for tests)."""
        data = os.pread(self.file.fd, self.length, self.position)
        if len(data) != self.length:
            # Fewer bytes than the frame announced would put the stream out of step.
            raise ConnectionError(f"segment ended {self.length - len(data)} bytes early")
        return data


@dataclass(frozen=True, slots=True)
class CopiedSlice:
    """Bytes of a segment read into memory, handed out when no descriptor may be pinned.

    The transport writes it like any buffer (``read()``), so it holds no descriptor at all.
    """

    data: bytes
    position: int  # where in the segment file the bytes were

    def __len__(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        """The bytes themselves."""
        return self.data


RecordsSlice = FileSlice | CopiedSlice
"""What a read returns: a file range to sendfile, or its bytes."""


class Segment:
    """An append-only file of record batches starting at ``base_offset``."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        files: OpenFiles = OPEN_FILES,
        sealed: SealedFacts | None = None,
    ) -> None:
        """Open (creating if needed) the segment's file; with ``sealed``, open nothing yet
        and take its size, end and largest timestamp from those facts."""
        self.base_offset = base_offset
        self.directory = directory
        self.aborted = AbortedTxnIndex(directory, base_offset)  # its aborted transactions
        self._path: Path | None = None  # made on first use, as the indexes are
        self.open_file: SegmentFile | None = None  # this segment's place in ``files``
        self._files = files
        self._closed = False
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_at = time.time()
        # Made on first use: a start may know 100,000 sealed segments it never reads.
        self._index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._index_interval = index_interval_bytes
        self._bytes_since_index = 0
        # Sealed segments never change: their indexes are on disk and may be dropped from
        # memory and loaded again; the active segment's exist only in memory until it seals.
        self.sealed = sealed is not None
        self._indexes_loaded = sealed is None
        # Whether anything (an append, a recovery) changed it since its indexes were saved:
        # closing an unchanged segment has nothing to sync or save.
        self.changed = sealed is None
        if sealed is None:
            self.size = os.fstat(files.file_of(self, create=True).fd).st_size
        else:
            self.size, self.next_offset = sealed.size, sealed.next_offset
            self.max_timestamp = sealed.max_timestamp

    @property
    def file(self) -> SegmentFile:
        """The open file (opened now if it was not); EBADF once the segment is closed."""
        if self._closed:
            raise closed_error(self.path)
        return self._files.file_of(self)

    @property
    def fd(self) -> int:
        """The segment file's descriptor (opened now if it was not)."""
        return self.file.fd

    def pin_file(self) -> SegmentFile | None:
        """The open file for a holder that may outlive its place in the cache (a sync); None
        when the cache allows no more such holders (see :class:`OpenFiles`)."""
        if self._closed:
            raise closed_error(self.path)
        return self._files.pin(self)

    @property
    def path(self) -> Path:
        """The ``.log`` file."""
        if self._path is None:
            self._path = self.directory / f"{segment_name(self.base_offset)}.log"
        return self._path

    @property
    def index(self) -> OffsetIndex:
        """The offset index (empty until loaded: see :meth:`ensure_indexes`)."""
        if self._index is None:
            self._index = OffsetIndex(self.path.with_suffix(".index"), self.base_offset)
        return self._index

    @property
    def time_index(self) -> TimeIndex:
        """The time index (empty until loaded: see :meth:`ensure_indexes`)."""
        if self._time_index is None:
            self._time_index = TimeIndex(self.path.with_suffix(".timeindex"), self.base_offset)
        return self._time_index

    def file_evicted(self) -> None:
        """The cache closed its hold on the file: a sealed segment drops its indexes too."""
        if self.sealed and self._indexes_loaded:
            self._index = self._time_index = None
            self._indexes_loaded = False

    def facts(self) -> SealedFacts:
        """What the sealed-segments record keeps of this segment."""
        return SealedFacts(self.size, self.next_offset, self.max_timestamp)

    # -- writing ------------------------------------------------------------------------

    def append(self, parts: Sequence[Buffer], headers: list[BatchHeader]) -> None:
        """Append validated batches: ``parts`` are written in order as one write (the
        produce path hands in views of the request it received, so the batches reach the file
        without a copy), and positions in ``headers`` are relative to the first part.

        If the write fails (a full disk, an I/O error) the file is cut back to where it was
        before re-raising, so a failed append leaves nothing behind; if even that cut fails,
        :class:`SegmentDamagedError` says the file can no longer be trusted.
        """
        start = self.size
        try:
            written = _write_all(self.fd, parts, start)
        except OSError as exc:
            try:
                os.ftruncate(self.fd, start)
            except OSError as cut:
                raise SegmentDamagedError(
                    f"{self.path}: write failed ({exc.strerror}) and cutting back to {start} "
                    f"failed too ({cut.strerror})"
                ) from exc
            raise
        self.size += written
        for header in headers:
            self._track(header, start + header.position)

    def _track(self, header: BatchHeader, position: int) -> None:
        self.changed = True
        # Kafka's entries: a batch's last offset (see index.py), so kafka-dump-log agrees.
        if self._bytes_since_index >= self._index_interval or not len(self.index):
            self.index.append(header.last_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.time_index.maybe_append(header.max_timestamp, header.last_offset)
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
        self.sealed = True

    def save_indexes(self) -> None:
        """Write both indexes whole and durably (the directory fsync is the caller's)."""
        self.index.save()
        self.time_index.save()
        self.aborted.sync()
        self.changed = False

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
        if header.size < _MIN_BATCH_SIZE:
            raise self._corrupt(position, f"batch length {header.batch_length} does not fit")
        # Framed as recovery and verify frame it (the CRC is theirs to check, not a read's).
        fault = frame_fault(header, self.size)
        if fault is not None:
            raise self._corrupt(position, fault)
        if header.base_offset < self.base_offset:
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
            header is not None and header.last_offset != offset
        ):
            log.warning("%s: index entry (%d, %d) is wrong; rebuilding the index",
                        self.index.path, offset, position)  # fmt: skip
            self.rebuild_index()
            raise _IndexRebuilt
        return header

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is ≥ ``offset``, or None past the end."""
        self.ensure_indexes()
        while True:
            try:
                entry = self.index.lookup(offset)
                header = self.header_at(0) if entry is None else self._indexed_header(*entry)
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
        self.ensure_indexes()
        header = self.find(self.time_index.lookup(timestamp))
        while header is not None:
            if header.max_timestamp >= timestamp:
                return header
            header = self.header_at(header.end)
        return None

    def read(
        self, offset: int, max_bytes: int, min_one: bool, end: int | None = None
    ) -> RecordsSlice | None:
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
        return self._slice(first.position, stop - first.position)

    def _slice(self, position: int, length: int) -> RecordsSlice:
        pinned = self.pin_file()
        if pinned is None:
            return CopiedSlice(os.pread(self.fd, length, position), position)
        return FileSlice(pinned, position, length)

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
            entry = self.index.entry_at_or_before(limit)
            if entry is not None and entry[1] > first.position:
                header = self._indexed_header(*entry)
                stop = entry[1]
            else:
                header = self.header_at(stop) if stop < limit else None
            while header is not None and header.end <= limit:
                stop = header.end
                header = self.header_at(stop) if stop < limit else None
        except CorruptRecordError:
            pass
        return stop

    # -- recovery -----------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load a sealed segment's indexes if they are not in memory (first use, or after its
        file left the cache), checked against the log and the facts the segment was opened
        with; a missing or wrong index is rebuilt with a CRC scan and saved.

        Damage the rebuild finds (a sealed segment is never torn by a crash) raises
        :class:`UnreadableSegmentError`: the partition must go offline, as at a start.
        """
        if self._indexes_loaded:
            return
        expected = self.next_offset
        if self.load_indexes() and self.next_offset == expected:
            self._indexes_loaded = True
            return
        log.warning("%s: index missing or inconsistent; rebuilding it", self.path)
        scan = self.recover(self.base_offset)
        if scan.problem is not None or scan.next_offset != expected:
            problem = scan.problem or f"it ends at offset {scan.next_offset}, not {expected}"
            raise UnreadableSegmentError(
                f"{self.path}: damaged at position {scan.valid_end} "
                f"(offset {scan.next_offset}): {problem}"
            )
        self.save_indexes()
        fsync_directory(self.path.parent)
        self._indexes_loaded = True

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
                header is not None and header.last_offset != last_offset
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
        self._indexes_loaded = True
        self.changed = False
        return True

    def rebuild_index(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC checks; the log is trusted).

        If the log itself is damaged the old indexes stay and CORRUPT_MESSAGE is raised.
        """
        kept = (self.index, self.time_index, self.next_offset, self.max_timestamp)
        self._index = OffsetIndex(self.index.path, self.base_offset)
        self._time_index = TimeIndex(self.time_index.path, self.base_offset)
        self._bytes_since_index = 0
        self.next_offset, self.max_timestamp = self.base_offset, -1
        try:
            for header in self.headers():
                self._track(header, header.position)
        except CorruptRecordError:
            self._index, self._time_index, self.next_offset, self.max_timestamp = kept
            raise

    def recover(self, expected_offset: int) -> SegmentScan:
        """Scan the whole segment with CRC checks and rebuild its indexes.

        Returns what the scan found: where the longest valid prefix ends, and whether what
        follows is a torn tail or damage in the middle. Cutting is the caller's decision.
        """
        self.index.reset()
        self.time_index.reset()
        self._indexes_loaded = self.changed = True
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
        self.changed = True
        self.index.truncate_after(position)
        self.time_index.truncate_after(self.next_offset)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Let go of the file (fetches still holding a slice keep it open until done)."""
        self._closed = True
        self._files.forget(self)

    def delete(self) -> None:
        """Remove the segment's files; in-flight fetches keep reading the unlinked file."""
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            remove_quietly(path)
        self.aborted.delete()


class SegmentDamagedError(OSError):
    """A segment file is in a state nothing wrote on purpose (a failed write not undone)."""


class UnreadableSegmentError(KafkaStorageError):
    """A sealed segment whose index had to be rebuilt turned out damaged: the partition
    goes offline, as it would have at a start that checked the segment."""


class _IndexRebuilt(Exception):
    """The index was wrong and has been rebuilt: look again."""


def _write_all(fd: int, parts: Sequence[Buffer], position: int) -> int:
    """pwritev every part at ``position``; returns the bytes written.

    Explicit positions: after a reopen or a recovery cut the fd's own offset means nothing.
    """
    total = sum(map(len, parts))
    if len(parts) <= _IOV_MAX and os.pwritev(fd, parts, position) == total:
        return total  # the usual case: everything in one call
    # A short write (or more parts than one call takes): write again from the start, as
    # positions are explicit, part by part until everything is down.
    views = [memoryview(part).cast("B") for part in parts]
    written = 0
    while views:
        batch = views[:_IOV_MAX]
        done = os.pwritev(fd, batch, position + written)
        if done <= 0:
            raise OSError(5, f"pwritev wrote nothing at position {position + written}")
        written += done
        views = _unwritten_rest(views, done)
    return total


def _unwritten_rest(views: list[memoryview], done: int) -> list[memoryview]:
    """What remains of ``views`` once their first ``done`` bytes are written."""
    for i, view in enumerate(views):
        if done < len(view):
            return [view[done:], *views[i + 1 :]]
        done -= len(view)
    return []
