"""``kayak cdc``, ``kayak pipeline run`` and ``kayak demo`` as a user runs them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from kayak.pipeline.workload import create_orders


def kayak(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


# `kayak cdc enable` then `kayak pipeline run --once` on the embedded broker, as README shows
# it, is run by tests/test_readme_examples.py.


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


def test_a_target_that_cannot_work_is_refused_before_anything_starts(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    create_orders(str(source), 10)
    for target, says in (
        ("foo://x", "target must be sqlite:PATH or postgresql://"),
        (f"sqlite:{tmp_path / 'missing' / 'r.db'}", "does not exist"),
        ("postgresql://nobody@127.0.0.1:1/x", "cannot connect to the target"),
    ):
        # A bound far below Spark's start: the check comes first.
        refused = kayak(
            "pipeline", "run", "--source", f"sqlite:{source}", "--table", "orders",
            "--target", target, "--work-dir", str(tmp_path / "work"), "--once",
            cwd=tmp_path, timeout=25,
        )  # fmt: skip
        assert refused.returncode == 1, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert says in line, line
    # Nothing was installed on the source either.
    tables = sqlite3.connect(source).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("orders",)]
    assert not (tmp_path / "missing").exists()


def test_cdc_mistakes_get_one_line_and_change_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    enabled = kayak("cdc", "enable", str(missing), "orders", cwd=tmp_path)
    assert enabled.returncode == 1 and "does not exist" in enabled.stderr
    assert not missing.exists()  # not created empty
    mysql = kayak("cdc", "enable", "mysql://me@db/shop", "orders", cwd=tmp_path)
    assert mysql.returncode == 1 and "unsupported source mysql://" in mysql.stderr
    assert not list(tmp_path.glob("mysql*"))
    source = tmp_path / "shop.db"
    create_orders(str(source), 5)
    typo = kayak("cdc", "disable", str(source), "oders", cwd=tmp_path)
    assert typo.returncode == 1 and "'oders' is not captured" in typo.stderr
    for result in (enabled, mysql, typo):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert kayak("cdc", "enable", str(source), "orders", cwd=tmp_path).returncode == 0
    stopped = kayak("cdc", "disable", str(source), "orders", "--drop-log", cwd=tmp_path)
    assert stopped.returncode == 0 and "stopped capturing orders" in stopped.stdout
    names = sqlite3.connect(source).execute(
        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"  # SQLite's own
    ).fetchall()
    assert names == [("orders",)]
