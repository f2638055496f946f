"""Proving a replica: source and target compared row by row, value by value.

Values are compared with the SQL semantics of their column's type, not as Python objects or
text (:func:`values_equal`):

* ``real``/``double precision``: NaN equals NaN (PostgreSQL's float equality), ``-0.0``
  equals ``0.0``, each infinity equals itself.
* ``numeric``: exact decimal equality, as PostgreSQL's numeric ``=``: ``1.50`` equals ``1.5``
  but ``1.2346`` does not equal ``1.23456`` (no context rounding, whatever the digits);
  ``NaN`` equals ``NaN``.
* ``timestamp with time zone``: the same instant, whatever the offset it is written in (an
  offset-less value is UTC, the session time zone of every kayak connection); ``timestamp``
  and ``date``: the same calendar value whatever its spelling (``T`` or space, trailing
  zeros); ``±infinity`` and BC dates included.
* ``json``/``jsonb``: the same document (object key order and spacing ignored, numbers
  compared as exact decimals); arrays (``integer[]``…): the same bounds and elements, each
  compared by its element type.
* a PostgreSQL domain: by its base type's semantics; an enum or composite: the same text.
* SQLite's untyped columns (``ANY``): the same value *and* the same type (SQLite's
  ``typeof()``: an integer never equals a real or a text); against a PostgreSQL target, which
  holds them as text (:class:`~kayak.pipeline.targets.types.TextForm`), the same text form.
* anything else: the same value (text, bytes, integers, booleans).

A difference names the table, the key and the columns that differ (:meth:`Difference.line`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from kayak.cdc.change import Column, ColumnType, Row, TableSchema
from kayak.pipeline.targets.base import Target, key_text
from kayak.pipeline.targets.types import (
    PgType,
    TextForm,
    TypeSyntaxError,
    any_text_form,
    parse_pg_type,
)

__all__ = ["Difference", "Verification", "compare_rows", "values_equal", "verify_table"]

Equality = Callable[[Any, Any], bool]


@dataclass(frozen=True)
class Difference:
    """One key whose rows differ: ``columns`` names the differing columns (empty when the
    row is missing on one side, ``None`` there)."""

    key: str
    source: Row | None
    target: Row | None
    table: str = ""
    columns: tuple[str, ...] = ()

    def line(self) -> str:
        """The difference as one line naming the table, the key and the columns."""
        if self.source is None:
            return f"{self.table}: key {self.key} is in the target only"
        if self.target is None:
            return f"{self.table}: key {self.key} is missing from the target"
        shown = "; ".join(
            f"{c}: source {_short(self.source.get(c))} != target {_short(self.target.get(c))}"
            for c in self.columns
        )
        return f"{self.table}: key {self.key} column {shown}"

    def __str__(self) -> str:
        return self.line()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Verification:
    """The outcome of comparing one table: its row count in the source and the first
    differences (none when equal)."""

    table_schema: TableSchema
    rows: int
    differences: list[Difference] = field(default_factory=list)
    not_compared: tuple[str, ...] = ()
    """Source columns that are not replicated, so not compared: generated columns (logical
    decoding and the capture triggers carry stored values only; the target has none)."""

    @property
    def table(self) -> str:
        return self.table_schema.qualified_name

    @property
    def equal(self) -> bool:
        return not self.differences


def compare_rows(
    table: TableSchema, source_rows: list[Row], target_rows: list[Row], *, limit: int = 10
) -> Verification:
    """Compare two row lists by primary key, each column with its type's equality
    (:func:`values_equal`); at most ``limit`` differences are kept."""
    equalities = [(c.name, equality(c)) for c in table.columns]
    source = {key_text(table, row): row for row in source_rows}
    target = {key_text(table, row): row for row in target_rows}
    result = Verification(table, len(source))
    for key in sorted(source.keys() | target.keys()):
        s, t = source.get(key), target.get(key)
        if s is None or t is None:
            differing: tuple[str, ...] = ()
        else:
            differing = tuple(
                name for name, same in equalities if not same(s.get(name), t.get(name))
            )
            if not differing:
                continue
        result.differences.append(Difference(key, s, t, table.qualified_name, differing))
        if len(result.differences) >= limit:
            break
    return result


def verify_table(table: TableSchema, source_rows: list[Row], target: Target) -> Verification:
    """Compare a source table's rows with the target's copy."""
    return compare_rows(table, source_rows, target.read_rows(table))


def values_equal(column: Column, a: Any, b: Any) -> bool:
    """Whether two values of ``column`` are equal by its type's SQL semantics."""
    return equality(column)(a, b)


def equality(column: Column) -> Equality:
    """The equality of a column's values (NULL equals NULL here: both sides lack a value)."""
    same = _KIND_EQUALITY.get(column.type)
    if same is None and column.user_type is not None:
        same = _user_type_equality(column)
    if same is None:  # STRING: the declared type says what the text is
        same = _text_equality(_declared(column.source_type))
    return _null_safe(same)


