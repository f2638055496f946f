"""Applying changes to a PostgreSQL database (``INSERT … ON CONFLICT`` / ``DELETE``, batched)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.cdc.postgres.types import SESSION_SETTINGS, decode_value
from kayak.pipeline.targets.base import (
    FLOOR_KEY,
    POSITIONS_TABLE,
    VERSIONS_TABLE,
    AppliedChange,
    key_from_text,
    key_text,
    newer,
    renames_from_json,
    renames_to_json,
    statement_rows,
)
from kayak.pipeline.targets.evolve import (
    Evolution,
    ExistingColumn,
    Rename,
    older_mapping,
    plan,
)
from kayak.pipeline.targets.types import (
    TargetSchemaError,
    TypeSyntaxError,
    parse_pg_type,
    pg_column_type,
)

__all__ = ["PostgresTarget", "connect", "declared_type", "read_postgres_rows"]

log = logging.getLogger(__name__)

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


def _same_type(current: str, wanted: str) -> bool:
    """Whether a target column of type ``current`` (``format_type``'s text) already is
    ``wanted``; types outside the fixed table compare as text."""
    try:
        return parse_pg_type(current) == parse_pg_type(wanted)
    except TypeSyntaxError:
        return current.lower() == wanted.lower()


def _default_sql(table: TableSchema, column: Column, declared: str) -> sql.Composable | None:
    """A column's default (the value rows that predate it hold) as a quoted literal cast to
    its type, or None."""
    value = column.default
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        value = "NaN"
    if not isinstance(value, str | int | float | bool | bytes):
        raise TargetSchemaError(
            f"table {table.qualified_name!r} column {column.name!r}: default of type "
            f"{type(value).__name__} is not created")
    return sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(declared))


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
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} (table_name text PRIMARY KEY, "
                "pos text NOT NULL, renames text NOT NULL, types text NOT NULL)"
            )

    def _lock_ddl(self) -> None:
        """Serialise kayak's DDL on this database until the transaction ends: ``IF NOT
        EXISTS`` is not safe against a concurrent creator (several executors may meet a new
        table at once), a lock taken first is."""
        self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))

    def _name(self, table: TableSchema) -> sql.Composed:
        schema = table.schema if table.schema != "main" else "public"
        return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table.name))

    def ensure_table(
        self, table: TableSchema, connector: str, position: str = ""
    ) -> dict[str, str] | None:
        # Every type is decided before any DDL runs: a refused column creates nothing.
        types = {c.name: declared_type(table, c, connector) for c in table.columns}
        defaults = {c.name: _default_sql(table, c, types[c.name]) for c in table.columns}
        schema = table.schema if table.schema != "main" else "public"
        with self._conn.transaction():
            self._lock_ddl()
            self._conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            self._conn.execute(
                f"INSERT INTO {POSITIONS_TABLE} VALUES (%s, %s, '') ON CONFLICT DO NOTHING",
                (table.qualified_name, FLOOR_KEY),
            )
            existing = self._existing_columns(table)
            if not existing:
                self._create(table, types)
                self._store_version(table, position, [], types)
                return None
            stored = self._conn.execute(
                f"SELECT pos, renames, types FROM {VERSIONS_TABLE} WHERE table_name = %s",
                (table.qualified_name,),
            ).fetchone()
            stored_position, renames, previous = (
            stored[0], renames_from_json(stored[1]), json.loads(stored[2])) if stored \
                else ("", [], None)  # fmt: skip
            if position and position < stored_position:
                return older_mapping(table, {c.name for c in existing}, renames, position)
            evolution = plan(table, existing, types, _same_type, previous)
            self._evolve(table, evolution, types, defaults)
            renames += [Rename(old, new, position) for old, new in evolution.renames]
            self._store_version(table, max(position, stored_position), renames, types)
        return None

    def _existing_columns(self, table: TableSchema) -> list[ExistingColumn]:
        rows = self._conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (table.schema if table.schema != "main" else "public", table.name),
        ).fetchall()
        return [ExistingColumn(*row) for row in rows]

    def _create(self, table: TableSchema, types: dict[str, str]) -> None:
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name),
                sql.SQL(types[c.name]),  # rendered from the fixed type table, not schema text
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

    def _evolve(
        self, table: TableSchema, evolution: Evolution, types: dict[str, str],
        defaults: dict[str, sql.Composable | None],
    ) -> None:  # fmt: skip
        name = self._name(table)
        for old, new in evolution.renames:
            log.info("target %s: RENAME COLUMN %s TO %s", table.qualified_name, old, new)
            self._conn.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                name, sql.Identifier(old), sql.Identifier(new)))  # fmt: skip
        for column in evolution.retypes:
            log.info("target %s: ALTER COLUMN %s TYPE %s", table.qualified_name, column.name,
                     types[column.name])  # fmt: skip
            wanted = sql.SQL(types[column.name])  # rendered from the fixed type table
            self._conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}")
                               .format(name, sql.Identifier(column.name), wanted,
                                       sql.Identifier(column.name), wanted))  # fmt: skip
        for column in evolution.adds:
            default = defaults[column.name]
            clause: sql.Composable = sql.SQL("")
            if default is not None:
                clause = sql.SQL(" DEFAULT {}{}").format(default, sql.SQL(
                    "" if column.nullable or column.name in table.key else " NOT NULL"))
            log.info("target %s: ADD COLUMN %s %s%s", table.qualified_name, column.name,
                     types[column.name], " with a default" if default is not None else "")
            self._conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}{}").format(
                name, sql.Identifier(column.name), sql.SQL(types[column.name]), clause))
        for column_name in evolution.drop_not_null:
            log.info("target %s: column %s made nullable (gone from the source or nullable "
                     "there)", table.qualified_name, column_name)  # fmt: skip
            self._conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(
                name, sql.Identifier(column_name)))

    def _store_version(
        self, table: TableSchema, position: str, renames: list[Rename], types: dict[str, str]
    ) -> None:  # fmt: skip
        self._conn.execute(
            f"INSERT INTO {VERSIONS_TABLE} (table_name, pos, renames, types) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (table_name) DO UPDATE SET pos = excluded.pos, "
            "renames = excluded.renames, types = excluded.types",
            (table.qualified_name, position, renames_to_json(renames), json.dumps(types)),
        )

    def apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        if not changes:
            return 0
        name = self._name(table)
        with self._conn.transaction(), self._conn.cursor() as cur:
            # FOR SHARE: applies of the table run side by side, a truncate waits for them
            # (and they for it), and this reads the floor a committed truncate left.
            floor_row = cur.execute(
                f"SELECT pos FROM {POSITIONS_TABLE} WHERE table_name = %s AND key = %s "
                "FOR SHARE", (table.qualified_name, FLOOR_KEY),
            ).fetchone()  # fmt: skip
            texts = [key_text(table, c.key) for c in changes]
            cur.execute(
                f"SELECT key, pos FROM {POSITIONS_TABLE} WHERE table_name = %s "
                "AND key = ANY(%s) FOR UPDATE",
                (table.qualified_name, texts),
            )
            todo = newer(changes, table, dict(cur.fetchall()), floor_row[0] if floor_row else "")
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

    def truncate(self, table: TableSchema, position: str) -> bool:
        name = self._name(table)
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {POSITIONS_TABLE} VALUES (%s, %s, '') ON CONFLICT DO NOTHING",
                (table.qualified_name, FLOOR_KEY))  # fmt: skip
            row = cur.execute(
                f"SELECT pos FROM {POSITIONS_TABLE} WHERE table_name = %s AND key = %s "
                "FOR UPDATE", (table.qualified_name, FLOOR_KEY)).fetchone()  # fmt: skip
            if row is not None and position <= row[0]:
                return False
            # Rows changed after the truncate (applied first: another partition was ahead)
            # stay; everything else goes.
            later = [k for (k,) in cur.execute(
                f"SELECT key FROM {POSITIONS_TABLE} WHERE table_name = %s AND key <> %s "
                "AND pos > %s", (table.qualified_name, FLOOR_KEY, position))]  # fmt: skip
            keep = self._rows_by_key(cur, name, table, later)
            cur.execute(sql.SQL("TRUNCATE {}").format(name))
            if keep:
                columns = list(keep[0])
                cur.executemany(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    name, sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                    sql.SQL(", ").join(sql.Placeholder() * len(columns))),
                    [tuple(r.values()) for r in keep])  # fmt: skip
            cur.execute(
                f"DELETE FROM {POSITIONS_TABLE} WHERE table_name = %s AND key <> %s "
                "AND pos <= %s", (table.qualified_name, FLOOR_KEY, position))  # fmt: skip
            cur.execute(
                f"UPDATE {POSITIONS_TABLE} SET pos = %s WHERE table_name = %s AND key = %s",
                (position, table.qualified_name, FLOOR_KEY))  # fmt: skip
        log.info("target %s truncated at source position %s (%d later rows kept)",
                 table.qualified_name, position, len(keep))  # fmt: skip
        return True

    def _rows_by_key(
        self, cur: psycopg.Cursor[Any], name: sql.Composed, table: TableSchema, keys: list[str]
    ) -> list[dict[str, Any]]:  # fmt: skip
        where = sql.SQL(" AND ").join(
            sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key)
        rows = []
        for text in keys:
            cur.execute(sql.SQL("SELECT * FROM {} WHERE {}").format(name, where),
                        key_from_text(text))  # fmt: skip
            found = cur.fetchone()
            if found is not None:
                assert cur.description is not None
                rows.append({d.name: v for d, v in zip(cur.description, found, strict=True)})
        return rows

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
