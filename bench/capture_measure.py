"""One measured capture run of bench/cdc_capture.py: a capturer (kayak's or Debezium's) is
following ``orders``; the workload runs as fast as the source takes it; the clock runs from
the workload's start (its first change) until the topic's end offset took its last value
(the last change's record, or its commit marker or tombstone, is in the log).

The topic's end offsets are polled every :data:`POLL_S` with one admin client; each time they
move, the CPU of every process group is read, so the CPU counted is what was used up to the
last change reaching the topic (not what an idle JVM burns while the end is being confirmed).
The end is confirmed when the offsets have not moved for ``quiet_s`` past the lower bound
(snapshot + changes: every change is at least one record).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cdc_cpu import own_cpu_s, tree_cpu_s

from kayak.client.sync import Admin
from kayak.client.types import TopicPartition

POLL_S = 0.1
CpuGroup = Callable[[], float]


def end_offset(admin: Admin, topic: str) -> int:
    """The sum of ``topic``'s partitions' end offsets; 0 while it does not exist."""
    if topic not in set(admin.list_topics()):
        return 0
    partitions = admin.describe_topics([topic])[topic].partitions
    tps = [TopicPartition(topic, p.partition) for p in partitions]
    return sum(info.offset for info in admin.list_offsets({tp: -1 for tp in tps}).values())


@dataclass(frozen=True)
class Settled:
    """The topic's end offset once it stopped moving, when it took that value, and the CPU
    seconds of every group read then."""

    offset: int
    at: float  # time.monotonic()
    cpu_s: dict[str, float]


def read_cpu(groups: Mapping[str, CpuGroup]) -> dict[str, float]:
    return {name: read() for name, read in groups.items()}


def wait_settled(
    admin: Admin, topic: str, at_least: int, groups: Mapping[str, CpuGroup], *,
    quiet_s: float, timeout_s: float, alive: Callable[[], bool],
) -> Settled:  # fmt: skip
    """Poll ``topic``'s end offset until it is ``at_least`` and has not moved for
    ``quiet_s``; fails after ``timeout_s``, or as soon as the capturer is not ``alive``."""
    last = Settled(-1, time.monotonic(), read_cpu(groups))
    deadline = time.monotonic() + timeout_s
    while True:
        offset = end_offset(admin, topic)
        now = time.monotonic()
        if offset != last.offset:
            last = Settled(offset, now, read_cpu(groups))
        elif offset >= at_least and now - last.at >= quiet_s:
            return last
        if now > deadline or not alive():
            state = "timed out" if alive() else "the capturer exited"
            raise RuntimeError(f"{topic}: end offset {offset:,}, expected >= {at_least:,}: {state}")
        time.sleep(POLL_S)


class CaptureBackends:
    """The source server's backends serving the capture (its slot's decoding: a walsender for
    Debezium, a query backend for kayak), told from the workload's by their application name
    (the workload sets none). Looked up once the capture runs; one that exits keeps the CPU
    last read from it."""

    def __init__(self, admin_dsn: str, database: str) -> None:
        import psycopg

        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name <> ''",
                (database,),
            ).fetchall()
        self.pids = [int(pid) for (pid,) in rows]
        self._seen = {pid: own_cpu_s(pid) for pid in self.pids}

    def cpu_s(self) -> float:
        for pid in self.pids:
            with contextlib.suppress(OSError):
                self._seen[pid] = max(self._seen[pid], own_cpu_s(pid))
        return sum(self._seen.values())


def capture_groups(
    capturer_pid: int, broker_pid: int, postmaster: int, backends: CaptureBackends
) -> dict[str, CpuGroup]:
    """The CPU groups of a capture run (see bench/cdc_capture.py's column names)."""
    return {
        "capturer": lambda: tree_cpu_s(capturer_pid),
        "broker": lambda: tree_cpu_s(broker_pid),
        "capture backends": backends.cpu_s,
        # The rest of the source server: the workload's backend, WAL writer, checkpointer...
        "source server": lambda: tree_cpu_s(postmaster) - backends.cpu_s(),
    }
