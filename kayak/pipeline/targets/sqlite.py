"""Applying changes to a SQLite database."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Sequence

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.cdc.sqlite.schema import (
    affinity_type,
    coerce_value,
    quote_identifier,
    read_table_schema,
)
from kayak.pipeline.targets.base import (
    FLOOR_KEY,
    POSITIONS_TABLE,
    VERSIONS_TABLE,
    AppliedChange,
    BatchApplyError,
    TableChanges,
    Truncate,
    change_key_text,
    chunks,
    key_from_text,
    newer,
    renames_from_json,
    renames_to_json,
    statement_rows,
)
from kayak.pipeline.targets.evolve import ExistingColumn, Rename, older_mapping, plan
from kayak.pipeline.targets.types import TargetSchemaError, sqlite_column_type

__all__ = ["SqliteTarget", "declared_type"]

log = logging.getLogger(__name__)

_DECLARED = {
    ColumnType.BOOLEAN: "BOOLEAN",
    ColumnType.INT: "INTEGER",
    ColumnType.LONG: "INTEGER",
    ColumnType.DOUBLE: "REAL",
    ColumnType.DECIMAL: "NUMERIC",
    ColumnType.STRING: "TEXT",
    ColumnType.BYTES: "BLOB",
    ColumnType.ANY: "",  # no declared type: every value keeps its storage class
}


def declared_type(table: TableSchema, column: Column, connector: str) -> str:
    """The target type of a column. A SQLite source's own declared type keeps its affinity
    exactly, once validated and re-rendered (:mod:`~kayak.pipeline.targets.types`); other
    sources' types are mapped from the value kind (a PostgreSQL enum, domain or composite,
    whose values are text, is TEXT). An ``ANY`` column without a declared type gets none, so
    each value keeps its storage class.
    :class:`~kayak.pipeline.targets.types.TargetSchemaError` if refused."""
    if connector == "sqlite" and column.source_type:
        return sqlite_column_type(table, column)
    return _DECLARED[column.type]


def _same_affinity(current: str, wanted: str) -> bool:
    """SQLite keeps any value in any column; only the affinity, which converts values on the
    way in, must not change (lengths and precisions are not enforced)."""
    return affinity_type(current) is affinity_type(wanted)


def _default_sql(table: TableSchema, column: Column) -> str | None:
    """A column's default (the value rows that predate it hold) as a SQLite literal."""
    value = column.default
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    raise TargetSchemaError(
        f"table {table.qualified_name!r} column {column.name!r}: default {value!r:.40} is not "
        "created in a SQLite target"
    )


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
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} (table_name TEXT PRIMARY KEY, "
            "pos TEXT NOT NULL, renames TEXT NOT NULL, types TEXT NOT NULL)"
        )
        self._upserts: dict[TableSchema, str] = {}

    def ensure_table(
        self, table: TableSchema, connector: str, position: str = ""
    ) -> dict[str, str] | None:
        # Every type is decided before any DDL runs: a refused column creates nothing.
        types = {c.name: declared_type(table, c, connector) for c in table.columns}
        defaults = {c.name: _default_sql(table, c) for c in table.columns}
        # Several executors may meet a new table (or column) at once: the write lock makes
        # the check and the DDL one step.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            mapping = self._ensure_table(table, types, defaults, position)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._upserts.clear()
        return mapping

    def _ensure_table(
        self, table: TableSchema, types: dict[str, str], defaults: dict[str, str | None],
        position: str,
    ) -> dict[str, str] | None:  # fmt: skip
        name = quote_identifier(table.name)
        self._conn.execute(
            f"INSERT INTO {POSITIONS_TABLE} VALUES (?, ?, '') ON CONFLICT DO NOTHING",
            (table.qualified_name, FLOOR_KEY),
        )
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
            self._store_version(table, position, [], types)
            return None
        existing = read_table_schema(self._conn, table.name)
        stored = self._conn.execute(
            f"SELECT pos, renames, types FROM {VERSIONS_TABLE} WHERE table_name = ?",
            (table.qualified_name,),
        ).fetchone()
        stored_position, renames, previous = (
            stored[0], renames_from_json(stored[1]), json.loads(stored[2])) if stored \
            else ("", [], None)  # fmt: skip
        have = [ExistingColumn(c.name, c.source_type, not c.nullable and c.name not in
                               existing.key) for c in existing.columns]  # fmt: skip
        if position and position < stored_position:
            return older_mapping(table, {c.name for c in have}, renames, position)
        evolution = plan(table, have, types, _same_affinity, previous)
        renamed = dict(evolution.renames)
        if tuple(renamed.get(k, k) for k in existing.key) != table.key:
            raise ValueError(
                f"target table {table.name!r} has primary key {existing.key}, the source "
                f"{table.key}: changes could not be applied by key"
            )
        for column in evolution.retypes:
            raise TargetSchemaError(
                f"table {table.qualified_name!r} column {column.name!r}: ALTER COLUMN TYPE "
                f"{types[column.name]} is not carried to a SQLite target (SQLite cannot "
                "change a column's type affinity in place)"
            )
        for old, new in evolution.renames:
            log.info("target %s: RENAME COLUMN %s TO %s", table.qualified_name, old, new)
            self._conn.execute(f"ALTER TABLE {name} RENAME COLUMN {quote_identifier(old)} TO "
                               f"{quote_identifier(new)}")  # fmt: skip
        for column in evolution.adds:
            default = defaults[column.name]
            clause = ""
            if default is not None:
                clause = f" DEFAULT {default}" + (
                    "" if column.nullable or column.name in table.key else " NOT NULL"
                )
            log.info("target %s: ADD COLUMN %s %s%s", table.qualified_name, column.name,
                     types[column.name], clause)  # fmt: skip
            self._conn.execute(
                f"ALTER TABLE {name} ADD COLUMN {quote_identifier(column.name)} "
                f"{types[column.name]}{clause}"
            )
        wanted = {c.name for c in table.columns}
        for column_name in evolution.drop_not_null:
            if column_name in wanted:
                raise TargetSchemaError(
                    f"table {table.qualified_name!r} column {column_name!r}: DROP NOT NULL is "
                    "not carried to a SQLite target (SQLite cannot drop NOT NULL in place)"
                )
            # Gone from the source and NOT NULL here: every new row would be refused, and
            # SQLite cannot drop the constraint in place, only the column.
            log.info("target %s: DROP COLUMN %s (NOT NULL, gone from the source)",
                     table.qualified_name, column_name)  # fmt: skip
            self._conn.execute(f"ALTER TABLE {name} DROP COLUMN {quote_identifier(column_name)}")
        renames += [Rename(old, new, position) for old, new in evolution.renames]
        self._store_version(table, max(position, stored_position), renames, types)
        return None

    def _store_version(
        self, table: TableSchema, position: str, renames: list[Rename], types: dict[str, str]
    ) -> None:  # fmt: skip
        self._conn.execute(
            f"INSERT INTO {VERSIONS_TABLE} (table_name, pos, renames, types) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (table_name) DO UPDATE SET pos = excluded.pos, "
            "renames = excluded.renames, types = excluded.types",
            (table.qualified_name, position, renames_to_json(renames), json.dumps(types)),
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
        return self._run_batch([], [(table, changes)], wrap=False)[1][0]

    def apply_batch(
        self, truncates: Sequence[Truncate], tables: Sequence[TableChanges]
    ) -> tuple[list[bool], list[int]]:
        return self._run_batch(truncates, tables, wrap=True)

    def _run_batch(
        self, truncates: Sequence[Truncate], tables: Sequence[TableChanges], *, wrap: bool
    ) -> tuple[list[bool], list[int]]:
        """One transaction; ``wrap``: a failure as :class:`BatchApplyError` (else as is)."""
        conn = self._conn
        done: list[bool] = []
        counts: list[int] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, position in truncates:
                try:
                    done.append(self._truncate(table, position))
                except Exception as e:
                    if not wrap:
                        raise
                    raise BatchApplyError(table, truncate_position=position) from e
            for table, changes in tables:
                try:
                    counts.append(self._apply(table, changes) if changes else 0)
                except Exception as e:
                    if not wrap:
                        raise
                    raise BatchApplyError(table, changes) from e
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return done, counts

    def _apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        """The body of :meth:`apply`, in the caller's transaction."""
        conn = self._conn
        floor = self._floor(table)
        todo = newer(changes, table, self._applied(table, changes), floor or "")
        deletes, upserts = statement_rows(table, todo)
        if deletes:
            where = " AND ".join(f"{quote_identifier(k)} = ?" for k in table.key)
            conn.executemany(f"DELETE FROM {quote_identifier(table.name)} WHERE {where}", deletes)
        if upserts:
            conn.executemany(self._upsert_sql(table), upserts)
        conn.executemany(
            f"INSERT INTO {POSITIONS_TABLE} (table_name, key, pos) VALUES (?, ?, ?) "
            "ON CONFLICT (table_name, key) DO UPDATE SET pos = excluded.pos",
            [(table.qualified_name, text, c.position) for text, c in todo],
        )
        return len(todo)

    def _floor(self, table: TableSchema) -> str | None:
        """The position of the table's last TRUNCATE (its floor row), if it has one."""
        row = self._conn.execute(
            f"SELECT pos FROM {POSITIONS_TABLE} WHERE table_name = ? AND key = ?",
            (table.qualified_name, FLOOR_KEY),
        ).fetchone()
        return None if row is None else str(row[0])

    def truncate(self, table: TableSchema, position: str) -> bool:
        return self._run_batch([(table, position)], [], wrap=False)[0][0]

    def _truncate(self, table: TableSchema, position: str) -> bool:
        """The body of :meth:`truncate`, in the caller's transaction."""
        conn = self._conn
        name = quote_identifier(table.name)
        floor = self._floor(table)
        if floor is not None and position <= floor:
            return False
        # Rows changed after the truncate (applied first) stay; everything else goes.
        later = [key_from_text(k) for (k,) in conn.execute(
            f"SELECT key FROM {POSITIONS_TABLE} WHERE table_name = ? AND key <> ? "
            "AND pos > ?", (table.qualified_name, FLOOR_KEY, position))]  # fmt: skip
        where = " AND ".join(f"{quote_identifier(k)} = ?" for k in table.key)
        keep = [
            row
            for key in later
            for (row,) in conn.execute(f"SELECT rowid FROM {name} WHERE {where}", key)
        ]
        conn.execute(f"DELETE FROM {name} WHERE rowid NOT IN (SELECT value FROM json_each(?))",
                     (json.dumps(keep),))  # fmt: skip
        conn.execute(
            f"DELETE FROM {POSITIONS_TABLE} WHERE table_name = ? AND key <> ? AND pos <= ?",
            (table.qualified_name, FLOOR_KEY, position))  # fmt: skip
        conn.execute(
            f"INSERT INTO {POSITIONS_TABLE} VALUES (?, ?, ?) "
            "ON CONFLICT (table_name, key) DO UPDATE SET pos = excluded.pos",
            (table.qualified_name, FLOOR_KEY, position))  # fmt: skip
        log.info("target %s truncated at source position %s (%d later rows kept)",
                 table.qualified_name, position, len(keep))  # fmt: skip
        return True

    def _applied(self, table: TableSchema, changes: Sequence[AppliedChange]) -> dict[str, str]:
        texts = [change_key_text(table, c) for c in changes]
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
