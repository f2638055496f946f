"""Applying changes to a SQLite database."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.cdc.sqlite.schema import coerce_value, quote_identifier, read_table_schema
from kayak.pipeline.targets.base import (
    POSITIONS_TABLE,
    AppliedChange,
    chunks,
    key_text,
    newer,
    statement_rows,
)
from kayak.pipeline.targets.types import sqlite_column_type

__all__ = ["SqliteTarget", "declared_type"]

_DECLARED = {
    ColumnType.BOOLEAN: "BOOLEAN",
    ColumnType.INT: "INTEGER",
    ColumnType.LONG: "INTEGER",
    ColumnType.DOUBLE: "REAL",
    ColumnType.DECIMAL: "NUMERIC",
    ColumnType.STRING: "TEXT",
    ColumnType.BYTES: "BLOB",
}


def declared_type(table: TableSchema, column: Column, connector: str) -> str:
    """The target type of a column. A SQLite source's own declared type keeps its affinity
    exactly, once validated and re-rendered (:mod:`~kayak.pipeline.targets.types`); other
    sources' types are mapped from the value kind.
    :class:`~kayak.pipeline.targets.types.TargetSchemaError` if refused."""
    if connector == "sqlite" and column.source_type:
        return sqlite_column_type(table, column)
    return _DECLARED[column.type]


class SqliteTarget:
    """A SQLite database as a replication target (see ``targets.base`` for the guarantees)."""

    def __init__(self, path: str) -> None:
        self.path = path
        # Spark calls foreachBatch on its own thread: one user at a time.
        self._conn = sqlite3.connect(
            path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {POSITIONS_TABLE} (table_name TEXT NOT NULL, "
            "key TEXT NOT NULL, pos TEXT NOT NULL, PRIMARY KEY (table_name, key))"
        )
        self._upserts: dict[TableSchema, str] = {}

    def ensure_table(self, table: TableSchema, connector: str) -> None:
        # Every type is decided before any DDL runs: a refused column creates nothing.
        types = {c.name: declared_type(table, c, connector) for c in table.columns}
        # Several executors may meet a new table (or column) at once: the write lock makes
        # the check and the DDL one step.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._ensure_table(table, types)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._upserts.pop(table, None)

    def _ensure_table(self, table: TableSchema, types: dict[str, str]) -> None:
        name = quote_identifier(table.name)
        exists = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table.name,)
        ).fetchone()
        if not exists:
            columns = [
                f"{quote_identifier(c.name)} {types[c.name]}"
                + ("" if c.nullable or c.name in table.key else " NOT NULL")
                for c in table.columns
            ]
            key = ", ".join(quote_identifier(k) for k in table.key)
            self._conn.execute(f"CREATE TABLE {name} ({', '.join(columns)}, PRIMARY KEY ({key}))")
            return
        existing = read_table_schema(self._conn, table.name)
        if existing.key != table.key:
            raise ValueError(
                f"target table {table.name!r} has primary key {existing.key}, the source "
                f"{table.key}: changes could not be applied by key"
            )
        have = {c.name for c in existing.columns}
        for column in table.columns:
            if column.name not in have:
                self._conn.execute(
                    f"ALTER TABLE {name} ADD COLUMN {quote_identifier(column.name)} "
                    f"{types[column.name]}"
                )

    def _upsert_sql(self, table: TableSchema) -> str:
        sql = self._upserts.get(table)
        if sql is None:
            cols = [quote_identifier(c.name) for c in table.columns]
            key = ", ".join(quote_identifier(k) for k in table.key)
            updates = [
                f"{quote_identifier(c.name)} = excluded.{quote_identifier(c.name)}"
                for c in table.columns
                if c.name not in table.key
            ]
            action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
            sql = self._upserts[table] = (
                f"INSERT INTO {quote_identifier(table.name)} ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' * len(cols))}) ON CONFLICT ({key}) {action}"
            )
        return sql

    def apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        if not changes:
            return 0
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            todo = newer(changes, table, self._applied(table, changes))
            deletes, upserts = statement_rows(table, todo)
            if deletes:
                where = " AND ".join(f"{quote_identifier(k)} = ?" for k in table.key)
                conn.executemany(
                    f"DELETE FROM {quote_identifier(table.name)} WHERE {where}", deletes
                )
            if upserts:
                conn.executemany(self._upsert_sql(table), upserts)
            conn.executemany(
                f"INSERT INTO {POSITIONS_TABLE} (table_name, key, pos) VALUES (?, ?, ?) "
                "ON CONFLICT (table_name, key) DO UPDATE SET pos = excluded.pos",
                [(table.qualified_name, text, c.position) for text, c in todo],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return len(todo)

    def _applied(self, table: TableSchema, changes: Sequence[AppliedChange]) -> dict[str, str]:
        texts = [key_text(table, c.key) for c in changes]
        applied: dict[str, str] = {}
        for chunk in chunks(texts, 500):
            rows = self._conn.execute(
                f"SELECT key, pos FROM {POSITIONS_TABLE} WHERE table_name = ? "
                f"AND key IN ({', '.join('?' * len(chunk))})",
                (table.qualified_name, *chunk),
            ).fetchall()
            applied.update(rows)
        return applied

    def read_rows(self, table: TableSchema) -> list[Row]:
        return read_sqlite_rows(self._conn, table)

    def close(self) -> None:
        self._conn.close()


def read_sqlite_rows(conn: sqlite3.Connection, table: TableSchema) -> list[Row]:
    """Every row of ``table`` in key order, each value in its column type's representation."""
    cols = ", ".join(quote_identifier(c.name) for c in table.columns)
    order = ", ".join(quote_identifier(k) for k in table.key)
    rows = conn.execute(f"SELECT {cols} FROM {quote_identifier(table.name)} ORDER BY {order}")
    return [
        {c.name: coerce_value(table.name, c, v) for c, v in zip(table.columns, row, strict=True)}
        for row in rows
    ]
