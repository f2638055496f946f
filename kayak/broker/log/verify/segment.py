"""One segment: offsets continuous across its batches, and its ``.index`` and ``.timeindex``.

:func:`verify_segment` reads the ``.log`` file with a
:class:`~kayak.broker.log.verify.reader.SegmentReader` and checks the batches against each
other and against the segment's two index files.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from kayak.broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from kayak.broker.log.verify.problems import Problem, ProblemKind, problem_order
from kayak.broker.log.verify.reader import (
    DEFAULT_CHUNK_SIZE,
    ProgressCallback,
    ScannedBatch,
    SegmentReader,
)
from kayak.errors import KafkaError
from kayak.protocol.records.legacy import LegacyBatch
from kayak.protocol.records.record import MAGIC_V2
from kayak.protocol.records.scanner import BatchHeader


@dataclass
class SegmentReport:
    """What one segment holds and what is wrong with it."""

    path: Path
    base_offset: int
    size: int = 0
    batches: int = 0
    records: int = 0
    next_offset: int = 0  # one past the last readable offset
    valid_bytes: int = 0  # where the readable batches end
    complete: bool = False  # the file ended exactly after a batch
    problems: list[Problem] = field(default_factory=list)


@dataclass
class LeaderEpochCheck:
    """Partition leader epochs only go up, and never past the cluster map's current one."""

    current: int | None  # the topic's epoch for the partition in topics.json, if known
    last: int = -1

    def check(self, header: BatchHeader, path: Path) -> Problem | None:
        epoch = header.partition_leader_epoch
        if header.magic != MAGIC_V2 or epoch < 0:
            return None
        problem = None
        if self.current is not None and epoch > self.current:
            problem = f"partition leader epoch {epoch} is above the current epoch {self.current}"
        elif epoch < self.last:
            problem = f"partition leader epoch {epoch} is below an earlier batch's {self.last}"
        self.last = max(self.last, epoch)
        if problem is None:
            return None
        return Problem(path, ProblemKind.CORRUPT, problem, header.position, header.base_offset)


def verify_segment(
    path: Path,
    *,
    base_offset: int | None = None,
    check_crc: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_bytes: ProgressCallback | None = None,
    on_batch: Callable[[ScannedBatch], None] | None = None,
    epochs: LeaderEpochCheck | None = None,
) -> SegmentReport:
    """Check one ``.log`` file and its ``.index`` and ``.timeindex``.

    ``base_offset`` defaults to the file name's (a name that is not a number: the first
    batch's). ``on_batch`` sees every readable batch in file order, as ``kayak log dump``
    prints them.
    """
    if base_offset is None and path.stem.isdigit():
        base_offset = int(path.stem)
    report = SegmentReport(path, base_offset or 0)
    index_path, time_index_path = path.with_suffix(".index"), path.with_suffix(".timeindex")
    pending = _load_offset_index(index_path, report.base_offset, report.problems)
    expected = base_offset
    # Offsets continuing from batch to batch are judged by the reader (as recovery judges them).
    reader = SegmentReader(
        path, base_offset=base_offset, check_crc=check_crc, chunk_size=chunk_size,
        on_bytes=on_bytes,
    )  # fmt: skip
    for batch in reader:
        header = batch.header
        if expected is None:
            expected = report.base_offset = batch.first_offset
        expected = header.next_offset
        report.batches += 1
        report.records += _record_count(batch)
        if epochs is not None and (epoch_problem := epochs.check(header, path)) is not None:
            report.problems.append(epoch_problem)
        entry = pending.pop(header.position, None)
        if entry is not None and entry.offset != header.last_offset:
            # Kafka's convention: an entry names the last offset of the batch it points at.
            report.problems.append(
                entry.problem(
                    f"says offset {entry.offset}, but the batch there ends at {header.last_offset}"
                )
            )
        if on_batch is not None:
            on_batch(batch)
    report.next_offset = report.base_offset if expected is None else expected
    report.size, report.valid_bytes, report.complete = (
        reader.size,
        reader.valid_end,
        reader.complete,
    )
    report.problems.extend(
        dataclasses.replace(p, offset=report.next_offset) if p.offset is None else p
        for p in reader.problems
    )
    _report_unmatched_entries(pending, report)
    _check_time_index(time_index_path, report)
    report.problems.sort(key=problem_order)
    return report


def _record_count(batch: ScannedBatch) -> int:
    header = batch.header
    if header.magic == MAGIC_V2:
        return header.record_count
    if header.codec_id == 0:
        return 1
    # A compressed magic 0/1 wrapper: its messages are inside (one that cannot be decoded is
    # already reported by the reader).
    try:
        return len(list(LegacyBatch(batch.data).records()))
    except KafkaError:
        return 1


