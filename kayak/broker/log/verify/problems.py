"""What verification finds: :class:`Problem` values, their kinds, and how a report lists them.

Every other module of :mod:`kayak.broker.log.verify` reports through these; this one imports
none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from kayak.errors import KayakError


class DataDirError(KayakError):
    """The directory cannot be verified at all: missing, not a data directory, no such topic."""


class ProblemKind(StrEnum):
    """What kind of damage a :class:`Problem` is."""

    CATALOG = "catalog"  # topics.json unreadable, or a partition directory it does not know
    CORRUPT = "corrupt"  # a batch fails its CRC or its header contradicts itself
    TORN = "torn"  # the file ends inside a batch (or in stray bytes after the last one)
    OFFSETS = "offsets"  # a gap or an overlap in offsets, inside a segment or between two
    INDEX = "index"  # an .index entry that does not match the log
    TIME_INDEX = "timeindex"  # a .timeindex entry out of order or outside its segment
    CHECKPOINT = "checkpoint"  # log-start-offset unreadable or out of range
    SNAPSHOT = "snapshot"  # producer-state.snapshot unreadable
    IO = "io"  # a file that cannot be read at all


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong, and where: the file, the byte position in it, and the offset."""

    path: Path
    kind: ProblemKind
    message: str
    position: int | None = None
    offset: int | None = None

    def __str__(self) -> str:
        where = [str(self.path)]
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{', '.join(where)}: {self.kind.value}: {self.message}"


# -- ordering and capping ------------------------------------------------------------------

_FILE_ORDER = {".log": 0, ".index": 1, ".timeindex": 2}


def problem_order(problem: Problem) -> tuple[int, int]:
    """Sort key: a segment's problems by file (log, index, time index), then by position."""
    position = -1 if problem.position is None else problem.position
    return _FILE_ORDER.get(problem.path.suffix, 3), position


def cap_per_file(problems: list[Problem], limit: int) -> list[Problem]:
    """At most ``limit`` problems per file, then one line saying how many more there are."""
    kept: list[Problem] = []
    counts: dict[Path, int] = {}
    for problem in problems:
        counts[problem.path] = counts.get(problem.path, 0) + 1
        if counts[problem.path] <= limit:
            kept.append(problem)
    for path, count in counts.items():
        if count > limit:
            kind = next(p.kind for p in problems if p.path == path)
            kept.append(Problem(path, kind, f"... and {count - limit} more problems in this file"))
    return kept
