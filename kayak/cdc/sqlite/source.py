"""Reading a SQLite database's CDC log tables as :class:`~kayak.cdc.change.Change` values."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kayak.cdc.change import Change, Column, Op, Row, TableSchema, format_position
from kayak.cdc.errors import CaptureError
from kayak.cdc.sqlite.schema import coerce_value, quote_identifier, read_table_schema
from kayak.cdc.sqlite.triggers import install_triggers, log_table_name

__all__ = ["SqliteSource"]

log = logging.getLogger(__name__)

_OPS = {"c": Op.CREATE, "u": Op.UPDATE, "d": Op.DELETE, "r": Op.READ}


def _untag(value: Any) -> Any:
    """Undo the trigger's tagging of BLOB and REAL values (see ``triggers``)."""
    if isinstance(value, dict):
        if "$b" in value:
            return bytes.fromhex(value["$b"])
        if "$r" in value:
            return float(value["$r"])
    return value


def _carry_renames(before: TableSchema, after: TableSchema) -> TableSchema:
    """``after`` with each renamed column's earlier names. SQLite keeps a column's place on
    RENAME COLUMN and adds columns at the end, and refuses DROP COLUMN of a column the
    capture triggers name: a new name in an old place is a rename."""
    columns = list(after.columns)
    for i, (old, new) in enumerate(zip(before.columns, after.columns, strict=False)):
        if old.name == new.name:
            columns[i] = replace(new, renamed_from=old.renamed_from)
        elif old.name not in {c.name for c in after.columns}:
            log.info("table %s: column %s renamed to %s", after.name, old.name, new.name)
            columns[i] = replace(new, renamed_from=(*old.renamed_from, old.name))
    return replace(after, columns=tuple(columns))


