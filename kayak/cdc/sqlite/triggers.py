"""Installing and removing the CDC log table and triggers on a SQLite table.

Each image is a JSON object written by ``json_object`` inside the trigger. Two kinds of value
do not survive JSON as they are, so the trigger tags them: a BLOB becomes ``{"$b": HEX}`` and
a REAL becomes ``{"$r": "%!.17g text"}`` (SQLite's JSON prints floats with 15 digits, which
would round them). The log's ``change_id`` is ``AUTOINCREMENT`` so an id is never reused after
the log was trimmed: positions only ever grow.

A column added later (``ALTER TABLE … ADD COLUMN``) is captured once the triggers are
installed again: call :func:`install_triggers` in the same transaction as the ALTER for no
window at all; otherwise the capture reinstalls them when it notices the new schema, and
changes written in between carry the new column's default.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kayak.cdc.change import TableSchema
from kayak.cdc.envelope import check_field_names
from kayak.cdc.errors import SourceSetupError
from kayak.cdc.sqlite.schema import quote_identifier, read_table_schema

__all__ = ["disable", "enable", "install_triggers", "log_table_name"]

_LOG_SUFFIX = "_kayak_cdc_log"
_OPS = {"insert": "c", "update": "u", "delete": "d"}

# Milliseconds since the epoch, from SQLite's clock (julianday keeps sub-second precision).
_NOW_MS = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"


def log_table_name(table: str) -> str:
    return table + _LOG_SUFFIX


def _trigger_name(table: str, event: str) -> str:
    return f"{table}_kayak_cdc_{event}"


def _image(schema: TableSchema, row: str) -> str:
    """SQL building the JSON image of ``row`` (``NEW``/``OLD`` or a table alias)."""
    parts = []
    for column in schema.columns:
        ref = f"{row}.{quote_identifier(column.name)}"
        name = "'" + column.name.replace("'", "''") + "'"
        value = (
            f"CASE typeof({ref}) WHEN 'blob' THEN json_object('$b', hex({ref})) "
            f"WHEN 'real' THEN json_object('$r', printf('%!.17g', {ref})) ELSE {ref} END"
        )
        parts.append(f"{name}, {value}")
    return "json_object(" + ", ".join(parts) + ")"


def install_triggers(conn: sqlite3.Connection, table: str) -> TableSchema:
    """(Re)create the log table if missing and the three triggers for the table's current
    columns. Runs in the caller's transaction when there is one."""
    schema = read_table_schema(conn, table)
    log = quote_identifier(log_table_name(table))
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {log} ("
        "change_id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "op TEXT NOT NULL, before TEXT, after TEXT, "
        f"ts_ms INTEGER NOT NULL DEFAULT ({_NOW_MS}))"
    )
    base = quote_identifier(table)
    for event, op in _OPS.items():
        name = quote_identifier(_trigger_name(table, event))
        before = _image(schema, "OLD") if event != "insert" else "NULL"
        after = _image(schema, "NEW") if event != "delete" else "NULL"
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(
            f"CREATE TRIGGER {name} AFTER {event.upper()} ON {base} BEGIN "
            f"INSERT INTO {log} (op, before, after) VALUES ('{op}', {before}, {after}); END"
        )
    return schema


def enable(path: str, table: str) -> int:
    """Start capturing ``table`` of the database at ``path``; returns the number of existing
    rows logged as the initial snapshot (``op = r``).

    The triggers and the snapshot go in one write transaction, so every row is either in the
    snapshot or arrives as a later change: no gap, no double. Enabling an already captured
    table only refreshes its triggers. A database that does not exist is an error (never
    created empty).
    """
    conn = _connect_existing(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (log_table_name(table),),
            ).fetchone()
            captured = read_table_schema(conn, table)
            try:
                check_field_names(captured)
            except ValueError as e:
                raise SourceSetupError(str(e)) from None
            schema = install_triggers(conn, table)
            snapshot = 0
            if not exists:
                cursor = conn.execute(
                    f"INSERT INTO {quote_identifier(log_table_name(table))} (op, after) "
                    f"SELECT 'r', {_image(schema, 't')} FROM {quote_identifier(table)} AS t "
                    f"ORDER BY {', '.join('t.' + quote_identifier(k) for k in schema.key)}"
                )
                snapshot = cursor.rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return snapshot
    finally:
        conn.close()


def _connect_existing(path: str) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise SourceSetupError(f"SQLite database {path} does not exist")
    return sqlite3.connect(path, isolation_level=None)


def disable(path: str, table: str, *, drop_log: bool = False) -> None:
    """Stop capturing ``table``: drop its triggers (and the log table with ``drop_log``).
    A table that is not captured there is an error, so a typo does not pass for success."""
    conn = _connect_existing(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        names = [_trigger_name(table, event) for event in _OPS] + [log_table_name(table)]
        found = conn.execute(
            f"SELECT count(*) FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})",
            names,
        ).fetchone()
        if not found or not found[0]:
            conn.execute("ROLLBACK")
            raise SourceSetupError(f"table {table!r} is not captured in {path}")
        for event in _OPS:
            conn.execute(f"DROP TRIGGER IF EXISTS {quote_identifier(_trigger_name(table, event))}")
        if drop_log:
            conn.execute(f"DROP TABLE IF EXISTS {quote_identifier(log_table_name(table))}")
        conn.execute("COMMIT")
    finally:
        conn.close()
