"""Opening a partition directory: which segments there are and whether they can be trusted.

The rules, in the order a start applies them:
- A replacement of segments by their cleaned copy (the log cleaner's) that a crash
  interrupted is finished if it had committed (``<base>.log.swap`` exists) and undone
  otherwise, before anything else is looked at (``cleaner.swap.recover_swaps``).
- Every segment but the last was sealed when the next one was created (data fsynced, indexes
  saved whole). A roll also records each sealed segment's size, end offset and largest
  timestamp in ``sealed-segments``; a sealed segment found there with the size it had is
  trusted without being opened (its indexes load on first use, checked against the log, see
  ``Segment.ensure_indexes``), so a start opens one file per partition, not one per segment.
  Any other sealed segment (not listed, or its size changed) is checked now: its indexes
  loaded and its end checked, a few reads; an index that is missing or disagrees with its
  log is rebuilt with a full CRC scan and saved; the record is then rewritten.
- The last segment after an unclean shutdown (kill -9, power loss, an I/O error) is scanned
  with CRC checks; a torn tail, which is all a crash can leave, is cut.
- Anything else is damage no crash explains: a segment with a bad batch in the middle, a
  sealed segment that ends mid-batch, a gap in the offsets (a deleted or truncated file).
  Nothing is cut then; the partition is opened *offline*, with one log line naming the file,
  position and offsets, so an operator can look (``kayak log verify``) before data goes.
- A log that ends before where it is known to have reached is missing its tail (the newest
  segment files deleted or cut, a partial restore), and is taken offline the same way. Where
  it reached is kept in ``log-end-offset`` (:class:`RecordedEnd`): the exact end, written at a
  clean stop; while running, a lower bound of what was acknowledged: a sealed segment's end at
  each roll, and the durable offset at most every ``LOG_END_INTERVAL_S`` seconds. A torn tail
  below the recorded end is not cut either: those bytes had been fsynced, so no crash tore
  them. A directory without the record (written by an older version) is not checked.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.cleaner.swap import recover_swaps
from kayak.broker.log.files import fsync_directory, write_atomically
from kayak.broker.log.open_files import OPEN_FILES, OpenFiles
from kayak.broker.log.recovery import SegmentScan
from kayak.broker.log.segment import SealedFacts, Segment, segment_name

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedSegments:
    """The segments of one partition directory as a start found them."""

    segments: list[Segment] = field(default_factory=list)
    problem: str | None = None  # set: the partition must stay offline
    cut_bytes: int = 0


SEALED_SEGMENTS = "sealed-segments"
_SEALED_HEADER = "kayak-sealed-segments 1"


def load_segments(
    directory: Path,
    index_interval_bytes: int,
    clean: bool,
    files: OpenFiles = OPEN_FILES,
    recorded_end: RecordedEnd | None = None,
) -> LoadedSegments:
    """Find every segment of ``directory`` in offset order and check it (see module doc).

    ``recorded_end``: where the log is known to have reached; a log found shorter is offline.
    A replacement of segments by their cleaned copy that a crash interrupted is finished
    (or undone) first (see ``cleaner.swap``).
    """
    finished_swaps = recover_swaps(directory)
    sizes = _segment_sizes(directory)
    bases = sorted(sizes)
    # A finished replacement changed segments the record may still describe: check them all.
    known = {} if finished_swaps else read_sealed_segments(directory)
    loaded = LoadedSegments()
    saved_indexes = checked_sealed = False
    for i, base in enumerate(bases):
        last = i == len(bases) - 1
        facts = known.get(base)
        trusted = not last and facts is not None and facts.size == sizes[base]
        segment = Segment(directory, base, index_interval_bytes, files,
                          sealed=facts if trusted else None)  # fmt: skip
        loaded.segments.append(segment)
        previous = loaded.segments[-2] if i else None
        if previous is not None and previous.next_offset != base:
            loaded.problem = (
                f"{directory}: offsets {previous.next_offset} to {base - 1} are missing "
                f"(between {previous.path.name} and {segment.path.name})"
            )
            return loaded
        if trusted:
            continue
        expected = recorded_end if last else None
        if last and not clean:
            loaded.problem = _recover_last(segment, loaded, expected)
        elif not segment.load_indexes():
            log.warning("%s: index missing or inconsistent; rebuilding it", segment.path)
            loaded.problem = _rebuild(segment, not last, expected)
            saved_indexes = True
        if loaded.problem is not None:
            return loaded
        if not last:
            segment.sealed = checked_sealed = True
    if recorded_end is not None:  # checked before anything is written
        loaded.problem = _missing_tail(directory, loaded.segments, recorded_end)
        if loaded.problem is not None:
            return loaded
    if saved_indexes:
        fsync_directory(directory)
    if checked_sealed:
        write_sealed_segments(directory, loaded.segments[:-1])
    return loaded


def _segment_sizes(directory: Path) -> dict[int, int]:
    """Base offset -> size of every ``.log`` file named as a segment (one stat each)."""
    sizes: dict[int, int] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            stem, dot, suffix = entry.name.partition(".")
            if suffix == "log" and dot and stem.isdigit():
                sizes[int(stem)] = entry.stat().st_size
    return sizes


def read_sealed_segments(directory: Path) -> dict[int, SealedFacts]:
    """The recorded facts of sealed segments by base offset; empty if none can be trusted.

    The record is only an optimisation (a segment not in it is checked at start), so a
    missing, torn or unreadable file simply counts as empty.
    """
    try:
        fd = os.open(os.path.join(directory, SEALED_SEGMENTS), os.O_RDONLY)
    except FileNotFoundError:
        return {}
    try:
        lines = os.read(fd, os.fstat(fd).st_size).decode("ascii", "replace").splitlines()
    finally:
        os.close(fd)
    if not lines or lines[0] != _SEALED_HEADER or lines[-1] != "end":
        return {}
    known: dict[int, SealedFacts] = {}
    try:
        for line in lines[1:-1]:
            base, size, next_offset, max_timestamp = (int(f) for f in line.split())
            known[base] = SealedFacts(size, next_offset, max_timestamp)
    except ValueError:
        return {}
    return known


def write_sealed_segments(
    directory: Path, sealed: Sequence[Segment], durable: bool = False
) -> None:
    """Record the facts of ``sealed`` (segments that never change again) for the next start.

    Not fsynced unless ``durable``: if a crash loses the file, the next start checks those
    segments instead. Before segments are *replaced* (the log cleaner), the record must
    durably stop vouching for them first: a cleaned copy can have the same size as the
    segment it replaces, and stale facts would then be trusted.
    """
    lines = [_SEALED_HEADER]
    lines += [f"{s.base_offset} {s.size} {s.next_offset} {s.max_timestamp}" for s in sealed]
    lines.append("end")
    write_atomically(directory / SEALED_SEGMENTS, "\n".join(lines) + "\n", durable=durable)


def _recover_last(
    segment: Segment, loaded: LoadedSegments, expected: RecordedEnd | None
) -> str | None:
    scan = segment.recover(segment.base_offset)
    if scan.problem is None:
        return None
    if scan.damage_inside:
        return (
            f"{segment.path}: damaged at position {scan.valid_end} (offset {scan.next_offset}) "
            f"with valid batches after it: {scan.problem}"
        )
    if expected is not None and scan.next_offset < expected.offset:
        return _cut_short(segment, scan, expected)
    cut = segment.size - scan.valid_end
    segment.truncate_to(scan.valid_end)
    loaded.cut_bytes = cut
    log.warning(
        "%s: recovered to offset %d, cut %d bytes of torn tail at position %d (%s)",
        segment.path, scan.next_offset, cut, scan.valid_end, scan.problem,
    )  # fmt: skip
    return None


def _rebuild(segment: Segment, sealed: bool, expected: RecordedEnd | None) -> str | None:
    scan = segment.recover(segment.base_offset)
    cut_short = expected is not None and scan.next_offset < expected.offset
    if scan.problem is not None and cut_short and not scan.damage_inside:
        assert expected is not None
        return _cut_short(segment, scan, expected)
    if scan.problem is not None:
        return (
            f"{segment.path}: damaged at position {scan.valid_end} (offset {scan.next_offset}): "
            f"{scan.problem}"
        )
    if sealed:
        segment.save_indexes()
    return None


# -- where the log ended -------------------------------------------------------------------

LOG_END = "log-end-offset"
_LOG_END_HEADER = "kayak-log-end 1"
# How often, at most, the durable offset is recorded while appends go on: what a crash loses
# from the check (records acknowledged since), against one small file write per interval
# per partition being written to.
LOG_END_INTERVAL_S = 2.0


class LogEndRecordError(ValueError):
    """``log-end-offset`` exists but does not hold a record."""


@dataclass(frozen=True, slots=True)
class RecordedEnd:
    """Where a partition's log is known to have reached, as ``log-end-offset`` keeps it.

    ``clean``: written at a clean stop, the exact end; otherwise a lower bound written while
    running (everything below ``offset`` was on disk).
    """

    offset: int
    clean: bool

    def __str__(self) -> str:
        how = "at the last clean stop" if self.clean else "as durable"
        return f"offset {self.offset} (recorded {how} in {LOG_END})"


def read_log_end(directory: Path) -> RecordedEnd | None:
    """The record in ``directory``; None if there is none. Raises :class:`LogEndRecordError`
    (or ``OSError``) for one that cannot be read."""
    try:
        text = (directory / LOG_END).read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) != 3 or lines[0] != _LOG_END_HEADER or lines[2] != "end":
        raise LogEndRecordError(f"{directory / LOG_END}: not a log end record: {text[:60]!r}")
    offset, _, kind = lines[1].partition(" ")
    if not offset.isdigit() or kind not in ("clean", "durable"):
        raise LogEndRecordError(f"{directory / LOG_END}: not a log end record: {lines[1]!r}")
    return RecordedEnd(int(offset), kind == "clean")


def write_log_end(directory: Path, end: RecordedEnd) -> None:
    """Replace the record atomically (temp file + rename), without fsyncs of its own.

    A power loss may keep the old record (a lower offset: a weaker check, never a false one)
    or, on some file systems, leave it unreadable (then the next start does not check).
    """
    kind = "clean" if end.clean else "durable"
    text = f"{_LOG_END_HEADER}\n{end.offset} {kind}\nend\n"
    write_atomically(directory / LOG_END, text, durable=False)


class LogEndRecorder:
    """Keeps one partition's ``log-end-offset`` current, never moving it back."""

    def __init__(self, directory: Path, interval_s: float = LOG_END_INTERVAL_S) -> None:
        self.directory = directory
        self.interval_s = interval_s
        self.recorded: RecordedEnd | None = None
        self._written_at = -math.inf

    def load(self) -> RecordedEnd | None:
        """Read the record a start checks against; one that cannot be read is not used."""
        try:
            self.recorded = read_log_end(self.directory)
        except (LogEndRecordError, OSError) as exc:
            log.warning("%s: %s; the log end is not checked at this start", self.directory, exc)
            self.recorded = None
        return self.recorded

    def durable(self, offset: int, now: bool = False) -> None:
        """Everything below ``offset`` is on disk: record it if it is further than the record
        and (unless ``now``) the last write is ``interval_s`` old."""
        if offset <= (self.recorded.offset if self.recorded is not None else 0):
            return
        if not now and time.monotonic() - self._written_at < self.interval_s:
            return
        self._write(RecordedEnd(offset, clean=False))

    def stopped(self, end: int) -> None:
        """A clean stop: everything up to ``end`` is sealed on disk; record it exactly."""
        if self.recorded != RecordedEnd(end, clean=True):
            self._write(RecordedEnd(end, clean=True))

    def _write(self, end: RecordedEnd) -> None:
        try:
            write_log_end(self.directory, end)
        except OSError as exc:  # the check gets weaker; nothing is lost
            log.warning("%s: %s not written: %s", self.directory.name, LOG_END, exc)
            return
        self.recorded = end
        self._written_at = time.monotonic()


