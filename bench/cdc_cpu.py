"""CPU of the CDC pipeline's processes over a measured interval, from ``/proc``.

Each part of the pipeline is a *group*: a function returning the CPU seconds (user + system)
its processes have used so far. A group that is a process tree counts its live members'
own CPU and, through each member's ``cutime + cstime``, the CPU of its children that have
exited and been reaped (a PostgreSQL backend whose connection closed is reaped by the
postmaster; a Python worker by pyspark's daemon), so nothing that ran in the interval is
lost and nothing is counted twice. :class:`CpuMeter` takes the snapshots and the deltas.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping

from usage import _CLOCK_TICKS, _stat_fields, process_tree

CpuGroup = Callable[[], float]


def _ticks(pid: int, *, own: bool = True, reaped: bool = True) -> int:
    """utime + stime (fields 14-15) and/or cutime + cstime (16-17) of ``pid``; 0 if gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = _stat_fields(pid)
        total = int(fields[11]) + int(fields[12]) if own else 0
        return total + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return 0


def own_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` itself (every thread), not of its children."""
    return _ticks(pid, reaped=False) / _CLOCK_TICKS


def tree_cpu_s(pid: int, *, without_root: bool = False) -> float:
    """CPU seconds of ``pid``'s process tree, reaped children included; ``without_root``:
    all but ``pid``'s own (its children's, live and reaped)."""
    total = 0
    for member in process_tree(pid):
        total += _ticks(member, own=not (without_root and member == pid))
    return total / _CLOCK_TICKS


def this_process_cpu_s() -> float:
    """This process's own CPU seconds (its threads; not the children it has reaped)."""
    times = os.times()
    return times.user + times.system


class CpuMeter:
    """CPU seconds each group used between :meth:`start` and :meth:`stop`."""

    def __init__(self, groups: Mapping[str, CpuGroup]) -> None:
        self.groups = dict(groups)
        self._before: dict[str, float] = {}
        self.used_s: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {name: read() for name, read in self.groups.items()}

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> dict[str, float]:
        after = self._read()
        self.used_s = {name: after[name] - self._before[name] for name in self.groups}
        return self.used_s
