"""Targets apply changes idempotently, guarded by source position, in SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from kayak.cdc import Column, ColumnType, TableSchema, format_position
from kayak.pipeline.targets import AppliedChange, Target, open_target

TABLE = TableSchema(
    "public",
    "accounts",
    (
        Column("tenant", ColumnType.STRING, False, "text"),
        Column("id", ColumnType.LONG, False, "bigint"),
        Column("balance", ColumnType.DECIMAL, True, "numeric(12,2)"),
        Column("ratio", ColumnType.DOUBLE, True, "double precision"),
        Column("blob", ColumnType.BYTES, True, "bytea"),
        Column("active", ColumnType.BOOLEAN, True, "boolean"),
        Column("small", ColumnType.INT, True, "integer"),
    ),
    ("tenant", "id"),
)
# The same table as a SQLite source describes it (types as declared there, kinds by affinity).
SQLITE_TABLE = TableSchema(
    "main",
    "accounts",
    (
        Column("tenant", ColumnType.STRING, False, "TEXT"),
        Column("id", ColumnType.LONG, False, "INTEGER"),
        Column("balance", ColumnType.DECIMAL, True, "NUMERIC(12,2)"),
        Column("ratio", ColumnType.DOUBLE, True, "REAL"),
        Column("blob", ColumnType.BYTES, True, "BLOB"),
        Column("active", ColumnType.BOOLEAN, True, "BOOLEAN"),
        Column("small", ColumnType.LONG, True, "INTEGER"),
    ),
    ("tenant", "id"),
)
WIDER = TableSchema(
    SQLITE_TABLE.schema, SQLITE_TABLE.name,
    (*SQLITE_TABLE.columns, Column("note", ColumnType.STRING, True, "TEXT")), SQLITE_TABLE.key,
)  # fmt: skip


def row(tenant: str, i: int, balance: str | None = "10.50", **extra: object) -> dict:
    r = {"tenant": tenant, "id": i, "balance": balance, "ratio": 0.30000000000000004,
         "blob": b"\x00\x01", "active": True, "small": -7}  # fmt: skip
    r.update(extra)
    return r


def upsert(r: dict, pos: int) -> AppliedChange:
    return AppliedChange("u", {"tenant": r["tenant"], "id": r["id"]}, r, format_position(pos), 0)


def delete(tenant: str, i: int, pos: int) -> AppliedChange:
    return AppliedChange("d", {"tenant": tenant, "id": i}, None, format_position(pos), 0)


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        return open_target(f"sqlite:{tmp_path / 'target.db'}")
    dsn = request.getfixturevalue("postgres_dsn")
    return open_target(dsn)


def normalised(rows: list[dict]) -> list[dict]:
    # NUMERIC text differs by database (10.5 vs 10.50): compare as numbers
    from decimal import Decimal

    return [{**r, "balance": None if r["balance"] is None else Decimal(r["balance"])}
            for r in rows]  # fmt: skip


def test_apply_is_idempotent_and_never_goes_backwards(target: Target) -> None:
    target.ensure_table(TABLE, "postgresql")
    a, b = row("t1", 1), row("t1", 2, balance=None, blob=None, active=False)
    assert target.apply(TABLE, [upsert(a, 10), upsert(b, 11)]) == 2
    assert target.apply(TABLE, [upsert(a, 10), upsert(b, 11)]) == 0  # a replayed batch
    assert target.apply(TABLE, [delete("t1", 2, 12)]) == 1
    # an older insert replayed after the delete must not bring the row back
    assert target.apply(TABLE, [upsert(b, 11)]) == 0
    newer = row("t1", 1, balance="99.99", ratio=1e300, small=2**31 - 1)
    older = row("t1", 1, balance="0.01")
    assert target.apply(TABLE, [upsert(newer, 20)]) == 1
    assert target.apply(TABLE, [upsert(older, 15)]) == 0
    assert normalised(target.read_rows(TABLE)) == normalised([newer])
    target.close()


def test_added_column_and_bulk(target: Target) -> None:
    target.ensure_table(SQLITE_TABLE, "sqlite")
    changes = [upsert(row("t2", i, balance=f"{i}.25"), i + 1) for i in range(3000)]
    assert target.apply(SQLITE_TABLE, changes) == 3000
    target.ensure_table(WIDER, "sqlite")
    assert target.apply(WIDER, [upsert(row("t2", 5, note="añadido"), 10_000)]) == 1
    rows = {r["id"]: r for r in target.read_rows(WIDER)}
    assert len(rows) == 3000 and rows[5]["note"] == "añadido" and rows[6]["note"] is None
    target.close()


def test_target_with_a_different_key_is_refused(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (tenant TEXT PRIMARY KEY, id INTEGER)")
    conn.close()
    target = open_target(f"sqlite:{path}")
    with pytest.raises(ValueError, match="primary key"):
        target.ensure_table(SQLITE_TABLE, "sqlite")
    with pytest.raises(ValueError, match="sqlite:PATH or postgresql"):
        open_target("mysql://nope")
