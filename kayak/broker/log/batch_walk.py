"""One walker over a segment file's batches: how recovery and ``kayak log verify`` judge bytes.

Every judgement of a segment file's bytes is made here, once:

- *framing* (:func:`frame_fault`, also what ``Segment.header_at`` checks): a whole header with a
  known magic and a sane length, for a batch that fits in the file. A file that ends inside
  a batch is a *torn* tail; anything else that cannot be framed is *corrupt*;
- *content*: the batch's CRC-32C and header structure (``validate_batch``, not strict: a log
  may legally hold what a fresh produce may not, such as compaction's gaps), and that its
  first offset continues the previous batch (a gap or an overlap is an *offsets* fault). The
  broker's own logs hold magic 2 only (``magic2_only``); verify also reads older formats.

Two modes, one judgement:

- :attr:`WalkMode.STOP` (recovery): the first fault ends the walk there. Recovery truncates at
  ``valid_end`` when the fault is a torn tail, and ``damage_inside`` tells it apart from damage
  in the middle (a sound batch follows the bad one), which is never cut.
- :attr:`WalkMode.REPORT` (verify): a batch that frames but fails its content checks is
  reported and walked past (its length still frames it); only a framing fault ends the walk.

So the first fault verify reports in a file is exactly where recovery would stop, and a file
verify finds clean is one recovery keeps whole.

The file is read through a chunk buffer; a batch larger than a chunk, or one straddling a
chunk's end, is read again by itself, so the answers do not depend on the chunk size.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from kayak.errors import CorruptRecordError, KafkaError
from kayak.protocol.records.batch import RecordBatch
from kayak.protocol.records.compression import codec_from_id
from kayak.protocol.records.legacy import LegacyBatch
from kayak.protocol.records.record import LOG_OVERHEAD, MAGIC_POS, MAGIC_V2
from kayak.protocol.records.scanner import BatchHeader, read_batch_header, validate_batch

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024

ProgressCallback = Callable[[int], None]
"""Called with a number of bytes of the file just walked (or given up on as unreadable)."""


class WalkMode(enum.Enum):
    STOP = "stop"  # recovery: the first fault ends the walk
    REPORT = "report"  # verify: report content faults and go on while batches still frame


class FaultKind(enum.StrEnum):
    """What is wrong at a position (the values are verify's problem kinds)."""

    TORN = "torn"  # the file ends inside a batch, or in stray bytes after the last one
    CORRUPT = "corrupt"  # a header that cannot be framed, a failed CRC, a bad header field
    OFFSETS = "offsets"  # the batch does not start where the previous one ended


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    message: str
    position: int
    offset: int | None = None  # the batch's first offset, when it is known

    def __str__(self) -> str:
        return f"position {self.position}: {self.message}"


class WalkedBatch(NamedTuple):
    """One framed batch of the file."""

    header: BatchHeader  # its position is the position in the file
    data: memoryview  # the whole batch, from its base offset field on
    first_offset: int  # the base offset; a compressed magic 0/1 wrapper's first inner offset
    crc_ok: bool | None  # None when CRCs are not checked
    fault: Fault | None  # None: sound


@dataclass
class BatchWalk:
    """Walks ``size`` bytes of ``fd`` from the start; iterate it for the batches.

    ``expected_offset`` is where the first batch must start (None: wherever it does). After
    iteration: ``valid_end`` (where the last framed batch ends; in STOP mode the last sound
    one), ``next_offset`` (the offset after it), ``batches`` walked, ``faults`` found (in
    STOP mode at most one, also in ``stop``), ``complete`` (the file ended exactly after a
    batch) and ``damage_inside``.
    """

    fd: int
    size: int
    mode: WalkMode
    expected_offset: int | None = None
    check_crc: bool = True
    magic2_only: bool = True
    chunk_size: int = DEFAULT_CHUNK_SIZE
    on_bytes: ProgressCallback | None = None
    valid_end: int = 0
    next_offset: int | None = None
    batches: int = 0
    faults: list[Fault] = field(default_factory=list)
    stop: Fault | None = None
    complete: bool = False
    damage_inside: bool = False
    _buf: bytes = b""
    _start: int = 0

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {self.chunk_size}")
        self.next_offset = self.expected_offset

    def __iter__(self) -> Iterator[WalkedBatch]:
        position = 0
        try:
            while position < self.size:
                framed = self._frame(position)
                if isinstance(framed, Fault):
                    self._stop(framed)
                    return
                batch = self._judge(framed, self.next_offset)
                if batch.fault is not None:
                    self.faults.append(batch.fault)
                    if self.mode is WalkMode.STOP:
                        self.stop = batch.fault
                        self.damage_inside = self._sound_batch_follows(batch)
                        return
                yield batch
                self.batches += 1
                self.next_offset = batch.header.next_offset
                position = self.valid_end = batch.header.end
                self._progress(batch.header.size)
            self.complete = True
        finally:
            self._progress(self.size - self.valid_end)  # the rest was given up on

    def _stop(self, fault: Fault) -> None:
        self.faults.append(fault)
        self.stop = fault

    def _progress(self, count: int) -> None:
        if self.on_bytes is not None and count > 0:
            self.on_bytes(count)

    # -- framing --------------------------------------------------------------------------

    def _window(self, position: int, length: int) -> int:
        """Make ``[position, position + length)`` buffered (as far as the file goes); returns
        its index in the buffer."""
        if position < self._start or position + length > self._start + len(self._buf):
            want = min(max(length, self.chunk_size), self.size - position)
            self._buf = _pread_all(self.fd, want, position)
            self._start = position
        return position - self._start

    def _frame(self, position: int) -> WalkedBatch | Fault:
        """The batch at ``position`` as its header frames it (content not yet judged)."""
        need = MAGIC_POS + 1
        while True:
            if position + need > self.size:
                return _torn(position, need, self.size - position)
            at = self._window(position, need)
            if len(self._buf) - at < need:  # the file shrank under us (a broker writing?)
                self.size = position + len(self._buf) - at
                return _torn(position, need, self.size - position)
            try:
                header = read_batch_header(self._buf, at)
            except CorruptRecordError as exc:
                return Fault(
                    FaultKind.CORRUPT, f"unreadable batch header: {file_message(exc)}", position
                )
            if header is not None:
                break
            need = _bytes_needed(self._buf, at)  # more than is there: the batch's whole length
        data = memoryview(self._buf)[at : at + header.size]
        fault = frame_fault(header._replace(position=position), self.size)
        if fault is not None:
            return Fault(FaultKind.CORRUPT, fault, position, header.base_offset)
        return WalkedBatch(header._replace(position=position), data, header.base_offset, None, None)

    # -- judging --------------------------------------------------------------------------

    def _judge(self, framed: WalkedBatch, expected: int | None) -> WalkedBatch:
        """``framed`` with its content judged: CRC and structure, magic, offsets."""
        header, data = framed.header, framed.data
        local = header._replace(position=0)
        position = header.position
        crc_ok: bool | None = None
        fault: Fault | None = None
        first = header.base_offset
        if self.magic2_only and header.magic != MAGIC_V2:
            message = f"magic {header.magic} batch where only magic 2 is stored"
            fault = Fault(FaultKind.CORRUPT, message, position, first)
        elif self.check_crc:
            try:
                validate_batch(local, data, strict=False)
                crc_ok = True
            except KafkaError as exc:
                fault = Fault(FaultKind.CORRUPT, file_message(exc), position, first)
                crc_ok = crc_matches(data)
        else:
            structure = _structure_fault(header)
            if structure is not None:
                fault = Fault(FaultKind.CORRUPT, structure, position, first)
        if fault is None:
            try:
                first = first_offset(header, data)
            except KafkaError as exc:
                fault = Fault(FaultKind.CORRUPT, file_message(exc), position, first)
        if fault is None and expected is not None and first != expected:
            fault = Fault(FaultKind.OFFSETS, _discontinuity(first, expected, self.batches),
                          position, first)  # fmt: skip
        return WalkedBatch(header, data, first, crc_ok, fault)

    def _sound_batch_follows(self, bad: WalkedBatch) -> bool:
        """Whether a sound batch starts right after ``bad`` (as its header frames it), with
        the offsets ``bad`` claims: then ``bad`` was damaged in place, for a crash mid-write
        leaves nothing valid behind the tear."""
        after = bad.header.end
        if after >= self.size:
            return False
        framed = self._frame(after)
        if isinstance(framed, Fault):
            return False
        return self._judge(framed, bad.header.next_offset).fault is None


def frame_fault(header: BatchHeader, file_size: int) -> str | None:
    """Why the header at ``header.position`` of a file of ``file_size`` bytes frames no batch
    (or None): a length that runs past the end of the file, or a v2 header whose offsets
    cannot be (the CRC is not checked here: see :class:`BatchWalk`)."""
    if header.position + header.size > file_size:
        return f"batch length {header.batch_length} does not fit"
    if header.magic == MAGIC_V2 and header.last_offset_delta < -1:
        return f"lastOffsetDelta {header.last_offset_delta}"
    return None


def first_offset(header: BatchHeader, data: memoryview) -> int:
    """The batch's first offset: its base offset, except for a compressed magic 0/1 wrapper,
    which carries its *last* inner offset (the first one is inside)."""
    if header.magic == MAGIC_V2 or header.codec_id == 0:
        return header.base_offset
    inner = list(LegacyBatch(data).records())
    if not inner:
        raise CorruptRecordError("a compressed magic 0/1 wrapper holds no messages")
    return inner[0].offset


def crc_matches(data: memoryview) -> bool:
    """Whether the batch in ``data`` (any magic) carries the right CRC for its bytes."""
    try:
        if data[MAGIC_POS] == MAGIC_V2:
            return RecordBatch(data).crc_ok
        return LegacyBatch(data).crc_ok
    except KafkaError:
        return False


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


def _discontinuity(first: int, expected: int, batches_before: int) -> str:
    if batches_before == 0:
        message = f"the first batch starts at offset {first}, not at the segment's base offset"
    elif first > expected:
        message = f"gap: offsets {expected}..{first - 1} are missing before this batch"
    else:
        message = (
            f"overlap: the batch starts at offset {first}, the previous one ended at {expected - 1}"
        )
    return f"{message} (expected offset {expected})"


def _torn(position: int, need: int, remaining: int) -> Fault:
    if remaining < LOG_OVERHEAD:
        message = f"{remaining} stray bytes after the last batch, too few for a batch header"
    else:
        message = (
            f"the file ends inside a batch (torn tail): it needs {need} bytes, {remaining} remain"
        )
    return Fault(FaultKind.TORN, message, position)


def _bytes_needed(buf: bytes, rel: int) -> int:
    """Bytes from ``rel`` needed to frame the batch there, as far as is known yet."""
    minimum = MAGIC_POS + 1  # up to the magic byte, which says how to read the rest
    if len(buf) - rel < LOG_OVERHEAD:
        return minimum
    batch_length = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
    return max(minimum, LOG_OVERHEAD + batch_length)


def _pread_all(fd: int, length: int, position: int) -> bytes:
    parts, have = [], 0
    while have < length:
        data = os.pread(fd, length - have, position + have)
        if not data:
            break
        parts.append(data)
        have += len(data)
    return b"".join(parts)


_BUFFER_POSITION = re.compile(r" at position \d+| \(base offset -?\d+\)")


def file_message(exc: KafkaError) -> str:
    """A scanner error's message without the buffer positions it names (the fault carries the
    file position and the offset instead)."""
    return _BUFFER_POSITION.sub("", exc.message)
