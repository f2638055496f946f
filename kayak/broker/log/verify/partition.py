"""One ``TOPIC-PARTITION`` directory: its segments in offset order, and its checkpoints.

:func:`verify_partition` checks each segment with
:func:`~kayak.broker.log.verify.segment.verify_segment`, the offsets from one segment to the
next, the ``log-start-offset`` checkpoint, the ``log-end-offset`` record (the log must reach
it, as a start requires) and the producer snapshot.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.loader import LOG_END, LogEndRecordError, read_log_end
from kayak.broker.log.partition import LOG_START_CHECKPOINT, PRODUCER_SNAPSHOT
from kayak.broker.log.producer_state import ProducerStateFileError, ProducerStateTable
from kayak.broker.log.segment import segment_name
from kayak.broker.log.verify.problems import Problem, ProblemKind, cap_per_file
from kayak.broker.log.verify.reader import DEFAULT_CHUNK_SIZE, ProgressCallback
from kayak.broker.log.verify.segment import LeaderEpochCheck, SegmentReport, verify_segment

# Index problems past this many per file are summed up in one line: a wholly wrong index
# says so once rather than once per entry.
MAX_INDEX_PROBLEMS = 10


@dataclass
class PartitionReport:
    """One partition directory: its segments, the offsets that bound it, its problems."""

    topic: str
    partition: int
    directory: Path
    exists: bool = True
    segments: list[SegmentReport] = field(default_factory=list)
    log_start_offset: int | None = None  # as the broker would compute it on open
    problems: list[Problem] = field(default_factory=list)  # not tied to one segment

    @property
    def all_problems(self) -> list[Problem]:
        return [p for s in self.segments for p in s.problems] + self.problems

    @property
    def ok(self) -> bool:
        return not self.all_problems

    @property
    def batches(self) -> int:
        return sum(s.batches for s in self.segments)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def log_end_offset(self) -> int | None:
        return self.segments[-1].next_offset if self.segments else None


def segment_paths(directory: Path) -> list[Path]:
    """A partition directory's ``.log`` files in offset order (as the broker finds them)."""
    logs = [p for p in directory.glob("*.log") if p.stem.isdigit()]
    return sorted(logs, key=lambda p: int(p.stem))


def verify_partition(
    directory: Path,
    *,
    topic: str | None = None,
    partition: int | None = None,
    leader_epoch: int | None = None,
    check_crc: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_bytes: ProgressCallback | None = None,
) -> PartitionReport:
    """Check every segment of one ``TOPIC-PARTITION`` directory, and its checkpoints.

    ``topic`` and ``partition`` default to what the directory name says; ``leader_epoch`` is
    the partition's current epoch in ``topics.json``, which no stored batch may exceed.
    """
    name, _, index = directory.name.rpartition("-")
    report = PartitionReport(
        name if topic is None else topic,
        int(index) if partition is None and index.isdigit() else partition or 0,
        directory,
    )
    if not directory.is_dir():
        report.exists = False
        return report
    epochs = LeaderEpochCheck(leader_epoch)
    for path in segment_paths(directory):
        segment = verify_segment(
            path, check_crc=check_crc, chunk_size=chunk_size, on_bytes=on_bytes, epochs=epochs
        )
        if report.segments:
            gap = _segment_discontinuity(report.segments[-1], segment)
            if gap is not None:
                segment.problems.insert(0, gap)
        segment.problems = cap_per_file(segment.problems, MAX_INDEX_PROBLEMS * 2)
        report.segments.append(segment)
    _check_log_start(report)
    _check_log_end(report)
    _check_producer_snapshot(report)
    return report


def _segment_discontinuity(previous: SegmentReport, segment: SegmentReport) -> Problem | None:
    expected = previous.next_offset
    if segment.base_offset == expected:
        return None
    if segment.base_offset > expected:
        message = (
            f"gap: offsets {expected}..{segment.base_offset - 1} are missing between "
            f"{previous.path.name} and this segment (expected {segment_name(expected)}.log)"
        )
    else:
        message = (
            f"overlap: this segment starts at offset {segment.base_offset}, but "
            f"{previous.path.name} ends at offset {expected - 1}"
        )
    return Problem(segment.path, ProblemKind.OFFSETS, message, 0, expected)


