"""Verification compares values by their SQL type's equality, not by Python's or by text.

Hypothesis draws a value of every type verify knows, writes it in the spellings databases use
for the same value (trailing zeros, another time zone offset, reordered JSON keys, quoted
array elements, -0.0, another NaN), and checks that these verify equal while a truly
different value is reported with the table, the key and the column. Then real databases:
values drawn the same way go through a real PostgreSQL source, a PostgreSQL target and
verification, which must say equal; a target that rounded must not.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Json, Jsonb

from kayak.cdc import Column, ColumnType, TableSchema, format_position
from kayak.cdc.postgres.catalog import load_table
from kayak.pipeline.source_database import read_source_rows
from kayak.pipeline.targets import AppliedChange, open_target
from kayak.pipeline.verify import compare_rows, values_equal, verify_table

# -- spellings of one value ---------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A type verify supports: how to draw a value, the spellings of a value (the first is
    the canonical one), and an independent test of whether two drawn values are the same."""

    column: Column
    values: st.SearchStrategy[Any]
    spellings: Callable[[Any], list[Any]]
    same: Callable[[Any, Any], bool]


def _float_same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _float_spellings(x: float) -> list[Any]:
    out: list[Any] = [x]
    if x == 0:
        out.append(-x)
    if math.isnan(x):  # another NaN payload, and the text PostgreSQL prints
        out += [struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0001))[0], "NaN"]
    return out


def _decimal_text(d: Decimal) -> str:
    return "NaN" if d.is_nan() else format(d, "f")


def _decimal_spellings(d: Decimal) -> list[Any]:
    text = _decimal_text(d)
    out = [text, str(d)]
    if d.is_finite():
        out.append(text + ("" if "." in text else ".") + "000")
    return out


def _decimal_same(a: Decimal, b: Decimal) -> bool:
    return (a.is_nan() and b.is_nan()) or (not a.is_nan() and not b.is_nan() and a == b)


def _timestamp_text(moment: datetime, sep: str = " ", zoned: bool = True) -> str:
    text = f"{moment.year:04d}-" + moment.strftime(f"%m-%d{sep}%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    if zoned:
        offset = moment.utcoffset() or timedelta()
        sign = "-" if offset < timedelta() else "+"
        minutes = abs(int(offset.total_seconds())) // 60
        text += f"{sign}{minutes // 60:02d}" + (f":{minutes % 60:02d}" if minutes % 60 else "")
    return text


OFFSETS = st.integers(-15 * 60, 15 * 60).map(lambda m: timezone(timedelta(minutes=m)))
INSTANTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


def _timestamptz_spellings(value: Any) -> list[Any]:
    if isinstance(value, str):  # ±infinity
        return [value]
    moment, offset = value
    shifted = moment.astimezone(offset)
    return [
        _timestamp_text(moment),
        _timestamp_text(shifted),
        _timestamp_text(shifted, "T"),
        _timestamp_text(moment, "T").removesuffix("+00") + "Z",
        _timestamp_text(moment, zoned=False),  # no offset: UTC, the session time zone
    ]


def _timestamptz_same(a: Any, b: Any) -> bool:
    return (a if isinstance(a, str) else a[0]) == (b if isinstance(b, str) else b[0])


def _timestamp_spellings(moment: datetime) -> list[Any]:
    out = [_timestamp_text(moment, zoned=False), _timestamp_text(moment, "T", zoned=False)]
    out.append(f"{moment.year:04d}-" + moment.strftime("%m-%d %H:%M:%S.%f"))  # trailing zeros
    return out


# No NUL: PostgreSQL's json and jsonb refuse \u0000, and the round trip below stores them.
JSON_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                    max_size=8)  # fmt: skip
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | JSON_TEXT
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JSON_TEXT, inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip


