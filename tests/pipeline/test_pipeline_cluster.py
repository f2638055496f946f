"""The pipeline on a Spark standalone cluster: the executors apply, the driver only plans.

``kayak pipeline run --master spark://…`` against a master with two one-core workers (see
``tests/fixtures/spark_cluster.py``), SQLite source, PostgreSQL target, reading the change
topics with Spark's Kafka source (the default; its jars reach the executors through
``spark.jars``); the demo on the same cluster reads them with kayak's data source. The run must
verify source == target, the changes must have been applied by the executors' Python workers
(each task reports the executor it ran in, read from its JVM's command line; ``driver`` would
mean the driver did the writing), and the driver's memory must not grow with the batch: ten
times more changes after the snapshot leave the driver's peak memory (VmHWM, read from /proc
while the one pipeline runs) where it was, because nothing per change crosses to the driver.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from kayak.pipeline.workload import create_orders
from tests.fixtures.spark_cluster import SparkCluster

_WRITERS = re.compile(r"applied by (.+); driver peak memory ([\d,]+) MiB")
_EXECUTOR = re.compile(r"(\S+) \(([\d,]+)\)")
_SNAPSHOT, _MORE = 2_000, 20_000


def _target_rows(dsn: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            (count,) = conn.execute("SELECT count(*) FROM orders").fetchone() or (0,)
            return int(count)
    except psycopg.errors.UndefinedTable:
        return 0


def _wait_for_rows(run: subprocess.Popen[str], dsn: str, rows: int) -> None:
    deadline = time.monotonic() + 300
    while _target_rows(dsn) < rows:
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, f"the target never reached {rows} rows"
        time.sleep(0.5)


def _peak_mib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def _insert_more(source: Path) -> None:
    """_MORE new orders in one source transaction: one large burst of changes."""
    with sqlite3.connect(source) as conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO orders SELECT i, 'Ada', 'new', '1.50', 1, 0.5, 'more', NULL, "
            "'2026-11-26T00:00:00' FROM n",
            (_SNAPSHOT + 1, _SNAPSHOT + _MORE),
        )


def test_the_executors_apply_and_the_driver_stays_flat(
    spark_cluster: SparkCluster, postgres_dsn: str, tmp_path: Path
) -> None:
    base = postgres_dsn.rsplit("/", 1)[0]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "cluster_copy"')
    dsn = f"{base}/cluster_copy"
    source = tmp_path / "shop.db"
    create_orders(str(source), _SNAPSHOT)
    run = subprocess.Popen(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
         "--table", "orders", "--target", dsn, "--work-dir", str(tmp_path / "run"),
         "--master", spark_cluster.master_url],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_rows(run, dsn, _SNAPSHOT)
        small_mib = _peak_mib(run.pid)
        _insert_more(source)
        _wait_for_rows(run, dsn, _SNAPSHOT + _MORE)
        large_mib = _peak_mib(run.pid)
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, stdout + stderr
    assert "(reader: kafka)" in " ".join(stdout.split()), stdout  # the console wraps lines
    rows = _SNAPSHOT + _MORE
    assert stdout.strip().splitlines()[-1] == f"verified: {rows} rows, source == target", stdout
    found = _WRITERS.search(stdout)
    assert found is not None, stdout
    writers = {
        executor: int(count.replace(",", ""))
        for executor, count in _EXECUTOR.findall(found.group(1))
    }
    assert sum(writers.values()) == rows, writers
    assert "driver" not in writers, writers
    # Executor ids, never the driver; with 20,000 keys the tasks spread over both executors.
    assert set(writers) <= {"0", "1", "2", "3"} and len(writers) == 2, writers
    # The old driver-side apply held every change of a batch as Python objects in the driver
    # (tens of MiB for 20,000 rows); now only a few rows of counts cross.
    assert large_mib - small_mib < 16, (small_mib, large_mib)


def test_the_demo_runs_on_a_cluster_with_a_relative_data_dir(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """An executor of a standalone worker runs in a directory of its own, so a relative SQLite
    path handed to it named another file, or none: the pipeline makes every path absolute.
    (In this file, not its own: the cluster fixture starts once per file and worker.)"""
    demo = subprocess.run(
        [sys.executable, "-m", "kayak", "demo", "--rows", "50", "--changes", "200",
         "--master", spark_cluster.master_url, "--data-dir", "relative/demo",
         "--reader", "kayak"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr[-3000:]
    assert "(reader: kayak)" in demo.stdout, demo.stdout
    last = demo.stdout.strip().splitlines()[-1]
    assert last.startswith("verified: ") and last.endswith(" rows, source == target"), last
    # The files are where the relative directory says, from the driver's working directory.
    target = tmp_path / "relative" / "demo" / "target.db"
    (rows,) = sqlite3.connect(target).execute("SELECT count(*) FROM orders").fetchone()
    assert last == f"verified: {rows} rows, source == target"
