"""The CDC benchmark's PostgreSQL: a source cluster and a target cluster on this machine.

Two clusters, not one: the CPU of each server is then read whole from its postmaster's
process tree (backends, background writers, autovacuum, and the backends that have exited),
and the target's apply is never counted as the source's work. The capture's side in the
source server, the backends decoding the replication slot, are read on their own.

Each run makes databases named after the reader and the run, and the pipeline's slot is
named after its database (``kayak_<database>``), so no two runs or databases share a slot;
:func:`drop_database` drops the slots with the database.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cdc_cpu import own_cpu_s, tree_cpu_s
from cdc_workloads import PG_DDL, pg_workload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def start_clusters() -> tuple[Any, Any]:
    """(source, target) clusters, started fresh (initdb, logical WAL, fsync off as in tests)."""
    from tests.fixtures.postgres import find_bin_dir, start_cluster

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL not installed (make test installs it)")
    source = start_cluster(bin_dir)
    try:
        return source, start_cluster(bin_dir, wal_level="replica")
    except BaseException:
        source.stop()
        raise


def postmaster_pid(cluster: Any) -> int:
    """The cluster's postmaster: the parent of a backend."""
    import psycopg

    from kayak.pipeline.session import parent_of

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    parent = parent_of(int(row[0]))
    assert parent is not None
    return parent


def create_database(cluster: Any, name: str, *, orders_rows: int = 0) -> str:
    """A new database ``name``; with ``orders_rows``, the source's ``orders`` table seeded
    with the workload's insert-heavy mix. Returns its URL."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = str(cluster.dsn(name))
    if orders_rows:
        with psycopg.connect(dsn) as conn:
            conn.execute(PG_DDL)
        pg_workload(dsn, orders_rows, seed=3)
    return dsn


def checkpoint(cluster: Any) -> None:
    """Write out what setting up the run dirtied (seeding, CREATE DATABASE), so the
    checkpointer's work for it does not land in the measured interval."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("CHECKPOINT")


def drop_database(cluster: Any, name: str) -> None:
    """Drop a run's database and its replication slots (slots are the cluster's: one left
    behind keeps its WAL and takes one of the cluster's few)."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active_pid IS NOT NULL", (name,))  # fmt: skip
        for (slot,) in admin.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchall():
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The capture's connections say who they are (libpq's application_name, set in the source
# URL the pipeline is given), so the backends decoding its slot can be told apart.
CAPTURE_APPLICATION = "kayak_bench_capture"


def capture_url(dsn: str) -> str:
    """``dsn`` with the capture's application name."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={CAPTURE_APPLICATION}"


def capture_backends(cluster: Any) -> list[int]:
    """The backends (and walsender, while a snapshot is taken) of the capture's connections."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (CAPTURE_APPLICATION,),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


class SourceServer:
    """CPU of the source cluster, split: the capture's backends, which decode the slot's
    WAL (``pg_logical_slot_peek_binary_changes``), and the rest (the source's own work).
    Backends are looked up at each reading; one that has exited keeps the CPU last read
    from it (the postmaster's reaped CPU still holds it, so the rest stays right)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.postmaster = postmaster_pid(cluster)
        self._seen: dict[int, float] = {}

    def capture_cpu_s(self) -> float:
        for pid in capture_backends(self.cluster):
            self._seen[pid] = max(self._seen.get(pid, 0.0), own_cpu_s(pid))
        for pid in self._seen:
            self._seen[pid] = max(self._seen[pid], own_cpu_s(pid))
        return sum(self._seen.values())

    def own_cpu_s(self) -> float:
        return tree_cpu_s(self.postmaster) - self.capture_cpu_s()