class _IndexEntry(NamedTuple):
    path: Path
    number: int
    offset: int
    log_position: int

    def problem(self, message: str) -> Problem:
        return Problem(
            self.path,
            ProblemKind.INDEX,
            f"entry {self.number} (log position {self.log_position}) {message}",
            self.number * OFFSET_ENTRY.size,
            self.offset,
        )


def read_index_entries(path: Path, entry: struct.Struct) -> tuple[list[tuple[int, int]], int]:
    """The entries of an index file (``OFFSET_ENTRY`` or ``TIME_ENTRY`` layout), and how many
    stray bytes follow the last whole entry. Raises FileNotFoundError if there is none."""
    data = path.read_bytes()
    whole = len(data) - len(data) % entry.size
    return [(a, b) for a, b in entry.iter_unpack(data[:whole])], len(data) - whole


def _load_offset_index(
    path: Path, base_offset: int, problems: list[Problem]
) -> dict[int, _IndexEntry]:
    """The .index entries by the log position they point at; order problems reported."""
    try:
        entries, stray = read_index_entries(path, OFFSET_ENTRY)
    except FileNotFoundError:
        return {}  # indexes are hints the broker rebuilds; a missing one is no damage
    except OSError as exc:
        problems.append(Problem(path, ProblemKind.IO, f"cannot read: {exc}"))
        return {}
    if stray:
        problems.append(
            Problem(
                path,
                ProblemKind.INDEX,
                f"{stray} stray bytes after the last entry (a torn entry)",
                len(entries) * OFFSET_ENTRY.size,
            )
        )
    pending: dict[int, _IndexEntry] = {}
    last_relative, last_position = -1, -1
    for number, (relative, position) in enumerate(entries):
        entry = _IndexEntry(path, number, base_offset + relative, position)
        if relative < 0 or position < 0:
            problems.append(entry.problem("holds a negative offset or position"))
            continue
        if relative <= last_relative:
            problems.append(
                entry.problem(
                    f"is not above the previous entry's offset {base_offset + last_relative}"
                )
            )
        elif position <= last_position:
            problems.append(
                entry.problem(f"is not above the previous entry's log position {last_position}")
            )
        last_relative, last_position = relative, position
        pending.setdefault(position, entry)
    return pending


def _report_unmatched_entries(pending: dict[int, _IndexEntry], report: SegmentReport) -> None:
    """Entries that no batch start matched during the scan."""
    for entry in sorted(pending.values(), key=lambda e: e.number):
        if entry.log_position >= report.valid_bytes and not report.complete:
            continue  # beyond where the scan could read: already reported as such
        if entry.log_position >= report.size:
            message = f"points past the end of the log ({report.size} bytes)"
        else:
            message = "points inside a batch, not at the start of one"
        report.problems.append(entry.problem(message))


def _check_time_index(path: Path, report: SegmentReport) -> None:
    try:
        entries, stray = read_index_entries(path, TIME_ENTRY)
    except FileNotFoundError:
        return
    except OSError as exc:
        report.problems.append(Problem(path, ProblemKind.IO, f"cannot read: {exc}"))
        return
    problems = report.problems
    if stray:
        problems.append(
            Problem(
                path,
                ProblemKind.TIME_INDEX,
                f"{stray} stray bytes after the last entry (a torn entry)",
                len(entries) * TIME_ENTRY.size,
            )
        )
    base, end = report.base_offset, report.next_offset
    last_timestamp, last_offset = None, base
    for number, (timestamp, relative) in enumerate(entries):
        offset = base + relative

        def problem(message: str, number: int = number, offset: int = offset) -> Problem:
            return Problem(
                path,
                ProblemKind.TIME_INDEX,
                f"entry {number} {message}",
                number * TIME_ENTRY.size,
                offset,
            )

        if last_timestamp is not None and timestamp <= last_timestamp:
            problems.append(
                problem(
                    f"has timestamp {timestamp}, not above the previous entry's {last_timestamp}"
                )
            )
        if relative < 0 or (report.complete and offset >= max(end, base + 1)):
            problems.append(
                problem(
                    f"points at offset {offset}, outside the segment's offsets {base}..{end - 1}"
                )
            )
        elif offset < last_offset:
            problems.append(
                problem(f"points at offset {offset}, below the previous entry's {last_offset}")
            )
        last_timestamp, last_offset = timestamp, max(last_offset, offset)
