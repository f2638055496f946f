"""A dead part stops ``kayak pipeline run``: exit 1 and one line naming the table, the change's
source position and the cause; the full trace in the log file, nothing left running."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.cli.test_pipeline_stop import MARKER, assert_nothing_left


def test_a_change_the_target_refuses_stops_the_pipeline_with_one_line(tmp_path: Path) -> None:
    source, target = tmp_path / "bank.db", tmp_path / "copy.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [(i, 100) for i in range(10)])
    # The target's own rule, which the source does not have: no negative balance.
    with sqlite3.connect(target) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, "
                     "balance INTEGER NOT NULL CHECK (balance >= 0))")  # fmt: skip
    marker = uuid.uuid4().hex
    run = subprocess.Popen(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
         "--table", "accounts", "--target", f"sqlite:{target}",
         "--work-dir", str(tmp_path / "work")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, MARKER: marker},
    )  # fmt: skip
    try:
        wait_for_rows(target, 10)  # the snapshot went through
        with sqlite3.connect(source) as conn:
            conn.execute("UPDATE accounts SET balance = -5 WHERE id = 7")
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)
            run.communicate()
    assert run.returncode == 1, stdout + stderr
    assert stdout.startswith("replicating accounts") and "verified" not in stdout
    # Off a terminal the pipeline logs a status line every --status-interval seconds; the
    # failure itself is one line.
    (line,) = [text for text in stderr.strip().splitlines() if "kayak.status" not in text]
    log_path = tmp_path / "work" / "pipeline.log"
    named = re.fullmatch(
        r"Error: apply failed on table main\.accounts, key id=7, source position ([0-9a-f/]+): "
        r"IntegrityError: CHECK constraint failed: .* \(details in (.+)\)", line
    )  # fmt: skip
    assert named, line
    # The update's position: after the snapshot's, which is the last one applied to the key.
    assert named[1] > read_position(target, 7)
    log_path = tmp_path / "work" / "pipeline.log"
    assert named[2] == str(log_path)
    log = log_path.read_text()
    assert "Traceback" in log and "CHECK constraint failed" in log
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT balance FROM accounts WHERE id = 7").fetchone() == (100,)
    assert_nothing_left(marker)


def wait_for_rows(db: Path, rows: int) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT count(*) FROM accounts").fetchone()[0] >= rows:
                    return
        except sqlite3.OperationalError:  # locked by the pipeline's apply
            pass
        assert time.monotonic() < deadline, "the snapshot never reached the target"
        time.sleep(0.2)


def read_position(db: Path, key: int) -> str:
    with sqlite3.connect(db) as conn:
        (pos,) = conn.execute(
            "SELECT pos FROM kayak_apply_positions WHERE table_name = 'main.accounts' "
            "AND key = ?", (f"[{key}]",),
        ).fetchone()  # fmt: skip
    return str(pos)
