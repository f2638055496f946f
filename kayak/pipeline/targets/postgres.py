"""Applying changes to a PostgreSQL database (``INSERT … ON CONFLICT`` / ``DELETE``, batched).

A PostgreSQL source's user-defined column types are created here before the table that uses
them (:meth:`PostgresTarget.ensure_table`), from their validated description
(:class:`~kayak.pipeline.targets.user_types.PgUserType`):

- an enum with the same labels in the same order; labels the source added since are added in
  their place when a newer schema carries them, and a label that reaches the target in a
  change before any schema carries it (``ALTER TYPE … ADD VALUE`` in the source does not
  change the table's shape) is added when that change arrives, last (PostgreSQL's own place
  for ``ADD VALUE``; a label the source added ``BEFORE``/``AFTER`` another sorts last here);
- a domain over the same base type (its constraints are not carried);
- a composite with the same fields, fields the source added since added at the end.

A type that exists in the target as something else (another kind, base type or fields) is
refused with one line. Values of a SQLite source's ``ANY`` columns are stored as their text
form in a ``text`` column (read back as :class:`~kayak.pipeline.targets.types.TextForm`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.change import ColumnType, Row, TableSchema
from kayak.pipeline.targets.base import (
    FLOOR_KEY,
    POSITIONS_TABLE,
    VERSIONS_TABLE,
    AppliedChange,
    BatchApplyError,
    TableChanges,
    Truncate,
    change_key_text,
    key_from_text,
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
from kayak.pipeline.targets.postgres_columns import declared_type, default_sql, same_type
from kayak.pipeline.targets.postgres_rows import connect, read_postgres_rows
from kayak.pipeline.targets.types import TargetSchemaError, any_text_form
from kayak.pipeline.targets.user_types import PgUserType, pg_user_type

__all__ = ["PostgresTarget"]

log = logging.getLogger(__name__)


# pg_advisory_xact_lock key for kayak's DDL on a target (any fixed bigint: "kayakDDL").
_DDL_LOCK = 0x6B6179616B44444C


class PostgresTarget:
    """A PostgreSQL database as a replication target (see ``targets.base``). Tables are
    written in the schema the change came from (created if missing)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn = connect(dsn)
        # (schema, enum type) -> the labels the target's enum is known to have
        self._labels: dict[tuple[str, str], set[str]] = {}
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
        defaults = {c.name: default_sql(table, c, types[c.name]) for c in table.columns}
        user_types = {c.name: pg_user_type(table, c) for c in table.columns
                      if connector == "postgresql" and c.user_type is not None}  # fmt: skip
        schema = table.schema if table.schema != "main" else "public"
        with self._conn.transaction():
            self._lock_ddl()
            for name in sorted({schema, *(t.schema for t in user_types.values())}):
                self._conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(name))
                )
            for column_name, user_type in user_types.items():
                self._ensure_user_type(table, column_name, user_type)
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
            evolution = plan(table, existing, types, same_type, previous)
            self._evolve(table, evolution, types, defaults)
            renames += [Rename(old, new, position) for old, new in evolution.renames]
            self._store_version(table, max(position, stored_position), renames, types)
        return None

    # -- user-defined types ---------------------------------------------------------------

    def _ensure_user_type(self, table: TableSchema, column: str, wanted: PgUserType) -> None:
        """Create a column's user-defined type, or bring the existing one up to the
        description (new enum labels, new composite fields); :class:`TargetSchemaError` if a
        type of that name exists and is something else."""
        found = self._conn.execute(
            "SELECT t.typtype, format_type(t.typbasetype, t.typtypmod), "
            "COALESCE(c.relkind, '') FROM pg_type t "
            "JOIN pg_namespace n ON n.oid = t.typnamespace "
            "LEFT JOIN pg_class c ON c.oid = t.typrelid "
            "WHERE n.nspname = %s AND t.typname = %s",
            (wanted.schema, wanted.name),
        ).fetchone()

        def refuse(why: str) -> TargetSchemaError:
            return TargetSchemaError(
                f"table {table.qualified_name!r} column {column!r}: type "
                f"{wanted.qualified_name!r} exists in the target {why}"
            )

        if found is None:
            log.info("target: CREATE %s %s", "DOMAIN" if wanted.kind == "domain" else "TYPE",
                     wanted.qualified_name)  # fmt: skip
            self._conn.execute(wanted.create())
            return
        typtype, base, relkind = found
        kind = {"e": "enum", "d": "domain", "c": "composite"}.get(typtype, "another kind")
        if kind != wanted.kind:
            raise refuse(f"as {kind}, the source's is {wanted.kind}")
        if wanted.kind == "enum":
            self._add_labels(wanted, wanted.labels)
        elif wanted.kind == "domain":
            assert wanted.base is not None
            if not same_type(base, wanted.base.render()):
                raise refuse(f"as a domain over {base}, the source's is over "
                             f"{wanted.base.render()}")  # fmt: skip
        else:
            self._add_fields(wanted, relkind, refuse)

    def _enum_labels(self, user_type: PgUserType) -> list[str]:
        rows = self._conn.execute(
            "SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
            "JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = %s AND t.typname = %s ORDER BY e.enumsortorder",
            (user_type.schema, user_type.name),
        ).fetchall()
        return [r[0] for r in rows]

    def _add_labels(self, user_type: PgUserType, labels: Sequence[str]) -> None:
        """Add the labels the target's enum lacks, each before the next label of ``labels``
        the target has (last if none). Runs in the caller's transaction."""
        have = self._enum_labels(user_type)
        present = [label for label in labels if label in have]
        if present != [label for label in have if label in set(labels)]:
            log.warning("target: enum %s sorts its labels %s, the source %s (PostgreSQL "
                        "cannot reorder enum labels)", user_type.qualified_name, have,
                        list(labels))  # fmt: skip
        for at, label in enumerate(labels):
            if label in have:
                continue
            before = next((later for later in labels[at + 1 :] if later in have), None)
            log.info("target: enum %s: ADD VALUE %r%s", user_type.qualified_name, label,
                     f" BEFORE {before!r}" if before else "")  # fmt: skip
            self._conn.execute(user_type.add_label(label, before))
            have.insert(have.index(before) if before else len(have), label)
        self._labels[(user_type.schema, user_type.name)] = set(have)

    def _add_fields(
        self, user_type: PgUserType, relkind: str, refuse: Any
    ) -> None:  # fmt: skip
        rows = self._conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_type t ON t.typrelid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = %s AND t.typname = %s AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (user_type.schema, user_type.name),
        ).fetchall()
        wanted = [(name, kind.render()) for name, kind in user_type.fields]
        have = [(name, kind) for name, kind in rows]
        same = len(have) <= len(wanted) and all(
            h[0] == w[0] and same_type(h[1], w[1]) for h, w in zip(have, wanted, strict=False)
        )
        if not same:
            shown = ", ".join(f"{n} {k}" for n, k in have)
            raise refuse(f"as a composite of ({shown:.120}), the source's fields differ")
        if len(have) < len(wanted) and relkind != "c":
            raise refuse("as a table's row type, to which fields are not added")
        for name, kind in user_type.fields[len(have) :]:
            log.info("target: composite %s: ADD ATTRIBUTE %s %s", user_type.qualified_name,
                     name, kind.render())  # fmt: skip
            self._conn.execute(user_type.add_field(name, kind))

    def _add_arriving_labels(self, table: TableSchema, changes: Sequence[AppliedChange]) -> None:
        """Enum labels the changes carry that the target's enum lacks (the source ran
        ``ALTER TYPE … ADD VALUE`` after its schema was registered): added, last, in their
        own transaction (a label is usable once the transaction adding it commits)."""
        for column in table.columns:
            user_type = column.user_type
            if user_type is None or user_type.kind != "enum" or user_type.dimensions:
                continue
            known = self._labels.get((user_type.schema, user_type.name))
            values = {c.after.get(column.name) for c in changes
                      if c.after is not None} - {None}  # fmt: skip
            if known is not None and values <= known:
                continue
            parsed = pg_user_type(table, column)
            with self._conn.transaction():
                self._lock_ddl()
                have = self._enum_labels(parsed)
                new = sorted(v for v in values if isinstance(v, str) and v not in have)
                for label in new:
                    log.info("target: enum %s: ADD VALUE %r (a change carries the label; the "
                             "source added it after its schema was registered)",
                             parsed.qualified_name, label)  # fmt: skip
                    self._conn.execute(parsed.add_label(label, None))
            self._labels[(parsed.schema, parsed.name)] = set(have) | set(new)

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
                clause = sql.SQL(" DEFAULT {}{}").format(
                    default,
                    sql.SQL("" if column.nullable or column.name in table.key else " NOT NULL"),
                )
            log.info(
                "target %s: ADD COLUMN %s %s%s",
                table.qualified_name,
                column.name,
                types[column.name],
                " with a default" if default is not None else "",
            )
            self._conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}{}").format(
                    name, sql.Identifier(column.name), sql.SQL(types[column.name]), clause
                )
            )
        for column_name in evolution.drop_not_null:
            log.info("target %s: column %s made nullable (gone from the source or nullable "
                     "there)", table.qualified_name, column_name)  # fmt: skip
            self._conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(
                    name, sql.Identifier(column_name)
                )
            )

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
        changes = self._before_apply(table, changes)
        with self._conn.transaction(), self._conn.cursor() as cur:
            return self._apply(cur, table, changes)

    def apply_batch(
        self, truncates: Sequence[Truncate], tables: Sequence[TableChanges]
    ) -> tuple[list[bool], list[int]]:
        # Enum labels first, each in a transaction of its own: a label added in the batch's
        # transaction could not be used before it commits.
        ready = [(t, self._before_apply(t, c) if c else c) for t, c in tables]
        done: list[bool] = []
        counts: list[int] = []
        with self._conn.transaction(), self._conn.cursor() as cur:
            for table, position in truncates:
                try:
                    done.append(self._truncate(cur, table, position))
                except Exception as e:
                    raise BatchApplyError(table, truncate_position=position) from e
            for table, changes in ready:
                try:
                    counts.append(self._apply(cur, table, changes) if changes else 0)
                except Exception as e:
                    raise BatchApplyError(table, changes) from e
        return done, counts

    def _before_apply(
        self, table: TableSchema, changes: Sequence[AppliedChange]
    ) -> Sequence[AppliedChange]:  # fmt: skip
        """Changes as the table's columns hold them, their enum labels added to the target."""
        if any(c.type is ColumnType.ANY for c in table.columns):
            changes = [_as_text_forms(table, c) for c in changes]
        self._add_arriving_labels(table, changes)
        return changes

    def _apply(
        self, cur: psycopg.Cursor[Any], table: TableSchema, changes: Sequence[AppliedChange]
    ) -> int:  # fmt: skip
        """The body of :meth:`apply`, in the caller's transaction."""
        name = self._name(table)
        # FOR SHARE: applies of the table run side by side, a truncate waits for them
        # (and they for it), and this reads the floor a committed truncate left.
        floor_row = cur.execute(
            f"SELECT pos FROM {POSITIONS_TABLE} WHERE table_name = %s AND key = %s "
            "FOR SHARE", (table.qualified_name, FLOOR_KEY),
        ).fetchone()  # fmt: skip
        texts = [change_key_text(table, c) for c in changes]
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
        with self._conn.transaction(), self._conn.cursor() as cur:
            return self._truncate(cur, table, position)

    def _truncate(self, cur: psycopg.Cursor[Any], table: TableSchema, position: str) -> bool:
        """The body of :meth:`truncate`, in the caller's transaction."""
        name = self._name(table)
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
            sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key
        )
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


def _as_text_forms(table: TableSchema, change: AppliedChange) -> AppliedChange:
    """A change with its ``ANY`` columns' values as the text forms a ``text`` column holds."""
    kinds = {c.name: c.type for c in table.columns}

    def converted(row: Row | None) -> Row | None:
        if row is None:
            return None
        return {name: any_text_form(value) if kinds.get(name) is ColumnType.ANY else value
                for name, value in row.items()}  # fmt: skip

    key = converted(change.key)
    assert key is not None
    return AppliedChange(change.op, key, converted(change.after), change.position, change.ts_ms)