def _with_fractions(value: Any) -> str:
    """JSON text with every integer written as a fraction (7 and 7.0 are one JSON number)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        return f"{value}.0"
    if isinstance(value, list):
        return "[" + ", ".join(_with_fractions(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)}: {_with_fractions(v)}" for k, v in value.items()) + "}"


def _json_spellings(doc: Any) -> list[Any]:
    reordered = dict(reversed(doc.items())) if isinstance(doc, dict) else doc
    return [
        json.dumps(doc, sort_keys=True),
        json.dumps(reordered, indent=2, ensure_ascii=False),
        json.dumps(doc, separators=(",", ":")),
        _with_fractions(doc),
    ]


def _json_same(a: Any, b: Any) -> bool:
    # Distinct draws are told apart by their canonical text (no floats are drawn; a bool is
    # never the number 1: json.dumps writes true).
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _quote_element(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _minimal_element(text: str) -> str:
    plain = text and text.upper() != "NULL" and not any(c in text for c in '{},"\\ \t\n\r\v\f')
    return text if plain else _quote_element(text)


def _array_spellings(element_text: Callable[[Any], list[str]]) -> Callable[[Any], list[Any]]:
    def spell(items: list[Any], pick: int, quote: bool, space: bool) -> str:
        parts = []
        for item in items:
            if item is None:
                parts.append("NULL" if not space else "null")
                continue
            options = element_text(item)
            text = options[min(pick, len(options) - 1)]
            parts.append(_quote_element(text) if quote else _minimal_element(text))
        return "{" + (" , " if space else ",").join(parts) + "}"

    def spellings(items: list[Any]) -> list[Any]:
        return [spell(items, 0, False, False), spell(items, 1, True, False),
                spell(items, 2, False, True)]  # fmt: skip

    return spellings


def _array_same(same: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def equal(a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(
            (x is None and y is None) or (x is not None and y is not None and same(x, y))
            for x, y in zip(a, b, strict=True)
        )

    return equal


def _float_element_texts(x: float) -> list[str]:
    if math.isnan(x):
        return ["NaN", "nan"]
    if math.isinf(x):
        return ["Infinity" if x > 0 else "-Infinity", "inf" if x > 0 else "-inf"]
    return [repr(x), repr(x) if x else repr(-x), f"{x!r}"]


def _eq(a: Any, b: Any) -> bool:
    return bool(a == b)


def column(name: str, kind: ColumnType, source_type: str) -> Column:
    return Column(name, kind, True, source_type)


FLOATS = st.floats(allow_nan=True, allow_infinity=True)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False, places=None) | st.just(Decimal("NaN"))

KINDS: dict[str, Kind] = {
    "boolean": Kind(column("boolean", ColumnType.BOOLEAN, "boolean"), st.booleans(),
                    lambda b: [b], _eq),
    "integer": Kind(column("integer", ColumnType.INT, "integer"),
                    st.integers(-(2**31), 2**31 - 1), lambda i: [i], _eq),
    "bigint": Kind(column("bigint", ColumnType.LONG, "bigint"),
                   st.integers(-(2**63), 2**63 - 1), lambda i: [i], _eq),
    "double": Kind(column("double", ColumnType.DOUBLE, "double precision"), FLOATS,
                   _float_spellings, _float_same),
    "real": Kind(column("real", ColumnType.DOUBLE, "real"), st.floats(width=32),
                 _float_spellings, _float_same),
    "numeric": Kind(column("numeric", ColumnType.DECIMAL, "numeric"), DECIMALS,
                    _decimal_spellings, _decimal_same),
    "bytea": Kind(column("bytea", ColumnType.BYTES, "bytea"), st.binary(max_size=16),
                  lambda b: [b, bytearray(b), memoryview(b)], _eq),
    "text": Kind(column("text", ColumnType.STRING, "text"), st.text(max_size=16),
                 lambda t: [t], _eq),
    "timestamptz": Kind(
        column("timestamptz", ColumnType.STRING, "timestamp(6) with time zone"),
        st.tuples(INSTANTS, OFFSETS) | st.sampled_from(["infinity", "-infinity"]),
        _timestamptz_spellings, _timestamptz_same,
    ),
    "timestamp": Kind(
        column("timestamp", ColumnType.STRING, "timestamp without time zone"),
        st.datetimes(min_value=datetime(1, 1, 1)), _timestamp_spellings, _eq,
    ),
    "date": Kind(column("date", ColumnType.STRING, "date"), st.dates(),
                 lambda d: [d.isoformat()], _eq),
    "jsonb": Kind(column("jsonb", ColumnType.STRING, "jsonb"), JSON_VALUES, _json_spellings,
                  _json_same),
    "json": Kind(column("json", ColumnType.STRING, "json"), JSON_VALUES, _json_spellings,
                 _json_same),
    "int_array": Kind(
        column("int_array", ColumnType.STRING, "integer[]"),
        st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=5),
        _array_spellings(lambda i: [str(i), f"{i:+d}", f" {i}"]), _array_same(_eq),
    ),
    "float_array": Kind(
        column("float_array", ColumnType.STRING, "double precision[]"),
        st.lists(st.none() | FLOATS, max_size=5),
        _array_spellings(_float_element_texts), _array_same(_float_same),
    ),
    "numeric_array": Kind(
        column("numeric_array", ColumnType.STRING, "numeric(20,6)[]"),
        st.lists(st.none() | DECIMALS, max_size=5),
        _array_spellings(_decimal_spellings), _array_same(_decimal_same),
    ),
    "text_array": Kind(
        column("text_array", ColumnType.STRING, "text[]"),
        st.lists(st.none() | st.text(max_size=6), max_size=5),
        _array_spellings(lambda t: [t]), _array_same(_eq),
    ),
    "timestamptz_array": Kind(
        column("timestamptz_array", ColumnType.STRING, "timestamp with time zone[]"),
        st.lists(st.none() | st.tuples(INSTANTS, OFFSETS), max_size=4),
        _array_spellings(_timestamptz_spellings), _array_same(_timestamptz_same),
    ),
}  # fmt: skip

TABLE = TableSchema(
    "public", "every_type",
    (Column("id", ColumnType.LONG, False, "bigint"), *(k.column for k in KINDS.values())),
    ("id",),
)  # fmt: skip


@st.composite
def row_pairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(drawn values, the source row in one spelling, the target row in another)."""
    values, source, target = {}, {"id": 1}, {"id": 1}
    for name, kind in KINDS.items():
        value = draw(kind.values)
        spellings = kind.spellings(value)
        values[name] = value
        source[name] = draw(st.sampled_from(spellings))
        target[name] = draw(st.sampled_from(spellings))
    return values, source, target


