"""``kill -9`` of ``kayak pipeline run`` (every process it started) during the initial
snapshot of a PostgreSQL table, rows deleted, updated and inserted while it is down, then a
restart with ``--once``: the snapshot is taken again, and the target ends equal to the source,
without the rows deleted meanwhile that the first snapshot had already published (issue 15).

The kill comes once the first snapshot's events are on the embedded broker's disk but before
the snapshot ends; the rows deleted while down are among those already published. Each step
of the snapshot's end is tested without Spark in ``tests/pipeline/test_snapshot_crash.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

from tests.cli.test_pipeline_stop import MARKER, assert_nothing_left, processes_with

ROWS = 40_000
FILLER = "x" * 150


def published_bytes(work: Path) -> int:
    """Bytes of change events the embedded broker holds for table ``t`` so far."""
    return sum(f.stat().st_size for f in work.glob("broker/**/*.public.t-0/*.log"))


def test_kill_during_the_snapshot_then_restart_leaves_no_deleted_row(
    postgres_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL, v text)")
        conn.execute("INSERT INTO t SELECT g, g, %s FROM generate_series(1, %s::int) g",
                     (FILLER, ROWS))  # fmt: skip
    work, target = tmp_path / "work", tmp_path / "target.db"
    command = [sys.executable, "-m", "kayak", "pipeline", "run", "--source", postgres_dsn,
               "--table", "public.t", "--target", f"sqlite:{target}", "--work-dir", str(work)]
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER: marker}
    run = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # ~250 bytes per event: a quarter of the snapshot is out, three quarters are not
        while published_bytes(work) < ROWS * 60:
            assert run.poll() is None, f"pipeline exited with {run.returncode}"
            assert time.monotonic() < deadline, "the snapshot never started"
            time.sleep(0.02)
    finally:
        # The pipeline, its broker and Spark, as a crash would take them; again for any
        # process that was being started meanwhile.
        for _ in range(20):
            for pid in processes_with(marker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
            if not processes_with(marker):
                break
        run.wait(30)
    assert_nothing_left(marker)
    assert published_bytes(work) < ROWS * 200, "the snapshot ended before the kill"

    with psycopg.connect(postgres_dsn, autocommit=True) as conn, conn.transaction():
        # ids 1..5,000 come first in the snapshot, so their events were published
        conn.execute("DELETE FROM t WHERE id % 5 = 0 AND id <= 5000")
        conn.execute("UPDATE t SET n = -n WHERE id % 5 = 1 AND id <= 5000")
        conn.execute("INSERT INTO t SELECT g, g, 'new' FROM generate_series(%s::int, %s::int) g",
                     (ROWS + 1, ROWS + 500))  # fmt: skip
    done = subprocess.run([*command, "--once"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    log = (work / "pipeline.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr + log[-4000:]
    assert "taking the snapshot again" in log
    assert f"verified: {ROWS - 1000 + 500} rows, source == target" in done.stdout
    assert_nothing_left(marker)
