"""A replicated column's type and default in a PostgreSQL target: decided from the source's
description before any DDL runs, and compared with what the target already has."""

from __future__ import annotations

import math
import re

from psycopg import sql

from kayak.cdc.change import Column, ColumnType, TableSchema
from kayak.pipeline.targets.types import (
    TargetSchemaError,
    TypeSyntaxError,
    parse_pg_type,
    pg_column_type,
)
from kayak.pipeline.targets.user_types import pg_user_type

__all__ = ["declared_type", "default_sql", "same_type"]


_DECLARED = {
    ColumnType.BOOLEAN: "boolean",
    ColumnType.INT: "integer",
    ColumnType.LONG: "bigint",
    ColumnType.DOUBLE: "double precision",
    ColumnType.DECIMAL: "numeric",
    ColumnType.STRING: "text",
    ColumnType.BYTES: "bytea",
    ColumnType.ANY: "text",  # each value's text form
}


def declared_type(table: TableSchema, column: Column, connector: str) -> str:
    """The target type of a column: a PostgreSQL source's own type, parsed and re-rendered
    from the fixed type table (:mod:`~kayak.pipeline.targets.types`), or the value kind's
    type. :class:`~kayak.pipeline.targets.types.TargetSchemaError` if refused."""
    if connector == "postgresql" and column.user_type is not None:
        return pg_user_type(table, column).column_type()
    if connector == "postgresql" and column.source_type:
        return pg_column_type(table, column)
    return _DECLARED[column.type]


def same_type(current: str, wanted: str) -> bool:
    """Whether a target column of type ``current`` (``format_type``'s text) already is
    ``wanted``; user-defined types compare by name (``format_type`` leaves out a schema on
    the search path), other types outside the fixed table as text."""
    try:
        return parse_pg_type(current) == parse_pg_type(wanted)
    except TypeSyntaxError:
        return _type_name(current) == _type_name(wanted)


_NAME_PART = re.compile(r'"(?:[^"]|"")*"|[^".]+')


def _type_name(text: str) -> tuple[str, int]:
    """A type's spelling as (its last name part, unquoted, array dimensions)."""
    text = text.strip()
    dimensions = 0
    while text.endswith("[]"):
        text, dimensions = text[:-2].rstrip(), dimensions + 1
    parts = _NAME_PART.findall(text)
    last = parts[-1] if parts else text
    if last.startswith('"'):
        return last[1:-1].replace('""', '"'), dimensions
    return last.lower(), dimensions


def default_sql(table: TableSchema, column: Column, declared: str) -> sql.Composable | None:
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
            f"{type(value).__name__} is not created"
        )
    return sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(declared))