@settings(max_examples=150, deadline=None)
@given(row_pairs())
def test_every_spelling_of_a_value_verifies_equal(
    pair: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    _, source, target = pair
    result = compare_rows(TABLE, [source], [target])
    assert result.equal, [d.line() for d in result.differences]


@settings(max_examples=150, deadline=None)
@given(row_pairs(), st.sampled_from(sorted(KINDS)), st.data())
def test_a_different_value_is_named_by_table_key_and_column(
    pair: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], name: str, data: st.DataObject
) -> None:
    values, source, target = pair
    kind = KINDS[name]
    other = data.draw(kind.values)
    assume(not kind.same(values[name], other))
    target[name] = data.draw(st.sampled_from(kind.spellings(other)))
    result = compare_rows(TABLE, [source], [target])
    assert [d.columns for d in result.differences] == [(name,)]
    line = result.differences[0].line()
    assert "\n" not in line
    assert line.startswith(f"public.every_type: key [1] column {name}: source ")


@pytest.mark.parametrize(
    ("source_type", "kind", "a", "b", "equal"),
    [
        ("double precision", ColumnType.DOUBLE, math.nan, math.nan, True),
        ("double precision", ColumnType.DOUBLE, -0.0, 0.0, True),
        ("double precision", ColumnType.DOUBLE, math.inf, math.inf, True),
        ("double precision", ColumnType.DOUBLE, math.inf, -math.inf, False),
        ("double precision", ColumnType.DOUBLE, math.nan, math.inf, False),
        ("double precision", ColumnType.DOUBLE, 0.1 + 0.2, 0.3, False),
        ("numeric", ColumnType.DECIMAL, "1.50", "1.5", True),
        ("numeric", ColumnType.DECIMAL, "1.2346", "1.23456", False),
        ("numeric", ColumnType.DECIMAL, "1." + "0" * 40 + "1", "1", False),  # past 28 digits
        ("numeric", ColumnType.DECIMAL, "NaN", "NaN", True),
        ("numeric", ColumnType.DECIMAL, "-0.00", "0", True),
        ("numeric", ColumnType.DECIMAL, "1.5", 1.5, False),  # a float is not an exact numeric
        ("timestamptz", ColumnType.STRING, "2024-03-01 01:30:00+02", "2024-02-29 23:30:00+00",
         True),
        ("timestamptz", ColumnType.STRING, "0044-03-15 12:00:00+00 BC",
         "0044-03-15 12:00:00+00", False),
        ("timestamptz", ColumnType.STRING, "12345-01-01 00:00:00+01",
         "12344-12-31 23:00:00+00", True),
        ("timestamptz", ColumnType.STRING, "infinity", "-infinity", False),
        ("timestamp", ColumnType.STRING, "2024-01-01 00:00:00", "2024-01-01 00:00:00+01", False),
        ("jsonb", ColumnType.STRING, '{"a": [1, true]}', '{"a":[1.0,true]}', True),
        ("jsonb", ColumnType.STRING, "[true]", "[1]", False),
        ("jsonb", ColumnType.STRING, '{"a": 1, "b": 2}', '{"b": 2, "a": 1}', True),
        ("integer[]", ColumnType.STRING, "[0:1]={1,2}", "{1,2}", False),  # bounds differ
        ("integer[]", ColumnType.STRING, "{{1,2},{3,4}}", "{{1,2},{3,4}}", True),
        ("integer[]", ColumnType.STRING, "{{1,2},{3,4}}", "{1,2,3,4}", False),
        ("text[]", ColumnType.STRING, '{"NULL"}', "{NULL}", False),
        ("numeric[]", ColumnType.STRING, "{1.50,NaN}", "{1.5,NaN}", True),
        ("text", ColumnType.STRING, "a", "a ", False),
        ("boolean", ColumnType.BOOLEAN, True, 1, True),
        ("boolean", ColumnType.BOOLEAN, True, False, False),
        ("bytea", ColumnType.BYTES, b"\x00", memoryview(b"\x00"), True),
    ],
)  # fmt: skip
def test_sql_equality_table(
    source_type: str, kind: ColumnType, a: Any, b: Any, equal: bool
) -> None:
    c = column("c", kind, source_type)
    assert values_equal(c, a, b) is equal
    assert values_equal(c, b, a) is equal
    assert values_equal(c, None, None) and not values_equal(c, a, None)