def _user_type_equality(column: Column) -> Equality | None:
    """A domain's values compare as its base type's (None: compare as the text they are)."""
    user_type = column.user_type
    if user_type is None or user_type.kind != "domain":
        return None
    base = _declared(user_type.base)
    if base is None:
        return None
    if user_type.dimensions:
        return _array_equality(base)
    return _text_equality(base)


def _null_safe(same: Equality) -> Equality:
    def equal(a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return same(a, b)

    return equal


def _declared(source_type: str) -> PgType | None:
    try:
        return parse_pg_type(source_type)
    except TypeSyntaxError:
        return None  # a SQLite declaration such as DATETIME, or no type: compared as text


# -- scalars ------------------------------------------------------------------------------------


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _floats_equal(a: Any, b: Any) -> bool:
    x, y = _float(a), _float(b)
    if x is None or y is None:
        return bool(a == b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y  # -0.0 == 0.0, inf == inf


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, float):
        return None  # a float is never an exact numeric
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return None if number.is_snan() else number


def _decimals_equal(a: Any, b: Any) -> bool:
    x, y = _decimal(a), _decimal(b)
    if x is None or y is None:
        return bool(a == b)
    if x.is_nan() or y.is_nan():
        return x.is_nan() and y.is_nan()
    return x == y  # Decimal comparison is exact: no context precision, scale ignored


def _integers_equal(a: Any, b: Any) -> bool:
    try:
        return int(a) == int(b) and not isinstance(a, float) and not isinstance(b, float)
    except (TypeError, ValueError):
        return bool(a == b)


def _booleans_equal(a: Any, b: Any) -> bool:
    x, y = _boolean(a), _boolean(b)
    return x is not None and x == y


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("t", "true", "f", "false"):
        return value.lower() in ("t", "true")
    return None


def _bytes_equal(a: Any, b: Any) -> bool:
    try:
        return bytes(a) == bytes(b)
    except TypeError:
        return bool(a == b)


def _texts_equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _any_equal(a: Any, b: Any) -> bool:
    if isinstance(a, TextForm) or isinstance(b, TextForm):
        return any_text_form(a) == any_text_form(b)
    if isinstance(a, memoryview | bytearray):
        a = bytes(a)
    if isinstance(b, memoryview | bytearray):
        b = bytes(b)
    if type(a) is not type(b):
        return False  # SQLite's typeof() differs: 1 is not 1.0 is not '1'
    if isinstance(a, float):
        return _floats_equal(a, b)
    return bool(a == b)


_KIND_EQUALITY: dict[ColumnType, Equality] = {
    ColumnType.BOOLEAN: _booleans_equal,
    ColumnType.INT: _integers_equal,
    ColumnType.LONG: _integers_equal,
    ColumnType.DOUBLE: _floats_equal,
    ColumnType.DECIMAL: _decimals_equal,
    ColumnType.BYTES: _bytes_equal,
    ColumnType.ANY: _any_equal,
}


# -- text forms of typed values ---------------------------------------------------------------

_DATETIME = re.compile(
    r"(?P<y>\d{4,})-(?P<mo>\d\d)-(?P<d>\d\d)"
    r"(?:[T ](?P<h>\d\d):(?P<mi>\d\d)(?::(?P<s>\d\d)(?:\.(?P<f>\d+))?)?)?"
    r"\s*(?P<tz>Z|[+-]\d\d(?::?\d\d(?::?\d\d)?)?)?(?P<bc> BC)?",
    re.IGNORECASE,
)
_INFINITE = {"infinity": (1, 0), "-infinity": (-1, 0)}


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar, any year (Python's
    ``date`` stops at 1..9999; PostgreSQL goes from 4713 BC to 294276 AD)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _offset_seconds(text: str) -> int:
    if text.upper() == "Z":
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes, seconds = int(digits[:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
    return sign * (hours * 3600 + minutes * 60 + seconds)


def _moment(text: Any, *, zoned: bool) -> tuple[int, int] | None:
    """A date/timestamp text as (infinity sign, microseconds since the epoch); for a zoned
    type the offset is applied (none = UTC), for a plain one an offset makes it unreadable."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if stripped.lower() in _INFINITE:
        return _INFINITE[stripped.lower()]
    m = _DATETIME.fullmatch(stripped)
    if m is None or (m["tz"] and not zoned):
        return None
    year = int(m["y"])
    if m["bc"]:
        year = 1 - year  # 1 BC is astronomical year 0
    days = _days_from_civil(year, int(m["mo"]), int(m["d"]))
    seconds = int(m["h"] or 0) * 3600 + int(m["mi"] or 0) * 60 + int(m["s"] or 0)
    if m["tz"]:
        seconds -= _offset_seconds(m["tz"])
    micros = int((m["f"] or "").ljust(6, "0")[:6])
    return 0, (days * 86400 + seconds) * 1_000_000 + micros


def _moments_equal(zoned: bool) -> Equality:
    def equal(a: Any, b: Any) -> bool:
        x, y = _moment(a, zoned=zoned), _moment(b, zoned=zoned)
        if x is None or y is None:
            return bool(a == b)
        return x == y

    return equal


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        raise ValueError("not JSON text")
    return json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _tagged(value: Any) -> Any:
    # Python says True == 1; JSON does not: tag scalars with their JSON kind.
    if isinstance(value, dict):
        return {k: _tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    return (type(value).__name__, value)


def _json_equal(a: Any, b: Any) -> bool:
    try:
        return bool(_tagged(_json(a)) == _tagged(_json(b)))
    except ValueError:
        return bool(a == b)


class _ArraySyntaxError(ValueError):
    pass


_ARRAY_SPACE = " \t\n\r\v\f"  # what PostgreSQL's array input skips (not all of str.isspace)
_DIMENSIONS = re.compile(r"((?:\[-?\d+:-?\d+\])+)=")


def parse_array(text: str, delimiter: str = ",") -> tuple[tuple[int, ...], Any]:
    """A PostgreSQL array's text output → (lower bounds, nested lists of element texts, NULL
    as ``None``). Lower bounds are 1 unless the text states them (``[0:1]={…}``)."""
    bounds: tuple[int, ...] = ()
    m = _DIMENSIONS.match(text)
    if m:
        bounds = tuple(int(b) for b in re.findall(r"\[(-?\d+):", m[1]))
        text = text[m.end() :]
    value, end = _array_at(text, 0, delimiter)
    if text[end:].strip():
        raise _ArraySyntaxError("text after the array")
    depth = 0
    inner_any: Any = value
    while isinstance(inner_any, list):
        depth += 1
        inner_any = inner_any[0] if inner_any else None
    return bounds or (1,) * depth, value


def _array_at(text: str, at: int, delimiter: str) -> tuple[list[Any], int]:
    at = _skip_space(text, at)
    if at >= len(text) or text[at] != "{":
        raise _ArraySyntaxError("expected {")
    at = _skip_space(text, at + 1)
    items: list[Any] = []
    if at < len(text) and text[at] == "}":
        return items, at + 1
    while True:
        item: Any
        at = _skip_space(text, at)
        if at < len(text) and text[at] == "{":
            item, at = _array_at(text, at, delimiter)
        elif at < len(text) and text[at] == '"':
            item, at = _quoted_at(text, at + 1)
        else:
            start = at
            while at < len(text) and text[at] not in (delimiter, "}"):
                at += 1
            word = text[start:at].strip(_ARRAY_SPACE)
            item = None if word.upper() == "NULL" else word
        items.append(item)
        at = _skip_space(text, at)
        if at >= len(text):
            raise _ArraySyntaxError("unterminated array")
        if text[at] == "}":
            return items, at + 1
        if text[at] != delimiter:
            raise _ArraySyntaxError(f"expected {delimiter!r}")
        at += 1


def _quoted_at(text: str, at: int) -> tuple[str, int]:
    out = []
    while at < len(text):
        ch = text[at]
        if ch == "\\" and at + 1 < len(text):
            out.append(text[at + 1])
            at += 2
        elif ch == '"':
            return "".join(out), at + 1
        else:
            out.append(ch)
            at += 1
    raise _ArraySyntaxError("unterminated quoted element")


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _ARRAY_SPACE:
        at += 1
    return at


def _array_equality(element: PgType) -> Equality:
    kind_equality = _KIND_EQUALITY.get(element.column_type)
    same = kind_equality or _text_equality(element)
    delimiter = ";" if element.base == "box" else ","

    def items_equal(x: Any, y: Any) -> bool:
        if isinstance(x, list) or isinstance(y, list):
            return (
                isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
                and all(items_equal(i, j) for i, j in zip(x, y, strict=True))
            )  # fmt: skip
        if x is None or y is None:
            return x is None and y is None
        return same(x, y)

    def equal(a: Any, b: Any) -> bool:
        try:
            x, y = parse_array(a, delimiter), parse_array(b, delimiter)
        except (_ArraySyntaxError, TypeError):
            return bool(a == b)
        return x[0] == y[0] and items_equal(x[1], y[1])

    return equal


def _text_equality(declared: PgType | None) -> Equality:
    if declared is None:
        return _texts_equal
    if declared.dimensions:
        return _array_equality(declared.element)
    if declared.base == "timestamp":
        return _moments_equal(declared.with_time_zone)
    if declared.base == "date":
        return _moments_equal(False)
    if declared.base in ("json", "jsonb"):
        return _json_equal
    return _KIND_EQUALITY.get(declared.column_type, _texts_equal)
