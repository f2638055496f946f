"""Change data capture: row changes from a database as Debezium-style events on the log."""

from __future__ import annotations

from kayak.cdc.change import Change, Column, ColumnType, Op, Row, TableSchema, format_position
from kayak.cdc.source import ChangeSource

__all__ = [
    "Change",
    "ChangeSource",
    "Column",
    "ColumnType",
    "Op",
    "Row",
    "TableSchema",
    "format_position",
]
