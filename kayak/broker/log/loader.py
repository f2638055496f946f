"""Opening a partition directory: which segments there are and whether they can be trusted.

The rules, in the order a start applies them:
- Every segment but the last was sealed when the next one was created (data fsynced, indexes
  saved whole), so it only needs its indexes loaded and its end checked: a few reads. An index
  that is missing or disagrees with its log is rebuilt with a full CRC scan and saved.
- The last segment after an unclean shutdown (kill -9, power loss, an I/O error) is scanned
  with CRC checks; a torn tail, which is all a crash can leave, is cut.
- Anything else is damage no crash explains: a segment with a bad batch in the middle, a
  sealed segment that ends mid-batch, a gap in the offsets (a deleted or truncated file).
  Nothing is cut then; the partition is opened *offline*, with one log line naming the file,
  position and offsets, so an operator can look (``kayak log verify``) before data goes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.files import fsync_directory
from kayak.broker.log.segment import Segment

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedSegments:
    """The segments of one partition directory as a start found them."""

    segments: list[Segment] = field(default_factory=list)
    problem: str | None = None  # set: the partition must stay offline
    cut_bytes: int = 0


def load_segments(directory: Path, index_interval_bytes: int, clean: bool) -> LoadedSegments:
    """Open every segment of ``directory`` in offset order and check it (see module doc)."""
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    loaded = LoadedSegments()
    saved_indexes = False
    for i, base in enumerate(bases):
        segment = Segment(directory, base, index_interval_bytes)
        loaded.segments.append(segment)
        previous = loaded.segments[-2] if i else None
        if previous is not None and previous.next_offset != base:
            loaded.problem = (
                f"{directory}: offsets {previous.next_offset} to {base - 1} are missing "
                f"(between {previous.path.name} and {segment.path.name})"
            )
            return loaded
        last = i == len(bases) - 1
        if last and not clean:
            loaded.problem = _recover_last(segment, loaded)
        elif not segment.load_indexes():
            log.warning("%s: index missing or inconsistent; rebuilding it", segment.path)
            loaded.problem = _rebuild(segment, sealed=not last)
            saved_indexes = True
        if loaded.problem is not None:
            return loaded
    if saved_indexes:
        fsync_directory(directory)
    return loaded


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
