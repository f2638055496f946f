"""Rows read back out of a PostgreSQL database (a target, or a PostgreSQL source for
verification), values in the representation captured ones have."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.cdc.postgres.types import SESSION_SETTINGS, decode_value
from kayak.pipeline.targets.types import TextForm

__all__ = ["connect", "read_postgres_rows"]


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection with the session settings the PostgreSQL source uses, so
    values read as text here look exactly like captured ones."""
    conn = psycopg.connect(dsn, autocommit=True)
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    return conn


def _boolean_domain(column: Column) -> bool:
    user_type = column.user_type
    return (
        user_type is not None
        and user_type.kind == "domain"
        and not user_type.dimensions
        and user_type.base in ("boolean", "bool")
    )


def read_postgres_rows(
    conn: psycopg.Connection[Any], table: TableSchema, name: sql.Composable
) -> list[Row]:
    """Every row of a table in key order, values in their column types' representation."""
    # Text output, as the source reads values; booleans as booleans (their ::text is 'true',
    # not the 't' the type's output function and the replication stream give).
    cols = sql.SQL(", ").join(
        sql.SQL(
            "{}"
            if c.type is ColumnType.BOOLEAN
            else "CASE WHEN {} THEN 't' WHEN NOT {} THEN 'f' END"
            if _boolean_domain(c)
            else "{}::text"
        ).format(*[sql.Identifier(c.name)] * (2 if _boolean_domain(c) else 1))
        for c in table.columns
    )  # a boolean domain's values as its output function (and the stream) writes them
    order = sql.SQL(", ").join(sql.Identifier(k) for k in table.key)
    rows = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY {}").format(cols, name, order))
    return [
        {
            c.name: v
            if v is None or c.type is ColumnType.BOOLEAN
            else TextForm(v)
            if c.type is ColumnType.ANY
            else decode_value(c.type, v)
            for c, v in zip(table.columns, row, strict=True)
        }
        for row in rows
    ]
