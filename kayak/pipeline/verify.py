"""Proving a replica: source and target compared row by row."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from kayak.cdc.change import ColumnType, Row, TableSchema
from kayak.pipeline.targets.base import Target, key_text

__all__ = ["Difference", "Verification", "compare_rows", "verify_table"]


@dataclass(frozen=True)
class Difference:
    """One key whose rows differ (``None`` = missing on that side)."""

    key: str
    source: Row | None
    target: Row | None


@dataclass
class Verification:
    """The outcome of comparing one table: its row count in the source and the first
    differences (none when equal)."""

    table_schema: TableSchema
    rows: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def table(self) -> str:
        return self.table_schema.qualified_name

    @property
    def equal(self) -> bool:
        return not self.differences


def _comparable(kind: ColumnType, value: Any) -> Any:
    # Decimal text may differ in form between databases (12.5 vs 12.50): compare the numbers.
    if kind is ColumnType.DECIMAL and value is not None:
        try:
            return Decimal(str(value)).normalize()
        except InvalidOperation:
            return value
    return value


def compare_rows(
    table: TableSchema, source_rows: list[Row], target_rows: list[Row], *, limit: int = 10
) -> Verification:
    """Compare two row lists by primary key; at most ``limit`` differences are kept."""

    def index(rows: list[Row]) -> dict[str, tuple[Any, ...]]:
        return {
            key_text(table, row): tuple(
                _comparable(c.type, row.get(c.name)) for c in table.columns
            )
            for row in rows
        }

    source = index(source_rows)
    target = index(target_rows)
    result = Verification(table, len(source))
    names = [c.name for c in table.columns]
    for key in sorted(source.keys() | target.keys()):
        s, t = source.get(key), target.get(key)
        if s != t:
            result.differences.append(
                Difference(
                    key,
                    dict(zip(names, s, strict=True)) if s is not None else None,
                    dict(zip(names, t, strict=True)) if t is not None else None,
                )
            )
            if len(result.differences) >= limit:
                break
    return result


def verify_table(table: TableSchema, source_rows: list[Row], target: Target) -> Verification:
    """Compare a source table's rows with the target's copy."""
    return compare_rows(table, source_rows, target.read_rows(table))
