"""SQLite columns without a declared type (or of NUMERIC affinity naming no kind, such as
DATETIME) keep each value's own storage class from capture, through Avro, into the target;
verification compares them by value and type (``typeof()``)."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import fastavro
import pytest

from kayak.cdc import ColumnType, Op, TableSchema
from kayak.cdc.change import Change
from kayak.cdc.envelope import event_value, table_schema_from_avro, value_schema
from kayak.cdc.sqlite import SqliteSource, enable
from kayak.pipeline.targets import AppliedChange, open_target
from kayak.pipeline.targets.sqlite import read_sqlite_rows
from kayak.pipeline.verify import compare_rows

# One value of each storage class in each untyped column, plus values a text column would
# turn into text and a NUMERIC one into numbers.
VALUES: list[tuple[Any, ...]] = [
    (1, 42, 42, "t1"),
    (2, 0.5, 1700000000, "t2"),
    (3, "42", "2024-01-02 03:04:05", "t3"),
    (4, b"\x00\xffbin", 2.25, "t4"),
    (5, None, None, None),
    (6, 1e300, -0.0, "t6"),
    (7, 9007199254740993, "", "t7"),
]


def avro_round_trip(change: Change) -> tuple[TableSchema, dict[str, Any] | None]:
    """Encode a change with the envelope's schema and decode it again, as the registry (JSON)
    and a reader would: the table as the target sees it, and the after image."""
    schema = value_schema("p", change.table, "sqlite")
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, event_value(
        change, op=change.op.value, before=change.before, after=change.after, prefix="p",
        connector="sqlite", db="source", now_ms=0))  # fmt: skip
    out.seek(0)
    event = fastavro.schemaless_reader(out, parsed)
    return table_schema_from_avro(json.loads(json.dumps(schema))), event["after"]


def read_rows(path: str, table: TableSchema) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    try:
        return read_sqlite_rows(conn, table)
    finally:
        conn.close()


def typed(rows: list[dict[str, Any]], column: str) -> list[tuple[str, Any]]:
    return [(type(r[column]).__name__, r[column]) for r in rows]


@pytest.fixture
def source_db(tmp_path: Path) -> str:
    path = str(tmp_path / "source.db")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, u, d DATETIME, s TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", VALUES[:4])
    conn.close()
    return path


def test_untyped_values_keep_their_type_into_sqlite(source_db: str, tmp_path: Path) -> None:
    enable(source_db, "t")
    conn = sqlite3.connect(source_db)
    with conn:
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", VALUES[4:])
        conn.execute("UPDATE t SET u = 7 WHERE id = 2")  # real → integer in place
    source = SqliteSource(source_db, ["t"])
    changes = source.read(100, 0.5)
    source.close()
    kinds = {c.name: c.type for c in changes[0].table.columns}
    assert kinds == {"id": ColumnType.LONG, "u": ColumnType.ANY, "d": ColumnType.ANY,
                     "s": ColumnType.STRING}  # fmt: skip

    target = open_target(f"sqlite:{tmp_path / 'target.db'}")
    applied = []
    for change in changes:
        table, after = avro_round_trip(change)
        assert after is not None and change.op in (Op.READ, Op.CREATE, Op.UPDATE)
        assert typed([after], "u") == typed([change.after or {}], "u")  # Avro kept the type
        target.ensure_table(table, "sqlite")
        applied.append(AppliedChange(change.op.value, {"id": after["id"]}, after,
                                     change.position, 0))  # fmt: skip
    assert target.apply(table, applied) == len(applied)

    source_rows = read_rows(source_db, table)
    assert typed(source_rows, "u") == [
        ("int", 42), ("int", 7), ("str", "42"), ("bytes", b"\x00\xffbin"), ("NoneType", None),
        ("float", 1e300), ("int", 9007199254740993)]  # fmt: skip
    target_rows = target.read_rows(table)
    assert typed(target_rows, "u") == typed(source_rows, "u")
    assert compare_rows(table, source_rows, target_rows).equal
    # The target declares no type for the untyped column, DATETIME for the other: SQLite
    # stores every value in its own storage class, as the source does.
    check = sqlite3.connect(tmp_path / "target.db")
    declared = {r[1]: r[2] for r in check.execute("PRAGMA table_info(t)")}
    assert (declared["u"], declared["d"]) == ("", "DATETIME")
    storage = "SELECT id, typeof(u), typeof(d) FROM t ORDER BY id"
    assert check.execute(storage).fetchall() == sqlite3.connect(source_db).execute(
        storage).fetchall()  # fmt: skip

    # Verification compares by type too: the integer 42 stored as the text '42' differs.
    check.execute("UPDATE t SET u = '42' WHERE id = 1")
    check.commit()
    check.close()
    result = compare_rows(table, source_rows, target.read_rows(table))
    assert [(d.key, d.columns) for d in result.differences] == [("[1]", ("u",))]
    target.close()


def test_untyped_values_into_postgres_as_text_forms(source_db: str, postgres_dsn: str) -> None:
    """A PostgreSQL target holds them as text (its columns have one type); verification
    compares their text forms."""
    enable(source_db, "t")
    source = SqliteSource(source_db, ["t"])
    changes = source.read(100, 0.5)
    source.close()
    target = open_target(postgres_dsn)
    table, _ = avro_round_trip(changes[0])
    target.ensure_table(table, "sqlite")
    applied = []
    for change in changes:
        _, after = avro_round_trip(change)
        assert after is not None
        applied.append(AppliedChange("r", {"id": after["id"]}, after, change.position, 0))
    target.apply(table, applied)
    rows = target.read_rows(table)
    assert [r["u"] for r in rows] == ["42", "0.5", "42", "\\x00ff62696e"]
    source_rows = read_rows(source_db, table)
    assert compare_rows(table, source_rows, rows).equal
    target.close()
