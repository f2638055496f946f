"""The pipeline on a Spark standalone cluster: the executors apply, the driver only plans.

``kayak pipeline run --master spark://…`` against a master with two one-core workers (see
``tests/fixtures/spark_cluster.py``), SQLite source, PostgreSQL target. The run must verify
source == target, the changes must have been applied by the executors' Python workers (each
task reports the executor it ran in, read from its JVM's command line; ``driver`` would mean
the driver did the writing), and the driver's memory must not grow with the batch: a ten
times larger snapshot leaves the driver's peak memory where it was, because nothing per
change crosses to the driver.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg

from kayak.pipeline.workload import create_orders
from tests.fixtures.spark_cluster import SparkCluster

_WRITERS = re.compile(r"applied by (.+); driver peak memory ([\d,]+) MiB")
_EXECUTOR = re.compile(r"(\S+) \(([\d,]+)\)")


def _run_once(cluster: SparkCluster, rows: int, dsn: str, work: Path) -> tuple[dict[str, int], int]:
    """``pipeline run --once`` of a fresh ``rows``-row table; (changes per writer, driver MiB)."""
    work.mkdir()
    source = work / "shop.db"
    create_orders(str(source), rows)
    result = subprocess.run(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
         "--table", "orders", "--target", dsn, "--work-dir", str(work / "run"),
         "--master", cluster.master_url, "--once"],
        cwd=work, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == f"verified: {rows} rows, source == target", result.stdout
    found = _WRITERS.search(result.stdout)
    assert found is not None, result.stdout
    writers = {
        executor: int(count.replace(",", ""))
        for executor, count in _EXECUTOR.findall(found.group(1))
    }
    return writers, int(found.group(2).replace(",", ""))


def test_the_executors_apply_and_the_driver_stays_flat(
    spark_cluster: SparkCluster, postgres_dsn: str, tmp_path: Path
) -> None:
    base = postgres_dsn.rsplit("/", 1)[0]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "small_copy"')
        conn.execute('CREATE DATABASE "large_copy"')

    small_writers, small_mib = _run_once(spark_cluster, 2_000, f"{base}/small_copy", tmp_path / "s")
    large_writers, large_mib = _run_once(
        spark_cluster, 20_000, f"{base}/large_copy", tmp_path / "l"
    )

    for writers, rows in ((small_writers, 2_000), (large_writers, 20_000)):
        assert sum(writers.values()) == rows
        assert "driver" not in writers, writers
        assert set(writers) <= {"0", "1", "2", "3"}, writers  # executor ids, never the driver
    # With 20,000 rows the keys spread over both executors' tasks.
    assert len(large_writers) == 2, large_writers
    # The old driver-side apply held every change of a batch as Python objects in the driver
    # (tens of MiB for 20,000 rows); now only a few rows of counts cross.
    assert large_mib - small_mib < 16, (small_mib, large_mib)

    with psycopg.connect(f"{base}/large_copy") as conn:
        (count,) = conn.execute("SELECT count(*) FROM orders").fetchone() or (0,)
    assert count == 20_000
    source = sqlite3.connect(tmp_path / "l" / "shop.db")
    assert source.execute("SELECT count(*) FROM orders").fetchone() == (20_000,)