# -- real databases ---------------------------------------------------------------------------

SOURCE_DDL = """
CREATE TABLE every_type (
    id bigint PRIMARY KEY, d double precision, r real, n numeric, n4 numeric(12,4),
    tz timestamp(6) with time zone, ts timestamp, dt date, jb jsonb, js json, ia integer[],
    fa double precision[], na numeric[], ta text[], b bytea, bo boolean, i integer, t text
)
"""

REAL_ROWS = st.fixed_dictionaries({
    "d": st.none() | FLOATS, "r": st.none() | st.floats(width=32), "n": st.none() | DECIMALS,
    "n4": st.none() | st.decimals(min_value=-(10**7), max_value=10**7, places=4),
    "tz": st.none() | st.tuples(INSTANTS, OFFSETS).map(lambda p: p[0].astimezone(p[1])),
    "ts": st.none() | st.datetimes(min_value=datetime(1, 1, 1)),
    "dt": st.none() | st.dates(min_value=date(1, 1, 1)),
    "jb": st.none() | JSON_VALUES.map(Jsonb), "js": st.none() | JSON_VALUES.map(Json),
    "ia": st.none() | st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4),
    "fa": st.none() | st.lists(st.none() | FLOATS, max_size=4),
    "na": st.none() | st.lists(st.none() | DECIMALS, max_size=4),
    "ta": st.none() | st.lists(st.none() | st.text(max_size=6).filter(lambda t: "\x00" not in t),
                               max_size=4),
    "b": st.none() | st.binary(max_size=8), "bo": st.none() | st.booleans(),
    "i": st.none() | st.integers(-(2**31), 2**31 - 1),
    "t": st.none() | st.text(max_size=8).filter(lambda t: "\x00" not in t),
})  # fmt: skip


def _target_dsn(source_dsn: str) -> str:
    base, name = source_dsn.rsplit("/", 1)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}_target"')
    return f"{base}/{name}_target"


def _insert(conn: psycopg.Connection[Any], rows: list[dict[str, Any]]) -> None:
    columns = list(rows[0])
    casts = {"ia": "::integer[]", "fa": "::float8[]", "na": "::numeric[]", "ta": "::text[]"}
    placeholders = ", ".join(f"%({c})s{casts.get(c, '')}" for c in columns)
    conn.cursor().executemany(
        f"INSERT INTO every_type ({', '.join(columns)}) VALUES ({placeholders})", rows
    )


