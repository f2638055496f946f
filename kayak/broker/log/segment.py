"""One segment: a ``.log`` file of record batches with its ``.index`` and ``.timeindex``.

Batches are stored exactly as produced (with broker-assigned base offsets), so a fetch can
send file bytes straight to a socket. The file descriptor stays open for the segment's life:
reads use ``pread``/``sendfile`` at explicit positions and never move a shared file offset.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log.files import remove_quietly
from kayak.broker.log.index import OffsetIndex, TimeIndex
from kayak.errors import CorruptRecordError, InvalidRecordError
from kayak.protocol.records.record import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
)
from kayak.protocol.records.scanner import BatchHeader, read_batch_header, validate_batch

log = logging.getLogger(__name__)

# Enough to read any v2 batch header (61 bytes) in one pread.
_HEADER_READ = 64
# Recovery reads the segment in chunks this large, so a torn tail costs one short read.
_RECOVERY_CHUNK = 4 * 1024 * 1024


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset, zero-padded to 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, ready for ``os.sendfile``."""

    fd: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes themselves (for transports that cannot sendfile, and for tests)."""
        return os.pread(self.fd, self.length, self.position)


class Segment:
    """An append-only file of record batches starting at ``base_offset``."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        stem = directory / segment_name(base_offset)
        self.path = stem.with_suffix(".log")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_at = time.time()
        self.index = OffsetIndex(stem.with_suffix(".index"), base_offset)
        self.time_index = TimeIndex(stem.with_suffix(".timeindex"), base_offset)
        self._index_interval = index_interval_bytes
        self._bytes_since_index = 0

    # -- writing ------------------------------------------------------------------------

    def append(self, data: memoryview, headers: list[BatchHeader]) -> None:
        """Append validated batches (positions in ``headers`` are relative to ``data``)."""
        start = self.size
        _write_all(self.fd, data, start)
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
        """Make the appended batches durable (indexes are rebuilt by recovery, not synced)."""
        os.fdatasync(self.fd)
        self.index.flush()
        self.time_index.flush()

    # -- reading ------------------------------------------------------------------------

    def header_at(self, position: int) -> BatchHeader | None:
        """The batch header at a file position, or None at the end of the data."""
        if position >= self.size:
            return None
        raw = os.pread(self.fd, _HEADER_READ, position)
        if len(raw) >= BATCH_HEADER_SIZE and raw[MAGIC_POS] == MAGIC_V2:
            # A v2 header is complete in its first 61 bytes; only check the batch fits the
            # file rather than reading all of it (that read would defeat zero-copy fetch).
            v2 = BatchHeader(position, *BATCH_HEADER.unpack_from(raw, 0))
            if v2.batch_length < MIN_BATCH_LENGTH or position + v2.size > self.size:
                return None
            return v2
        header = read_batch_header(raw, 0)
        if header is None and len(raw) >= LOG_OVERHEAD:
            # Legacy or oversize header reads need the whole batch; a v2 header never does.
            raw = os.pread(self.fd, LOG_OVERHEAD + _batch_length(raw), position)
            header = read_batch_header(raw, 0)
        return None if header is None else header._replace(position=position)

    def headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Every batch header from ``position`` to the end, read without decoding records."""
        while (header := self.header_at(position)) is not None:
            yield header
            position = header.end

    def last_indexed(self) -> BatchHeader | None:
        """The header of the last batch the offset index points at."""
        return self.header_at(self.index.lookup(2**63 - 1))

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is ≥ ``offset``, or None past the end."""
        position = self.index.lookup(offset)
        while (header := self.header_at(position)) is not None:
            if header.last_offset >= offset:
                return header
            position = header.end
        return None

    def find_by_timestamp(self, timestamp: int) -> BatchHeader | None:
        """The first batch holding a record with timestamp ≥ ``timestamp``."""
        header = self.find(self.time_index.lookup(timestamp))
        while header is not None:
            if header.max_timestamp >= timestamp:
                return header
            header = self.header_at(header.end)
        return None

    def read(self, offset: int, max_bytes: int, min_one: bool) -> FileSlice | None:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them.

        With ``min_one`` the first batch comes whole even if larger than ``max_bytes``, as
        Kafka does so that a consumer can always make progress.
        """
        first = self.find(offset)
        if first is None:
            return None
        if first.size > max_bytes and not min_one:
            return None
        limit = first.position + max_bytes
        # Every batch before an indexed boundary ends at or before it, so the index lets us
        # skip straight to the last boundary within the limit instead of reading each header.
        end = max(first.end, self.index.boundary_at_or_before(limit))
        while end < limit:
            header = self.header_at(end)
            if header is None or header.end > limit:
                break
            end = header.end
        return FileSlice(self.fd, first.position, end - first.position)

    # -- recovery -----------------------------------------------------------------------

    def load_indexes(self) -> bool:
        """Load both index files; False if either is inconsistent with the log."""
        return self.index.load(self.size) and self.time_index.load(self.size)

    def recover(self, validate_crc: bool = True) -> int:
        """Rescan the whole segment, cut a torn or corrupt tail, rebuild indexes.

        Returns how many bytes were cut. Every batch before the cut passed its CRC check.
        """
        self.index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset, self.max_timestamp = self.base_offset, -1
        position, valid_end = 0, 0
        chunk, chunk_start = b"", 0
        while position < self.size:
            if position + _HEADER_READ > chunk_start + len(chunk):
                chunk_start, chunk = position, os.pread(self.fd, _RECOVERY_CHUNK, position)
            try:
                header = read_batch_header(chunk, position - chunk_start)
                if header is None and len(chunk) == _RECOVERY_CHUNK:
                    # A batch larger than the chunk: read exactly it.
                    chunk_start = position
                    chunk = os.pread(self.fd, LOG_OVERHEAD + _batch_length(chunk), position)
                    header = read_batch_header(chunk, 0)
                if header is None:
                    break
                if validate_crc:
                    validate_batch(header, chunk, strict=False)
            except (CorruptRecordError, InvalidRecordError) as exc:
                log.warning("%s: cutting corrupt tail at %d: %s", self.path, position, exc)
                break
            self._track(header._replace(position=position), position)
            position = valid_end = position + header.size
        cut = self.size - valid_end
        if cut:
            self.truncate_to(valid_end)
        return cut

    def truncate_to(self, position: int) -> None:
        """Cut the file at ``position`` (a batch boundary)."""
        os.ftruncate(self.fd, position)
        os.fsync(self.fd)
        self.size = position
        self.index.truncate_after(position)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        os.close(self.fd)

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            remove_quietly(path)


def _write_all(fd: int, data: memoryview, position: int) -> None:
    # Explicit positions: after a reopen or a recovery cut the fd's own offset means nothing.
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], position + written)


def _batch_length(raw: bytes) -> int:
    return int.from_bytes(raw[8:12], "big", signed=True) if len(raw) >= 12 else 0
