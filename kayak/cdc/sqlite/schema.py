"""A SQLite table's columns and key, and the mapping of its values to kayak's column types."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

from kayak.cdc.change import Column, ColumnType, TableSchema
from kayak.cdc.errors import CaptureError

__all__ = ["affinity_type", "coerce_value", "quote_identifier", "read_table_schema"]


def quote_identifier(name: str) -> str:
    """``name`` as a SQL identifier, whatever characters it holds."""
    return '"' + name.replace('"', '""') + '"'


def affinity_type(declared: str) -> ColumnType:
    """The column type for a declared SQLite type, by SQLite's own affinity rules (§3.1 of
    "Datatypes In SQLite"), with NUMERIC split into exact decimals and booleans.

    A column with no declared type (BLOB affinity: values are stored as given) or one of
    NUMERIC affinity that names no kind kayak knows (``DATETIME``, ``DATE``, ``JSON``,
    ``ANY``…) is ``ANY``: each value keeps its own storage class."""
    t = declared.upper()
    if not t.strip():
        return ColumnType.ANY
    if "INT" in t:
        return ColumnType.LONG
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return ColumnType.STRING
    if "BLOB" in t:
        return ColumnType.BYTES
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return ColumnType.DOUBLE
    if "BOOL" in t:
        return ColumnType.BOOLEAN
    if "DEC" in t or "NUMERIC" in t:
        return ColumnType.DECIMAL
    # DATE, DATETIME, JSON...: NUMERIC affinity, which stores integers, reals and text as
    # they come (numeric-looking text as a number): keep each value's type.
    return ColumnType.ANY


def read_table_schema(conn: sqlite3.Connection, table: str) -> TableSchema:
    """The captured shape of ``table``; a clear error if it is missing or has no primary key."""
    rows = conn.execute(f"PRAGMA table_info({quote_identifier(table)})").fetchall()
    if not rows:
        raise CaptureError(f"SQLite table {table!r} does not exist")
    columns = []
    key: list[tuple[int, str]] = []
    for _cid, name, declared, notnull, default, pk in rows:
        column = Column(
            name=name,
            type=affinity_type(declared or ""),
            nullable=not notnull and not pk,
            source_type=declared or "",
        )
        columns.append(replace(column, default=_default_value(conn, table, column, default)))
        if pk:
            key.append((pk, name))
    if not key:
        raise CaptureError(
            f"SQLite table {table!r} has no primary key: changes could not be applied by key"
        )
    return TableSchema("main", table, tuple(columns), tuple(name for _, name in sorted(key)))


def _default_value(
    conn: sqlite3.Connection, table: str, column: Column, expression: str | None
) -> Any:
    """The value a column's default gives (the value rows that predate an added column hold:
    ``ADD COLUMN`` only takes constant defaults), or None for no default or one that is not
    a constant (``CURRENT_TIMESTAMP``, an expression)."""
    if expression is None or "(" in expression or expression.upper().startswith("CURRENT_"):
        return None
    try:
        # The database's own schema text; a constant (ADD COLUMN allows nothing else).
        (value,) = conn.execute(f"SELECT {expression}").fetchone()
        return coerce_value(table, column, value)
    except (sqlite3.Error, CaptureError):
        return None


def coerce_value(table: str, column: Column, value: Any) -> Any:
    """A logged value in the representation of ``column.type`` (see ``kayak.cdc.change``).

    SQLite lets any column hold any value; a value is converted only when nothing is lost
    (an integer in a REAL column, a number in a TEXT column). Anything else is an error
    naming the column, never a silent change of data.
    """
    if value is None:
        return None
    kind = column.type
    if kind is ColumnType.ANY:
        if isinstance(value, int | float | str | bytes) and not isinstance(value, bool):
            return value
    elif kind is ColumnType.LONG or kind is ColumnType.INT:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is ColumnType.DOUBLE:
        if isinstance(value, float):
            return value
        if isinstance(value, int) and abs(value) <= 1 << 53:
            return float(value)
    elif kind is ColumnType.STRING or kind is ColumnType.DECIMAL:
        if isinstance(value, str):
            return value
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return repr(value)
    elif kind is ColumnType.BYTES:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode()
    elif kind is ColumnType.BOOLEAN and isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CaptureError(
        f"SQLite table {table!r} column {column.name!r} ({column.source_type or 'no type'}) "
        f"holds {type(value).__name__} {value!r:.60}, which its type cannot carry"
    )
