"""What a server process uses, from /proc: CPU seconds and resident memory, its children included.

The broker benchmarks print every broker's CPU per operation beside every rate: the user +
system CPU time (``utime + stime``) of the server process and of every process under it over
the measured interval, divided by the operations done in it. Resident memory is ``VmRSS``
summed the same way (pages shared between the processes are counted in each: an upper bound).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MiB = 1024 * 1024


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it that is alive now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(_stat_fields(int(entry.name))[1])  # field 4: ppid
            children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(children.get(current, []))
    return tree


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` (all threads) and its live children."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(member)
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15: utime, stime
    return total / _CLOCK_TICKS


def resident_bytes(pid: int) -> int:
    """Resident memory (VmRSS) of ``pid`` and its live children, in bytes."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{member}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


class PeakResident:
    """The highest resident memory of a server seen while a ``with`` block runs (sampled)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, resident_bytes(self.pid))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakResident:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(OSError):
            self.peak = max(self.peak, resident_bytes(self.pid))


def per_operation_us(cpu_seconds: float, operations: float) -> float:
    """CPU microseconds per operation (NaN when nothing was done)."""
    return cpu_seconds / operations * 1e6 if operations else float("nan")
