"""``kayak cdc``, ``kayak pipeline run`` and ``kayak demo`` as a user runs them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from kayak.pipeline.workload import create_orders, run_workload


def kayak(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def test_cdc_enable_then_pipeline_run_once_on_the_embedded_broker(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    create_orders(str(source), 300)
    enabled = kayak("cdc", "enable", str(source), "orders", cwd=tmp_path)
    assert enabled.returncode == 0, enabled.stderr
    assert "capturing orders (snapshot: 300 rows)" in enabled.stdout
    run_workload(str(source), 1_000)
    expected = sqlite3.connect(source).execute("SELECT count(*) FROM orders").fetchone()[0]
    result = kayak(
        "pipeline", "run", "--source", f"sqlite:{source}", "--table", "orders",
        "--target", f"sqlite:{tmp_path / 'copy.db'}", "--work-dir", str(tmp_path / "work"),
        "--once", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"verified: {expected} rows, source == target"
    copy = sqlite3.connect(tmp_path / "copy.db")
    assert copy.execute("SELECT count(*) FROM orders").fetchone() == (expected,)


def test_demo_ends_with_the_verification_line(tmp_path: Path) -> None:
    result = kayak("demo", "--rows", "100", "--changes", "500", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("verified: ") and lines[-1].endswith(" rows, source == target")
    assert int(lines[-1].split()[1]) > 0
    assert "changes/s" in result.stdout


def test_clear_errors(tmp_path: Path) -> None:
    nope = f"sqlite:{tmp_path / 'nope.db'}"
    missing = kayak("pipeline", "run", "--source", nope, "--table", "t", "--target",
                    f"sqlite:{tmp_path / 'c.db'}", "--once", cwd=tmp_path)  # fmt: skip
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    db = tmp_path / "x.db"
    sqlite3.connect(db).execute("CREATE TABLE nokey (a TEXT)")
    nokey = kayak("cdc", "enable", str(db), "nokey", cwd=tmp_path)
    assert nokey.returncode == 1 and "no primary key" in nokey.stderr
    assert len(nokey.stderr.strip().splitlines()) == 1
    external = kayak("pipeline", "run", "--source", str(db), "--table", "t", "--target",
                     "sqlite:c.db", "-b", "127.0.0.1:1", cwd=tmp_path)  # fmt: skip
    assert external.returncode == 2 and "--registry-url" in external.stderr


def test_a_failed_start_takes_away_the_capture_it_installed(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    create_orders(str(source), 50)
    failed = kayak(
        "pipeline", "run", "--source", f"sqlite:{source}", "--table", "orders",
        "--target", f"sqlite:{tmp_path / 'copy.db'}", "--work-dir", str(tmp_path / "work"),
        "-X", "request.timeout.ms=soon", "--once", cwd=tmp_path,
    )  # fmt: skip
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "request.timeout.ms" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    # The run enabled capture (triggers, change log) and nothing was replicated: all gone.
    conn = sqlite3.connect(source)
    kayak_objects = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE name LIKE '%kayak%'"
    ).fetchall()
    assert kayak_objects == []
    assert conn.execute("SELECT count(*) FROM orders").fetchone() == (50,)
