"""Filling the columns an update leaves out as "unchanged TOAST" (see
:mod:`kayak.cdc.postgres.source`): the last large values seen per row, and reading a row's
current values by key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.adapt import Loader

from kayak.cdc.change import Row, TableSchema
from kayak.cdc.errors import CaptureError
from kayak.cdc.postgres.types import decode_value

__all__ = ["TOASTABLE_LEN", "ToastCache", "fetch_current", "raw_text_cursor"]

# Values this long may be stored out of line (TOAST starts near 2 kB), so cache them.
TOASTABLE_LEN = 1024


@dataclass
class ToastCache:
    """Last seen large values per (table, key), bounded by total size, least recent out."""

    max_bytes: int
    entries: OrderedDict[tuple[str, tuple[Any, ...]], dict[str, Any]] = field(
        default_factory=OrderedDict)
    size: int = 0

    @staticmethod
    def _cost(values: dict[str, Any]) -> int:
        return sum(len(v) for v in values.values())

    def get(self, key: tuple[str, tuple[Any, ...]]) -> dict[str, Any] | None:
        values = self.entries.get(key)
        if values is not None:
            self.entries.move_to_end(key)
        return values

    def forget(self, key: tuple[str, tuple[Any, ...]]) -> None:
        values = self.entries.pop(key, None)
        if values is not None:
            self.size -= self._cost(values)

    def forget_table(self, table: str) -> None:
        """Drop every entry of a table (it was truncated)."""
        for key in [k for k in self.entries if k[0] == table]:
            self.forget(key)

    def remember(self, key: tuple[str, tuple[Any, ...]], row: Row) -> None:
        large = {c: v for c, v in row.items()
                 if isinstance(v, str | bytes) and len(v) >= TOASTABLE_LEN}
        self.forget(key)
        if not large or self._cost(large) > self.max_bytes:
            return
        self.entries[key] = large
        self.size += self._cost(large)
        while self.size > self.max_bytes:
            _, evicted = self.entries.popitem(last=False)
            self.size -= self._cost(evicted)


class _RawTextLoader(Loader):
    """Leave a result value as the type's text output, as pgoutput sends it."""

    def load(self, data: Buffer) -> str:
        return bytes(data).decode()


def raw_text_cursor(
    conn: psycopg.Connection[Any], type_oids: Sequence[int]
) -> psycopg.Cursor[Any]:
    """A cursor returning these types' values as text (the connection's other queries keep
    their usual Python types)."""
    cursor = conn.cursor()
    for oid in set(type_oids):
        cursor.adapters.register_loader(oid, _RawTextLoader)
    return cursor


def fetch_current(
    conn: psycopg.Connection[Any], table: TableSchema, type_oids: Sequence[int], after: Row,
    names: list[str],
) -> Row | None:  # fmt: skip
    """The row's current values of ``names``, looked up by the after image's key (None if
    the row is gone)."""
    cursor = raw_text_cursor(conn, type_oids)
    key_columns = [table.column(k) for k in table.key]
    where = sql.SQL(" AND ").join(
        sql.SQL("{} = %s::{}").format(sql.Identifier(c.name), sql.SQL(c.source_type))
        for c in key_columns
    )
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names),
        sql.Identifier(table.schema, table.name), where)
    params = [_as_text(after[c.name]) for c in key_columns]
    try:
        row = cursor.execute(query, params).fetchone()
    except psycopg.Error as e:
        raise CaptureError(f"reading unchanged TOAST values of {table.qualified_name}: {e}"
                           ) from e
    if row is None:
        return None
    return {
        name: None if value is None else decode_value(table.column(name).type, value)
        for name, value in zip(names, row, strict=True)
    }


def _as_text(value: Any) -> str | None:
    """A key value as text PostgreSQL can cast back to the column's type."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, float):
        return repr(value)
    return str(value)
