"""Generated columns are not captured (logical decoding and the capture triggers carry
stored values only): verification names them as not compared instead of calling the table
equal in silence."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import psycopg

from kayak.pipeline.source_database import current_table_schema, generated_columns


def test_sqlite_generated_columns_are_named(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INT, "
                     "twice INT GENERATED ALWAYS AS (a * 2) STORED, "
                     "half REAL GENERATED ALWAYS AS (a / 2.0) VIRTUAL)")  # fmt: skip
    table = current_table_schema(f"sqlite:{path}", "t")
    assert [c.name for c in table.columns] == ["id", "a"]  # not captured
    assert generated_columns(f"sqlite:{path}", table) == ("twice", "half")


def test_postgres_generated_columns_are_named(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE "Gen" (id int PRIMARY KEY, a int, '
                     "twice int GENERATED ALWAYS AS (a * 2) STORED, dropped int)")  # fmt: skip
        conn.execute('ALTER TABLE "Gen" DROP COLUMN dropped')
    table = current_table_schema(postgres_dsn, 'public."Gen"')
    assert [c.name for c in table.columns] == ["id", "a"]
    assert generated_columns(postgres_dsn, table) == ("twice",)


def test_the_verification_report_names_them(tmp_path: Path) -> None:
    from rich.console import Console

    from kayak.cli.pipeline import report
    from kayak.pipeline.verify import Verification

    path = tmp_path / "g.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INT, "
                     "twice INT GENERATED ALWAYS AS (a * 2) STORED)")  # fmt: skip
    table = current_table_schema(f"sqlite:{path}", "t")
    out = io.StringIO()
    checked = Verification(table, 3, not_compared=generated_columns(f"sqlite:{path}", table))
    assert report(Console(file=out, width=200), [checked]) == 3
    assert "main.t: generated column(s) twice are not captured" in out.getvalue()