def _replicate(table: TableSchema, source_dsn: str, target_dsn: str) -> list[dict[str, Any]]:
    """Copy the source's rows to the target as the pipeline would (its row representation,
    the target's apply); the source rows."""
    rows = read_source_rows(source_dsn, table)
    target = open_target(target_dsn)
    try:
        target.ensure_table(table, "postgresql")
        changes = [
            AppliedChange("r", {"id": r["id"]}, r, format_position(r["id"] + 1), 0) for r in rows
        ]
        target.apply(table, changes)
    finally:
        target.close()
    return rows


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(REAL_ROWS, min_size=1, max_size=4))
def test_postgres_round_trip_verifies_equal(postgres_dsn: str, drawn: list[dict[str, Any]]) -> None:
    """Drawn values through a real PostgreSQL source and target verify equal."""
    target_dsn = f"{postgres_dsn}_target"
    with psycopg.connect(postgres_dsn, autocommit=True) as source:
        source.execute("DROP TABLE IF EXISTS every_type")
        source.execute(SOURCE_DDL)
        try:
            source.execute(f'CREATE DATABASE "{target_dsn.rsplit("/", 1)[1]}"')
        except psycopg.errors.DuplicateDatabase:
            with psycopg.connect(target_dsn, autocommit=True) as target:
                target.execute("DROP TABLE IF EXISTS every_type")
                target.execute("DROP TABLE IF EXISTS kayak_apply_positions")
        _insert(source, [{"id": i, **row} for i, row in enumerate(drawn)])
        table = load_table(source, "public", "every_type").schema
    rows = _replicate(table, postgres_dsn, target_dsn)
    target = open_target(target_dsn)
    try:
        result = verify_table(table, rows, target)
    finally:
        target.close()
    assert result.equal, [d.line() for d in result.differences]


def test_nan_in_double_precision_verifies_equal(postgres_dsn: str) -> None:
    """Issue 15: a NaN in source and target made ``--once`` print "source != target"."""
    target_dsn = _target_dsn(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as source:
        source.execute("CREATE TABLE m (id int PRIMARY KEY, d double precision, r real, "
                       "n numeric)")  # fmt: skip
        source.execute("INSERT INTO m VALUES (1, 'NaN', 'NaN', 'NaN'), "
                       "(2, '-0', '-Infinity', '1.50'), (3, 'Infinity', 0, '-0.0')")  # fmt: skip
        table = load_table(source, "public", "m").schema
    rows = _replicate(table, postgres_dsn, target_dsn)
    assert math.isnan(rows[0]["d"]) and math.isnan(rows[0]["r"])
    target = open_target(target_dsn)
    try:
        assert verify_table(table, rows, target).equal
        # and in the target, stored as NaN (not NULL), so the equality is earned
        with psycopg.connect(target_dsn) as conn:
            stored = conn.execute("SELECT d::text, r::text FROM m WHERE id = 1").fetchone()
        assert stored == ("NaN", "NaN")
    finally:
        target.close()


def test_a_rounding_target_is_caught(postgres_dsn: str) -> None:
    """A target column of a smaller scale (the silent rounding of issue 15) fails
    verification with one line naming table, key and column."""
    target_dsn = _target_dsn(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as source:
        source.execute("CREATE TABLE prices (id int PRIMARY KEY, p numeric(12,5))")
        source.execute("INSERT INTO prices VALUES (1, 1.23456), (2, 1.50000)")
        table = load_table(source, "public", "prices").schema
    with psycopg.connect(target_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE prices (id int PRIMARY KEY, p numeric(12,4))")
    rows = _replicate(table, postgres_dsn, target_dsn)
    target = open_target(target_dsn)
    try:
        result = verify_table(table, rows, target)
    finally:
        target.close()
    assert [d.line() for d in result.differences] == [
        "public.prices: key [1] column p: source '1.23456' != target '1.2346'"
    ]


def test_sqlite_round_trip_and_a_lost_nan(postgres_dsn: str, tmp_path: Path) -> None:
    """PostgreSQL → SQLite: equal values verify equal; a NaN SQLite cannot store (it keeps
    NULL) is reported, not hidden."""
    with psycopg.connect(postgres_dsn, autocommit=True) as source:
        source.execute("CREATE TABLE s (id int PRIMARY KEY, d double precision, n numeric, "
                       "tz timestamptz, j jsonb)")  # fmt: skip
        source.execute("INSERT INTO s VALUES (1, -0.0, 1.50, '2024-01-01 10:00+02', "
                       """'{"b": 1, "a": [true]}'), (2, 'NaN', NULL, NULL, NULL)""")  # fmt: skip
        table = load_table(source, "public", "s").schema
    rows = read_source_rows(postgres_dsn, table)
    target = open_target(f"sqlite:{tmp_path / 'target.db'}")
    try:
        target.ensure_table(table, "postgresql")
        target.apply(table, [
            AppliedChange("r", {"id": r["id"]}, r, format_position(r["id"]), 0) for r in rows
        ])  # fmt: skip
        result = verify_table(table, rows, target)
    finally:
        target.close()
    stored = sqlite3.connect(tmp_path / "target.db").execute("SELECT d FROM s").fetchall()
    assert stored == [(0.0,), (None,)]
    assert [d.line() for d in result.differences] == [
        "public.s: key [2] column d: source nan != target None"
    ]
