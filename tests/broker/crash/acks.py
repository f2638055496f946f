"""What the broker acknowledged, kept where a ``kill -9`` of the broker cannot reach it.

Each producer process appends its acknowledgements to an :class:`AckFile` and the group member
its acknowledged commits to a :class:`CommitLog`, flushed as they go: the broker dies, the
clients do not, and their record of what was acknowledged must outlive the broker. The harness
reads both back after the round (:func:`read_ack_file`, :func:`read_commit_file`) and watches
the live :class:`Counters` while the round runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TextIO


class Ack(NamedTuple):
    partition: int
    offset: int
    record_id: bytes
    size: int


class AckFile:
    """Appends what the broker acknowledged to a file, flushed as it goes.

    Lines: ``A partition offset id size`` (acknowledged), ``F id error`` (delivery failed),
    ``X error`` (the producer stopped on a fatal error), ``D sent acked failed unfinished``
    (the producer's last line).
    """

    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", encoding="ascii")  # noqa: SIM115 - closed by close()
        self.sent = self.acked = self.failed = 0
        self._dirty = False

    def ack(self, partition: int, offset: int, record_id: bytes, size: int) -> None:
        self._file.write(f"A {partition} {offset} {record_id.decode()} {size}\n")
        self.acked += 1
        self._dirty = True

    def fail(self, record_id: bytes, error: object) -> None:
        message = " ".join(str(error).split())
        self._file.write(f"F {record_id.decode()} {message}\n")
        self.failed += 1
        self._dirty = True

    def fatal(self, error: object) -> None:
        self._file.write("X " + " ".join(str(error).split()) + "\n")
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self._file.flush()
            self._dirty = False

    def close(self, unfinished: int) -> None:
        self._file.write(f"D {self.sent} {self.acked} {self.failed} {unfinished}\n")
        self._file.close()


@dataclass
class AckFileContents:
    acks: list[Ack] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    done: tuple[int, ...] | None = None


def read_ack_file(path: Path) -> AckFileContents:
    contents = AckFileContents()
    text = path.read_text(encoding="ascii") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # being written
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "A":
            partition, offset, record_id, size = rest.split()
            contents.acks.append(Ack(int(partition), int(offset), record_id.encode(), int(size)))
        elif kind == "F":
            contents.failures.append(rest)
        elif kind == "X":
            contents.fatal.append(rest)
        elif kind == "D":
            contents.done = tuple(int(n) for n in rest.split())
    return contents


class CommitLog:
    """Appends the group's commits to a file: ``C topic partition offset time`` for each
    partition of an acknowledged commit (flushed at once), ``E time error`` for a failed one."""

    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", encoding="ascii")  # noqa: SIM115 - closed by close()

    def committed(self, offsets: Iterable[tuple[str, int, int]], when: float) -> None:
        for topic, partition, offset in offsets:
            self._file.write(f"C {topic} {partition} {offset} {when:.3f}\n")
        self._file.flush()

    def failed(self, error: object, when: float) -> None:
        self._file.write(f"E {when:.3f} " + " ".join(str(error).split()) + "\n")

    def close(self) -> None:
        self._file.close()


def read_commit_file(path: Path) -> list[tuple[str, int, int]]:
    """The acknowledged commits in the order they were acknowledged."""
    commits = []
    text = path.read_text(encoding="ascii") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if line.startswith("C ") and line.endswith("\n"):
            _, topic, partition, offset, _when = line.split()
            commits.append((topic, int(partition), int(offset)))
    return commits


@dataclass
class Counters:
    """Shared with a child process (``RawValue``s): records and bytes acknowledged (a
    producer), records consumed and commits acknowledged (the group member)."""

    records: ctypes.c_longlong
    bytes: ctypes.c_longlong
    commits: ctypes.c_longlong