class SqliteSource:
    """A :class:`~kayak.cdc.source.ChangeSource` over tables captured with
    :func:`kayak.cdc.sqlite.enable`.

    Changes of one table come out in change-id order; tables are read in turn. Nothing is
    deleted from a log table until :meth:`acknowledge`; a new source on the same database
    starts again from the oldest change still logged.
    """

    def __init__(self, path: str, tables: Sequence[str], *, poll_interval_s: float = 0.02):
        if not tables:
            raise CaptureError("no tables to capture")
        self.path = path
        self._poll_interval_s = poll_interval_s
        # Made in one thread, used by the capture thread: one user at a time, so sharing is safe.
        self._conn = sqlite3.connect(
            path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._schemas: dict[str, TableSchema] = {}
        self._last_read: dict[str, int] = {}
        self._unacknowledged: list[tuple[str, int]] = []
        self._schema_version = -1
        for table in tables:
            exists = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (log_table_name(table),),
            ).fetchone()
            if not exists:
                raise CaptureError(
                    f"SQLite table {table!r} is not captured: run `kayak cdc enable {path} "
                    f"{table}` first"
                )
            self._last_read[table] = 0
        self._refresh_schemas()

    def tables(self) -> Sequence[TableSchema]:
        return list(self._schemas.values())

    def _refresh_schemas(self) -> None:
        version = self._conn.execute("PRAGMA schema_version").fetchone()[0]
        if version == self._schema_version:
            return
        for table in self._last_read:
            schema = read_table_schema(self._conn, table)
            known = self._schemas.get(table)
            if known is not None:
                schema = _carry_renames(known, schema)
            if known is not None and known.columns != schema.columns:
                log.info("table %s changed columns; reinstalling its CDC triggers", table)
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    install_triggers(self._conn, table)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            self._schemas[table] = schema
        self._schema_version = self._conn.execute("PRAGMA schema_version").fetchone()[0]

    def read(self, max_changes: int, timeout_s: float) -> list[Change]:
        deadline = time.monotonic() + timeout_s
        while True:
            self._refresh_schemas()
            read_up_to, handed_out = dict(self._last_read), len(self._unacknowledged)
            changes: list[Change] = []
            share = max(1, max_changes // len(self._last_read))
            for table in self._last_read:
                changes.extend(self._read_table(table, min(share, max_changes - len(changes))))
                if len(changes) >= max_changes:
                    break
            if self._schema_changed():
                # A schema change committed between reading the schemas and reading the log:
                # rows written after it may have been read in the old shape (a column added
                # would be left out). Forget them and read them again in the new shape.
                self._last_read = read_up_to
                while len(self._unacknowledged) > handed_out:
                    self._unacknowledged.pop()
                continue
            if changes or time.monotonic() >= deadline:
                return changes
            time.sleep(self._poll_interval_s)

    def _schema_changed(self) -> bool:
        return bool(self._conn.execute("PRAGMA schema_version").fetchone()[0]
                    != self._schema_version)  # fmt: skip

    def _read_table(self, table: str, limit: int) -> list[Change]:
        if limit <= 0:
            return []
        rows = self._conn.execute(
            f"SELECT change_id, op, before, after, ts_ms FROM "
            f"{quote_identifier(log_table_name(table))} WHERE change_id > ? "
            "ORDER BY change_id LIMIT ?",
            (self._last_read[table], limit),
        ).fetchall()
        schema = self._schemas[table]
        changes = []
        for change_id, op, before, after, ts_ms in rows:
            changes.append(
                Change(
                    op=_OPS[op],
                    table=schema,
                    before=self._image(schema, before, change_id),
                    after=self._image(schema, after, change_id, current=True),
                    position=format_position(change_id),
                    ts_ms=ts_ms,
                    snapshot="true" if op == "r" else "false",
                    change_id=change_id,
                )
            )
            self._unacknowledged.append((table, change_id))
        if rows:
            self._last_read[table] = rows[-1][0]
        return changes

    def _image(
        self, schema: TableSchema, text: str | None, change_id: int, *, current: bool = False
    ) -> Row | None:  # fmt: skip
        if text is None:
            return None
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise CaptureError(
                f"change {change_id} of {schema.name}: unreadable image in the log: {e}"
            ) from None
        # A renamed column is under an earlier name, and an added one absent, in images
        # logged before the triggers were renewed for the new columns.
        row: Row = {}
        absent = []
        for c in schema.columns:
            name = next((n for n in (c.name, *reversed(c.renamed_from)) if n in raw), None)
            if name is None:
                absent.append(c)
            row[c.name] = c.default if name is None else coerce_value(
                schema.name, c, _untag(raw[name]))
        if absent and current:
            # The value it was written with is not logged: take the row's current one (a
            # later change of the row, which carries its own value, follows in the log; a
            # row deleted since keeps the default until its delete is applied).
            row.update(self._current_values(schema, row, absent))
        return row

    def _current_values(self, schema: TableSchema, row: Row, columns: list[Column]) -> Row:
        where = " AND ".join(f"{quote_identifier(k)} = ?" for k in schema.key)
        found = self._conn.execute(
            f"SELECT {', '.join(quote_identifier(c.name) for c in columns)} FROM "
            f"{quote_identifier(schema.name)} WHERE {where}", [row[k] for k in schema.key],
        ).fetchone()  # fmt: skip
        if found is None:
            return {}
        return {c.name: coerce_value(schema.name, c, v)
                for c, v in zip(columns, found, strict=True)}  # fmt: skip

    def acknowledge(self, last: Change) -> None:
        if last.change_id is None:
            raise ValueError("not a change of this source")
        entry = (last.table.name, last.change_id)
        try:
            upto = self._unacknowledged.index(entry)
        except ValueError:
            raise ValueError(f"change {entry} was not read or is already acknowledged") from None
        trim: dict[str, int] = {}
        for table, change_id in self._unacknowledged[: upto + 1]:
            trim[table] = max(trim.get(table, 0), change_id)
        del self._unacknowledged[: upto + 1]
        for table, change_id in trim.items():
            self._conn.execute(
                f"DELETE FROM {quote_identifier(log_table_name(table))} WHERE change_id <= ?",
                (change_id,),
            )

    def close(self) -> None:
        self._conn.close()
