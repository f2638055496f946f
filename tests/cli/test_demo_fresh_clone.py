"""``make demo`` on a fresh clone: the demo runs with what it installs, without psycopg.

``make demo`` installs the ``spark`` extra and the core dependencies, not ``postgres``; the
demo is SQLite → SQLite, so nothing on that path may need psycopg. A fresh venv per run would
be slow: instead each process runs with psycopg unimportable, through a ``sitecustomize``
module on ``PYTHONPATH`` that every Python process of the run loads (the CLI, the embedded
broker, and Spark's Python workers, which apply the changes), as if it were not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kayak.pipeline.workload import create_orders

_BLOCKER = '''
"""Make psycopg unimportable, as when the postgres extra is not installed."""
import os
import sys


class _NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("psycopg", "psycopg_binary", "psycopg_c"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPsycopg())
with open(os.environ["KAYAK_TEST_NO_PSYCOPG_LOG"], "a") as log:
    log.write(" ".join(sys.orig_argv) + "\\n")
'''


def _without_psycopg(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose Python processes cannot import psycopg, and the file listing
    every process that started with it."""
    site = tmp_path / "no-psycopg"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER)
    started = tmp_path / "processes.txt"
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "KAYAK_TEST_NO_PSYCOPG_LOG": str(started)}
    return env, started


def _kayak(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def test_the_demo_runs_without_psycopg(tmp_path: Path) -> None:
    env, started = _without_psycopg(tmp_path)
    demo = _kayak(env, tmp_path, "demo", "--rows", "50", "--changes", "200",
                  "--data-dir", "demo")  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr[-3000:]
    last = demo.stdout.strip().splitlines()[-1]
    assert last.startswith("verified: ") and last.endswith(" rows, source == target"), last
    assert int(last.split()[1]) > 0
    # psycopg was out of reach where the changes are applied too: in Spark's Python workers.
    processes = started.read_text().splitlines()
    assert any("pyspark.daemon" in p for p in processes), processes


def test_the_sqlite_path_imports_no_psycopg() -> None:
    modules = [
        "kayak.cdc.sqlite", "kayak.cdc.capture", "kayak.cdc.publisher", "kayak.cdc.reconnect",
        "kayak.pipeline.runner", "kayak.pipeline.job", "kayak.pipeline.apply",
        "kayak.pipeline.transient", "kayak.pipeline.verify", "kayak.pipeline.targets",
        "kayak.pipeline.targets.factory", "kayak.pipeline.targets.sqlite",
        "kayak.pipeline.targets.types", "kayak.cli.main", "kayak.cli.demo",
        "kayak.cli.pipeline",
    ]  # fmt: skip
    probe = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert imported.stdout.strip() == "[]", imported.stdout


def test_a_postgresql_url_without_psycopg_names_the_extra(tmp_path: Path) -> None:
    env, _ = _without_psycopg(tmp_path)
    source = tmp_path / "shop.db"
    create_orders(str(source), 10)
    pg = "postgresql://nobody@127.0.0.1:1/x"
    for args, says in (
        (["--source", f"sqlite:{source}", "--target", pg],
         "a PostgreSQL target needs psycopg: pip install 'kayak[postgres]'"),
        (["--source", pg, "--target", f"sqlite:{tmp_path / 'copy.db'}"],
         "PostgreSQL support needs psycopg, which is not installed: "
         "pip install 'kayak[postgres]'"),
    ):  # fmt: skip
        refused = _kayak(env, tmp_path, "pipeline", "run", *args, "--table", "orders",
                         "--work-dir", str(tmp_path / "work"), "--once")  # fmt: skip
        assert refused.returncode == 1, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert says in line, line
