"""Reading one ``.log`` file batch by batch, checking each batch's framing, structure and CRC.

The first step of every check: :class:`SegmentReader` turns a file into :class:`ScannedBatch`
values and :class:`~kayak.broker.log.verify.problems.Problem` values for what cannot be read.
It is :class:`~kayak.broker.log.batch_walk.BatchWalk` in its "report and go on" mode: the very
judgement recovery makes of the same bytes, so verify reports a fault exactly where recovery
would stop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from kayak.broker.log.batch_walk import (
    DEFAULT_CHUNK_SIZE,
    BatchWalk,
    Fault,
    ProgressCallback,
    WalkMode,
    crc_matches,
    file_message,
)
from kayak.broker.log.verify.problems import Problem, ProblemKind
from kayak.protocol.records.scanner import BatchHeader

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "ProgressCallback",
    "ScannedBatch",
    "SegmentReader",
    "crc_matches",
    "file_message",
]


class ScannedBatch(NamedTuple):
    """One batch as read from a segment file."""

    header: BatchHeader  # its position is the position in the file
    data: memoryview  # the whole batch, from its base offset field on
    crc_ok: bool | None  # None when CRCs are not being checked
    first_offset: int = -1  # the base offset (a compressed magic 0/1 wrapper's first inner)


class SegmentReader:
    """Iterates the batches of one ``.log`` file, reading it in chunks, never writing.

    A batch that fails its CRC (or whose offsets do not continue the previous batch's, from
    ``base_offset`` on when given) is reported and walked past: its length still frames it.
    A header that cannot be framed, or a file ending inside a batch, ends the scan, since
    nothing after it can be found. After iteration, ``problems`` holds what was found and
    ``complete`` says whether the file ended exactly after a batch.
    """

    def __init__(
        self,
        path: Path,
        *,
        base_offset: int | None = None,
        check_crc: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_bytes: ProgressCallback | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        self.path = path
        self.base_offset = base_offset
        self.check_crc = check_crc
        self.chunk_size = chunk_size
        self.problems: list[Problem] = []
        self.size = 0
        self.valid_end = 0  # where the last readable batch ends
        self.complete = False
        self._on_bytes = on_bytes

    def __iter__(self) -> Iterator[ScannedBatch]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            self.problems.append(Problem(self.path, ProblemKind.IO, f"cannot open: {exc}"))
            return
        walk: BatchWalk | None = None
        try:
            self.size = os.fstat(fd).st_size
            walk = BatchWalk(
                fd, self.size, WalkMode.REPORT, self.base_offset, check_crc=self.check_crc,
                magic2_only=False, chunk_size=self.chunk_size, on_bytes=self._on_bytes,
            )  # fmt: skip
            for batch in walk:
                yield ScannedBatch(batch.header, batch.data, batch.crc_ok, batch.first_offset)
        except OSError as exc:
            where = walk.valid_end if walk is not None else 0
            self.problems.append(Problem(self.path, ProblemKind.IO, f"cannot read: {exc}", where))
        finally:
            os.close(fd)
            if walk is not None:
                self.size, self.valid_end, self.complete = walk.size, walk.valid_end, walk.complete
                self.problems.extend(self._problem(fault) for fault in walk.faults)

    def _problem(self, fault: Fault) -> Problem:
        return Problem(
            self.path, ProblemKind(fault.kind.value), fault.message, fault.position, fault.offset
        )