def _read_checkpoint(path: Path, problems: list[Problem]) -> int | None:
    """A one-integer text checkpoint; None if absent or unreadable (then reported)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        problems.append(Problem(path, ProblemKind.CHECKPOINT, f"unreadable: {exc}"))
        return None
    try:
        return int(text.strip())
    except ValueError:
        problems.append(
            Problem(path, ProblemKind.CHECKPOINT, f"{text.strip()[:40]!r} is not an offset")
        )
        return None


def _check_log_start(report: PartitionReport) -> None:
    first = report.segments[0] if report.segments else None
    first_base = first.base_offset if first is not None else 0
    log_end = report.log_end_offset or 0
    path = report.directory / LOG_START_CHECKPOINT
    start = _read_checkpoint(path, report.problems)
    if start is None and not path.exists():
        # The broker then starts the log at offset 0: a first segment beyond that lost data.
        if first is not None and first_base > 0:
            report.problems.append(
                Problem(
                    first.path,
                    ProblemKind.OFFSETS,
                    f"the first segment starts at offset {first_base}, but there is no "
                    f"{LOG_START_CHECKPOINT} checkpoint (the log starts at 0): offsets "
                    f"0..{first_base - 1} are missing (expected {segment_name(0)}.log)",
                    0,
                    0,
                )
            )
        report.log_start_offset = first_base
        return
    if start is None:
        report.log_start_offset = first_base
        return
    if start < first_base:
        report.problems.append(
            Problem(
                path,
                ProblemKind.CHECKPOINT,
                f"log start offset {start} is below the first segment's base offset {first_base}: "
                f"offsets {start}..{first_base - 1} are missing",
                offset=start,
            )
        )
    elif start > log_end:
        report.problems.append(
            Problem(
                path,
                ProblemKind.CHECKPOINT,
                f"log start offset {start} is past the log end offset {log_end}",
                offset=start,
            )
        )
    report.log_start_offset = max(start, first_base)


def _check_log_end(report: PartitionReport) -> None:
    """The log reaches the end the broker recorded (a start takes it offline otherwise)."""
    path = report.directory / LOG_END
    try:
        recorded = read_log_end(report.directory)
    except (LogEndRecordError, OSError) as exc:
        report.problems.append(Problem(path, ProblemKind.CHECKPOINT, f"unreadable: {exc}"))
        return
    found = report.log_end_offset or 0
    if recorded is None or found >= recorded.offset:
        return
    last_missing = recorded.offset - 1
    lost = f"offset {found} is" if found == last_missing else f"offsets {found}..{last_missing} are"
    missing = f"the log ends at offset {found}, but reached {recorded}: {lost} missing"
    last = report.segments[-1] if report.segments else None
    torn = [i for i, p in enumerate(last.problems) if p.kind is ProblemKind.TORN] if last else []
    if last is not None and torn:  # the file is cut mid-batch: say so in the same line
        problem = last.problems[torn[-1]]
        last.problems[torn[-1]] = dataclasses.replace(
            problem, message=f"{problem.message}; {missing}"
        )
        return
    report.problems.append(_missing_tail(report, found, missing))


def _missing_tail(report: PartitionReport, found: int, missing: str) -> Problem:
    expected = report.directory / f"{segment_name(found)}.log"
    if report.segments:
        last = report.segments[-1].path.name
        where = f"{last} ends at offset {found} and no {expected.name} follows it"
    else:
        where = "there are no segment files"
    return Problem(expected, ProblemKind.OFFSETS, f"{where}: {missing}", offset=found)


def _check_producer_snapshot(report: PartitionReport) -> None:
    path = report.directory / PRODUCER_SNAPSHOT
    if not path.exists():
        return
    try:
        ProducerStateTable.load(path)  # reads only
    except (ProducerStateFileError, OSError, ValueError) as exc:
        report.problems.append(Problem(path, ProblemKind.SNAPSHOT, str(exc)))
