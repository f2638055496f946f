"""Opening a partition directory: which segments there are and whether they can be trusted.

The rules, in the order a start applies them:
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
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.files import fsync_directory, write_atomically
from kayak.broker.log.open_files import OPEN_FILES, OpenFiles
from kayak.broker.log.segment import SealedFacts, Segment

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
    directory: Path, index_interval_bytes: int, clean: bool, files: OpenFiles = OPEN_FILES
) -> LoadedSegments:
    """Find every segment of ``directory`` in offset order and check it (see module doc)."""
    sizes = _segment_sizes(directory)
    bases = sorted(sizes)
    known = read_sealed_segments(directory)
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
        if last and not clean:
            loaded.problem = _recover_last(segment, loaded)
        elif not segment.load_indexes():
            log.warning("%s: index missing or inconsistent; rebuilding it", segment.path)
            loaded.problem = _rebuild(segment, sealed=not last)
            saved_indexes = True
        if loaded.problem is not None:
            return loaded
        if not last:
            segment.sealed = checked_sealed = True
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


def write_sealed_segments(directory: Path, sealed: Sequence[Segment]) -> None:
    """Record the facts of ``sealed`` (segments that never change again) for the next start.

    Not fsynced: if a crash loses the file, the next start checks those segments instead.
    """
    lines = [_SEALED_HEADER]
    lines += [f"{s.base_offset} {s.size} {s.next_offset} {s.max_timestamp}" for s in sealed]
    lines.append("end")
    write_atomically(directory / SEALED_SEGMENTS, "\n".join(lines) + "\n", durable=False)


def _recover_last(segment: Segment, loaded: LoadedSegments) -> str | None:
    scan = segment.recover(segment.base_offset)
    if scan.problem is None:
        return None
    if scan.damage_inside:
        return (
            f"{segment.path}: damaged at position {scan.valid_end} (offset {scan.next_offset}) "
            f"with valid batches after it: {scan.problem}"
        )
    cut = segment.size - scan.valid_end
    segment.truncate_to(scan.valid_end)
    loaded.cut_bytes = cut
    log.warning(
        "%s: recovered to offset %d, cut %d bytes of torn tail at position %d (%s)",
        segment.path, scan.next_offset, cut, scan.valid_end, scan.problem,
    )  # fmt: skip
    return None


def _rebuild(segment: Segment, sealed: bool) -> str | None:
    scan = segment.recover(segment.base_offset)
    if scan.problem is not None:
        return (
            f"{segment.path}: damaged at position {scan.valid_end} (offset {scan.next_offset}): "
            f"{scan.problem}"
        )
    if sealed:
        segment.save_indexes()
    return None
