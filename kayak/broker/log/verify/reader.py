"""Reading one ``.log`` file batch by batch, checking each batch's framing, structure and CRC.

The first step of every check: :class:`SegmentReader` turns a file into :class:`ScannedBatch`
values and :class:`~kayak.broker.log.verify.problems.Problem` values for what cannot be read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from kayak.broker.log.verify.problems import Problem, ProblemKind
from kayak.errors import CorruptRecordError, KafkaError
from kayak.protocol.records.batch import RecordBatch
from kayak.protocol.records.compression import codec_from_id
from kayak.protocol.records.legacy import LegacyBatch
from kayak.protocol.records.record import LOG_OVERHEAD, MAGIC_POS, MAGIC_V2
from kayak.protocol.records.scanner import BatchHeader, read_batch_header, validate_batch

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024

ProgressCallback = Callable[[int], None]
"""Called with a number of ``.log`` bytes just read (or skipped as unreadable)."""


class ScannedBatch(NamedTuple):
    """One batch as read from a segment file."""

    header: BatchHeader  # its position is the position in the file
    data: memoryview  # the whole batch, from its base offset field on
    crc_ok: bool | None  # None when CRCs are not being checked


class SegmentReader:
    """Iterates the batches of one ``.log`` file, reading it in chunks, never writing.

    A chunk boundary may fall anywhere, and a batch may be larger than a chunk: the bytes of
    an incomplete batch are kept and at least what it still needs is read. A batch that fails
    its CRC is reported and skipped (its length still frames it); a header that cannot be
    framed, or a file ending inside a batch, ends the scan, since nothing after it can be
    found. After iteration, ``problems`` holds what was found and ``complete`` says whether
    the file ended exactly after a batch.
    """

    def __init__(
        self,
        path: Path,
        *,
        check_crc: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_bytes: ProgressCallback | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        self.path = path
        self.check_crc = check_crc
        self.chunk_size = chunk_size
        self.problems: list[Problem] = []
        self.size = 0
        self.valid_end = 0  # where the last readable batch ends
        self.complete = False
        self._on_bytes = on_bytes
        self._consumed = 0

    def __iter__(self) -> Iterator[ScannedBatch]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            self.problems.append(Problem(self.path, ProblemKind.IO, f"cannot open: {exc}"))
            return
        try:
            self.size = os.fstat(fd).st_size
            yield from self._batches(fd)
        except OSError as exc:
            self._add(ProblemKind.IO, f"cannot read: {exc}", self.valid_end)
        finally:
            os.close(fd)
            self._progress(self.size - self._consumed)  # what was skipped still counts as done

    def _batches(self, fd: int) -> Iterator[ScannedBatch]:
        buf, buf_start, position = b"", 0, 0  # buf holds the file from buf_start on
        while position < self.size:
            rel = position - buf_start
            try:
                header = read_batch_header(buf, rel)
            except CorruptRecordError as exc:
                message = f"unreadable batch header: {file_message(exc)}"
                self._add(ProblemKind.CORRUPT, message, position)
                return
            if header is None:
                need = _bytes_needed(buf, rel)
                if position + need > self.size:
                    self._torn(position, need)
                    return
                buf, buf_start = self._read_more(fd, buf[rel:], position, need), position
                if len(buf) < need:  # the file shrank under us (a broker is writing to it?)
                    self.size = position + len(buf)
                    self._torn(position, need)
                    return
                continue
            data = memoryview(buf)[rel : rel + header.size]
            crc_ok = self._check(header._replace(position=0), data, position)
            yield ScannedBatch(header._replace(position=position), data, crc_ok)
            position = self.valid_end = position + header.size
        self.complete = True

    def _read_more(self, fd: int, kept: bytes, position: int, need: int) -> bytes:
        """``kept`` (the file from ``position``) extended to at least ``need`` bytes if it can."""
        parts, have = [kept], len(kept)
        want = max(self.chunk_size, need - have)
        while want > 0:
            data = os.pread(fd, want, position + have)
            if not data:
                break
            parts.append(data)
            have += len(data)
            want -= len(data)
            self._progress(len(data))
        return b"".join(parts)

    def _check(self, header: BatchHeader, data: memoryview, position: int) -> bool | None:
        """Validate one batch (``header`` positioned in ``data``); report what is wrong."""
        if not self.check_crc:
            fault = _structure_fault(header)
            if fault is not None:
                self._add(ProblemKind.CORRUPT, fault, position, header.base_offset)
            return None
        try:
            validate_batch(header, data, strict=False)
        except KafkaError as exc:
            self._add(ProblemKind.CORRUPT, file_message(exc), position, header.base_offset)
            return crc_matches(data)
        return True

    def _torn(self, position: int, need: int) -> None:
        remaining = self.size - position
        if remaining < LOG_OVERHEAD:
            message = f"{remaining} stray bytes after the last batch, too few for a batch header"
        else:
            message = (
                f"the file ends inside a batch (torn tail): it needs {need} bytes, "
                f"{remaining} remain"
            )
        self._add(ProblemKind.TORN, message, position)

    def _add(
        self, kind: ProblemKind, message: str, position: int, offset: int | None = None
    ) -> None:
        self.problems.append(Problem(self.path, kind, message, position, offset))

    def _progress(self, count: int) -> None:
        self._consumed += count
        if self._on_bytes is not None and count > 0:
            self._on_bytes(count)


def crc_matches(data: memoryview) -> bool:
    """Whether the batch in ``data`` (any magic) carries the right CRC for its bytes."""
    try:
        if data[MAGIC_POS] == MAGIC_V2:
            return RecordBatch(data).crc_ok
        return LegacyBatch(data).crc_ok
    except KafkaError:
        return False


def _bytes_needed(buf: bytes, rel: int) -> int:
    """Bytes from ``rel`` that the scanner needs to frame the batch there, as far as known."""
    minimum = MAGIC_POS + 1  # up to the magic byte, which says how to read the rest
    if len(buf) - rel < LOG_OVERHEAD:
        return minimum
    batch_length = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
    return max(minimum, LOG_OVERHEAD + batch_length)


def _structure_fault(header: BatchHeader) -> str | None:
    """What ``validate_batch`` would object to besides the CRC (for ``--no-crc`` runs)."""
    if header.magic == MAGIC_V2 and header.record_count < 0:
        return f"negative record count {header.record_count}"
    if header.magic == MAGIC_V2 and header.last_offset_delta < -1:
        return f"lastOffsetDelta {header.last_offset_delta}"
    try:
        codec_from_id(header.codec_id)
    except KafkaError as exc:
        return exc.message
    return None


_BUFFER_POSITION = re.compile(r" at position \d+| \(base offset -?\d+\)")


def file_message(exc: KafkaError) -> str:
    """A scanner error's message without the buffer positions it names."""
    # The scanner words its errors for a buffer, whose positions mean nothing in a file; the
    # Problem carries the file position (and the offset) instead.
    return _BUFFER_POSITION.sub("", exc.message)
