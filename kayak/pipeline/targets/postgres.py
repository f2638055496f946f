"""Applying changes to a PostgreSQL database (``INSERT … ON CONFLICT`` / ``DELETE``, batched)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.cdc.postgres.types import SESSION_SETTINGS, decode_value
from kayak.pipeline.targets.base import (
    POSITIONS_TABLE,
    AppliedChange,
    key_text,
    newer,
    statement_rows,
)
from kayak.pipeline.targets.types import pg_column_type

__all__ = ["PostgresTarget", "connect", "declared_type", "read_postgres_rows"]

_DECLARED = {
    ColumnType.BOOLEAN: "boolean",
    ColumnType.INT: "integer",
    ColumnType.LONG: "bigint",
    ColumnType.DOUBLE: "double precision",
    ColumnType.DECIMAL: "numeric",
    ColumnType.STRING: "text",
    ColumnType.BYTES: "bytea",
}


def declared_type(table: TableSchema, column: Column, connector: str) -> str:
    """The target type of a column: a PostgreSQL source's own type, parsed and re-rendered
    from the fixed type table (:mod:`~kayak.pipeline.targets.types`), or the value kind's
    type. :class:`~kayak.pipeline.targets.types.TargetSchemaError` if refused."""
    if connector == "postgresql" and column.source_type:
        return pg_column_type(table, column)
    return _DECLARED[column.type]


# pg_advisory_xact_lock key for kayak's DDL on a target (any fixed bigint: "kayakDDL").
_DDL_LOCK = 0x6B6179616B44444C


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection with the session settings the PostgreSQL source uses, so
    values read as text here look exactly like captured ones."""
    conn = psycopg.connect(dsn, autocommit=True)
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    return conn


class PostgresTarget:
    """A PostgreSQL database as a replication target (see ``targets.base``). Tables are
    written in the schema the change came from (created if missing)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn = connect(dsn)
        with self._conn.transaction():
            self._lock_ddl()
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {POSITIONS_TABLE} (table_name text NOT NULL, "
                "key text NOT NULL, pos text NOT NULL, PRIMARY KEY (table_name, key))"
            )

    def _lock_ddl(self) -> None:
        """Serialise kayak's DDL on this database until the transaction ends: ``IF NOT
        EXISTS`` is not safe against a concurrent creator (several executors may meet a new
        table at once), a lock taken first is."""
        self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))

    def _name(self, table: TableSchema) -> sql.Composed:
        schema = table.schema if table.schema != "main" else "public"
        return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table.name))

    def ensure_table(self, table: TableSchema, connector: str) -> None:
        # Every type is decided before any DDL runs: a refused column creates nothing.
        types = {c.name: declared_type(table, c, connector) for c in table.columns}

        def declared(name: str) -> sql.SQL:
            return sql.SQL(types[name])  # rendered from the fixed type table, not schema text

        schema = table.schema if table.schema != "main" else "public"
        with self._conn.transaction():
            self._lock_ddl()
            self._conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}{}").format(
                    sql.Identifier(c.name),
                    declared(c.name),
                    sql.SQL("" if c.nullable or c.name in table.key else " NOT NULL"),
                )
                for c in table.columns
            )
            key = sql.SQL(", ").join(sql.Identifier(k) for k in table.key)
            self._conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
                    self._name(table), columns, key
                )
            )
            for column in table.columns:
                self._conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                        self._name(table), sql.Identifier(column.name), declared(column.name)
                    )
                )

    def apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        if not changes:
            return 0
        name = self._name(table)
        with self._conn.transaction(), self._conn.cursor() as cur:
            texts = [key_text(table, c.key) for c in changes]
            cur.execute(
                f"SELECT key, pos FROM {POSITIONS_TABLE} WHERE table_name = %s "
                "AND key = ANY(%s) FOR UPDATE",
                (table.qualified_name, texts),
            )
            todo = newer(changes, table, dict(cur.fetchall()))
            deletes, upserts = statement_rows(table, todo)
            if deletes:
                where = sql.SQL(" AND ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key
                )
                cur.executemany(sql.SQL("DELETE FROM {} WHERE {}").format(name, where), deletes)
            if upserts:
                cur.executemany(self._upsert_sql(table), upserts)
            cur.executemany(
                f"INSERT INTO {POSITIONS_TABLE} (table_name, key, pos) VALUES (%s, %s, %s) "
                "ON CONFLICT (table_name, key) DO UPDATE SET pos = excluded.pos",
                [(table.qualified_name, text, c.position) for text, c in todo],
            )
        return len(todo)

    def _upsert_sql(self, table: TableSchema) -> sql.Composed:
        cols = [sql.Identifier(c.name) for c in table.columns]
        updates = [
            sql.SQL("{} = excluded.{}").format(sql.Identifier(c.name), sql.Identifier(c.name))
            for c in table.columns
            if c.name not in table.key
        ]
        action = (
            sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates))
            if updates
            else sql.SQL("DO NOTHING")
        )
        return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            self._name(table),
            sql.SQL(", ").join(cols),
            sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            sql.SQL(", ").join(sql.Identifier(k) for k in table.key),
            action,
        )

    def read_rows(self, table: TableSchema) -> list[Row]:
        return read_postgres_rows(self._conn, table, self._name(table))

    def close(self) -> None:
        self._conn.close()


def read_postgres_rows(
    conn: psycopg.Connection[Any], table: TableSchema, name: sql.Composable
) -> list[Row]:
    """Every row of a table in key order, values in their column types' representation."""
    # Text output, as the source reads values; booleans as booleans (their ::text is 'true',
    # not the 't' the type's output function and the replication stream give).
    cols = sql.SQL(", ").join(
        sql.SQL("{}" if c.type is ColumnType.BOOLEAN else "{}::text").format(sql.Identifier(c.name))
        for c in table.columns
    )
    order = sql.SQL(", ").join(sql.Identifier(k) for k in table.key)
    rows = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY {}").format(cols, name, order))
    return [
        {
            c.name: v if v is None or c.type is ColumnType.BOOLEAN else decode_value(c.type, v)
            for c, v in zip(table.columns, row, strict=True)
        }
        for row in rows
    ]
