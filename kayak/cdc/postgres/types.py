"""PostgreSQL types → :class:`~kayak.cdc.change.ColumnType` and text values → Python values.

pgoutput (and the snapshot, which reads raw text the same way) hands out every value as the
type's text output, so one function turns both into the representation
:mod:`kayak.cdc.change` prescribes. Types are recognised by OID (built-in OIDs never change);
anything not listed, including domains, enums, composites, arrays, ranges and extension
types, is ``STRING`` in the database's own text form (a user-defined type's description
travels beside it: :func:`kayak.cdc.postgres.catalog.describe_user_type`). The text form
depends on session settings, so every connection that produces values uses
:data:`SESSION_SETTINGS`.
"""

from __future__ import annotations

from typing import Any, Final

from kayak.cdc.change import ColumnType
from kayak.cdc.errors import ChangeDecodeError

__all__ = ["OID_COLUMN_TYPES", "SESSION_SETTINGS", "column_type", "decode_value"]

OID_COLUMN_TYPES: Final[dict[int, ColumnType]] = {
    16: ColumnType.BOOLEAN,  # bool
    17: ColumnType.BYTES,  # bytea
    20: ColumnType.LONG,  # int8
    21: ColumnType.INT,  # int2
    23: ColumnType.INT,  # int4
    700: ColumnType.DOUBLE,  # float4
    701: ColumnType.DOUBLE,  # float8
    1700: ColumnType.DECIMAL,  # numeric
}

# Fixed text forms, so a value looks the same from the snapshot and the stream and whatever
# the role's or database's defaults: UTC ISO timestamps, hex bytea, shortest exact floats.
SESSION_SETTINGS: Final[dict[str, str]] = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "1",
}


def column_type(type_oid: int) -> ColumnType:
    """The ColumnType of a PostgreSQL type OID (``STRING`` for any type not listed)."""
    return OID_COLUMN_TYPES.get(type_oid, ColumnType.STRING)


def decode_value(kind: ColumnType, text: str) -> Any:
    """A value's text output → the Python value :mod:`kayak.cdc.change` prescribes."""
    try:
        if kind is ColumnType.STRING or kind is ColumnType.DECIMAL or kind is ColumnType.ANY:
            return text
        if kind is ColumnType.INT or kind is ColumnType.LONG:
            return int(text)
        if kind is ColumnType.DOUBLE:
            return float(text)
        if kind is ColumnType.BOOLEAN:
            if text in ("t", "f"):
                return text == "t"
            raise ValueError("not t or f")
        if kind is ColumnType.BYTES:
            if not text.startswith("\\x"):
                raise ValueError("not hex bytea output (is bytea_output 'hex'?)")
            return bytes.fromhex(text[2:])
    except ValueError as e:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ChangeDecodeError(f"cannot read {shown!r} as {kind.value}: {e}") from e
    raise AssertionError(f"unhandled column type {kind}")