def _missing_tail(directory: Path, segments: list[Segment], expected: RecordedEnd) -> str | None:
    """Why the log, whole as far as it goes, ends before ``expected``; None if it does not."""
    found = segments[-1].next_offset if segments else 0
    if found >= expected.offset:
        return None
    if segments:
        last = segments[-1]
        where = (
            f"{last.path.name} ends at offset {found} ({last.size} bytes) and no segment follows "
            f"it (expected {segment_name(found)}.log)"
        )
    else:
        where = "there are no segment files"
    return (
        f"{directory}: the log ends at offset {found}, but reached {expected}: "
        f"{_offsets(found, expected.offset)} missing; {where}"
    )


def _cut_short(segment: Segment, scan: SegmentScan, expected: RecordedEnd) -> str:
    """The last segment stops mid-batch below where the log is known to have reached."""
    return (
        f"{segment.path.parent}: the log ends at offset {scan.next_offset}, but reached "
        f"{expected}: {_offsets(scan.next_offset, expected.offset)} missing; "
        f"{segment.path.name} is cut at position {scan.valid_end} of {segment.size} "
        f"({scan.problem})"
    )


def _offsets(first: int, end: int) -> str:
    """``[first, end)`` as a message says it, with its verb."""
    return f"offset {first} is" if end == first + 1 else f"offsets {first} to {end - 1} are"
