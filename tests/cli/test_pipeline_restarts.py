"""``kayak pipeline run`` rides out its databases restarting under load: the source's server
restarted (capture reconnects and resumes at its slot), then the target's (the apply reconnects
and redoes its transaction). Stopped with SIGTERM, it catches up, verifies source == target and
exits 0.

Each database is in a private cluster of this test (never the shared test server, which other
tests use at the same time), so each can be restarted on its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.cli.test_pipeline_stop import MARKER, assert_nothing_left
from tests.fixtures.postgres import PostgresCluster, find_bin_dir, start_cluster
from tests.pipeline.test_capture_reconnect import Writer, restart, wait_for


@pytest.fixture
def clusters() -> Iterator[tuple[PostgresCluster, PostgresCluster]]:
    """Two private clusters, the source's and the target's, each with a database ``db``."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL binaries not found (`make test` installs them)")
    started: list[PostgresCluster] = []
    try:
        for _ in range(2):
            started.append(start_cluster(bin_dir))
            with psycopg.connect(started[-1].dsn(), autocommit=True) as admin:
                admin.execute("CREATE DATABASE db")
        yield started[0], started[1]
    finally:
        for cluster in started:
            cluster.stop()


def target_rows(dsn: str) -> int:
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM public.accounts").fetchone()
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable):
        return 0
    assert row is not None
    return int(row[0])


def wait_for_writes(writer: Writer, transactions: int) -> None:
    """Until the writer has committed ``transactions`` more."""
    goal = writer.transactions + transactions
    wait_for(lambda: writer.transactions >= goal, "the writer is stuck")


def test_pipeline_survives_source_then_target_restart_under_load(
    clusters: tuple[PostgresCluster, PostgresCluster], tmp_path: Path
) -> None:
    source_cluster, target_cluster = clusters
    source, target = source_cluster.dsn("db"), target_cluster.dsn("db")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
        conn.execute("INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 300) g")
    work = tmp_path / "work"
    marker = uuid.uuid4().hex
    run = subprocess.Popen(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", source,
         "--table", "public.accounts", "--target", target, "--work-dir", str(work)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, MARKER: marker},
    )  # fmt: skip
    writer = Writer(source)
    try:
        wait_for(lambda: target_rows(target) >= 300 or run.poll() is not None,
                 "the snapshot never reached the target", timeout_s=180)  # fmt: skip
        assert run.poll() is None, run.communicate()
        writer.start()
        for cluster in (source_cluster, target_cluster):
            wait_for_writes(writer, 20)
            restart(cluster)  # a fast shutdown: every backend is told to go
            assert run.poll() is None, run.communicate()
        wait_for_writes(writer, 30)
        writer.stop.set()
        writer.join(30)
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=180)
    finally:
        writer.stop.set()
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)
            run.communicate()
    log = (work / "pipeline.log").read_text()
    assert run.returncode == 0, stdout + stderr + log[-5000:]
    with psycopg.connect(source) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM accounts").fetchone() or (0,)
    assert f"verified: {rows} rows, source == target" in stdout
    # SIGTERM caught up and verified quietly: no Spark dump on the terminal (this is also the
    # suite's SIGTERM test; Ctrl-C through a pty is in test_pipeline_stop).
    for dump in ("Traceback", "\tat ", "Exception"):
        assert dump not in stdout + stderr, stdout + stderr
    # Both restarts were met, and ridden out: the capture lost its source and reconnected,
    # the apply lost its target connection and redid its transaction on a new one.
    assert "capture source lost" in log and "capture source reconnected" in log
    assert re.search(r"applying \d+ changes to public\.accounts failed: .*; retrying", log)
    assert re.search(r"applying \d+ changes to public\.accounts succeeded after", log)
    assert_nothing_left(marker)
