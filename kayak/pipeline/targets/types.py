"""Column types a target may create: parsed from the registered schema, never pasted.

A change-event schema carries each column's declared source type (``kayak.source_type``) so a
target of the same kind can recreate it exactly. The schema registry accepts schemas from any
client, so that text is untrusted input: a target builds its DDL only from a type *parsed* here
and *rendered* back from a fixed table of known types and integer modifiers, never from the
text itself.

PostgreSQL: :func:`parse_pg_type` accepts the names ``format_type`` prints (and the usual
aliases), with modifiers in range (``numeric(12,4)``, ``character varying(255)``,
``timestamp(3) with time zone``, ``interval day to second(3)``) and array brackets
(``integer[]``). Anything else — a user-defined or schema-qualified type, a stray character —
is refused. The type must also agree with the column's value kind (``kayak.type``): an
``integer`` column cannot carry text.

SQLite: a declared type is free text that only chooses an affinity, so :func:`sqlite_type`
accepts SQLite's own type-name grammar restricted to plain words and integer modifiers
(``VARCHAR(255)``, ``UNSIGNED BIG INT``, ``DECIMAL(10,5)``), checks with SQLite itself that
the words declare a type and nothing else (no ``NOT NULL``, ``DEFAULT``, ``GENERATED``…), and
that its affinity gives the column's value kind.

PostgreSQL user-defined types (a column's ``user_type``: enum, domain, composite) are
validated in :mod:`~kayak.pipeline.targets.user_types`, their base and field types through
:func:`parse_pg_type` like any column type. That module composes DDL with psycopg; this one
imports no driver, so the SQLite path runs without the ``postgres`` extra.

A type refused here raises :class:`TargetSchemaError`, one line naming the table, the column
and the offending type.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Final

from kayak.cdc.change import Column, ColumnType, TableSchema
from kayak.cdc.sqlite.schema import affinity_type
from kayak.errors import KayakError

__all__ = [
    "PgType",
    "TargetSchemaError",
    "TextForm",
    "TypeSyntaxError",
    "any_text_form",
    "parse_pg_type",
    "pg_column_type",
    "sqlite_column_type",
    "sqlite_type",
]

_MAX_TYPE_TEXT: Final = 128


class TargetSchemaError(KayakError, ValueError):
    """A registered schema describes a column the target will not create (unknown or malformed
    type, or one that contradicts the column's value kind); the message is one line naming the
    table, the column and the type."""

    @classmethod
    def for_column(
        cls, table: TableSchema, column: Column, target: str, reason: str
    ) -> TargetSchemaError:
        shown = column.source_type
        if len(shown) > 60:
            shown = shown[:60] + "…"
        # repr() keeps the line single whatever the (untrusted) names and type hold.
        return cls(
            f"table {table.qualified_name!r} column {column.name!r}: type {shown!r} is not "
            f"created in a {target} target: {reason}"
        )


class TypeSyntaxError(ValueError):
    """A type name that does not parse; the message says where."""


# -- PostgreSQL -------------------------------------------------------------------------------

_Range = tuple[int, int]
_PRECISION: Final[_Range] = (0, 6)
_LENGTH: Final[_Range] = (1, 10_485_760)
_BITS: Final[_Range] = (1, 83_886_080)


@dataclass(frozen=True)
class _PgBase:
    kind: ColumnType
    modifiers: tuple[_Range, ...] = ()  # allowed range of each optional integer modifier


_PG_BASES: Final[dict[str, _PgBase]] = {
    "smallint": _PgBase(ColumnType.INT),
    "integer": _PgBase(ColumnType.INT),
    "bigint": _PgBase(ColumnType.LONG),
    "real": _PgBase(ColumnType.DOUBLE),
    "double precision": _PgBase(ColumnType.DOUBLE),
    "numeric": _PgBase(ColumnType.DECIMAL, ((1, 1000), (-1000, 1000))),
    "boolean": _PgBase(ColumnType.BOOLEAN),
    "bytea": _PgBase(ColumnType.BYTES),
    "text": _PgBase(ColumnType.STRING),
    "character varying": _PgBase(ColumnType.STRING, (_LENGTH,)),
    "character": _PgBase(ColumnType.STRING, (_LENGTH,)),
    '"char"': _PgBase(ColumnType.STRING),
    "name": _PgBase(ColumnType.STRING),
    "bit": _PgBase(ColumnType.STRING, (_BITS,)),
    "bit varying": _PgBase(ColumnType.STRING, (_BITS,)),
    "uuid": _PgBase(ColumnType.STRING),
    "json": _PgBase(ColumnType.STRING),
    "jsonb": _PgBase(ColumnType.STRING),
    "xml": _PgBase(ColumnType.STRING),
    "date": _PgBase(ColumnType.STRING),
    "time": _PgBase(ColumnType.STRING, (_PRECISION,)),
    "timestamp": _PgBase(ColumnType.STRING, (_PRECISION,)),
    "interval": _PgBase(ColumnType.STRING, (_PRECISION,)),
    "money": _PgBase(ColumnType.STRING),
    "inet": _PgBase(ColumnType.STRING),
    "cidr": _PgBase(ColumnType.STRING),
    "macaddr": _PgBase(ColumnType.STRING),
    "macaddr8": _PgBase(ColumnType.STRING),
    "point": _PgBase(ColumnType.STRING),
    "line": _PgBase(ColumnType.STRING),
    "lseg": _PgBase(ColumnType.STRING),
    "box": _PgBase(ColumnType.STRING),
    "path": _PgBase(ColumnType.STRING),
    "polygon": _PgBase(ColumnType.STRING),
    "circle": _PgBase(ColumnType.STRING),
    "tsvector": _PgBase(ColumnType.STRING),
    "tsquery": _PgBase(ColumnType.STRING),
    "pg_lsn": _PgBase(ColumnType.STRING),
    "int4range": _PgBase(ColumnType.STRING),
    "int8range": _PgBase(ColumnType.STRING),
    "numrange": _PgBase(ColumnType.STRING),
    "daterange": _PgBase(ColumnType.STRING),
    "tsrange": _PgBase(ColumnType.STRING),
    "tstzrange": _PgBase(ColumnType.STRING),
}

# Alias → (canonical base, with time zone).
_PG_ALIASES: Final[dict[str, tuple[str, bool]]] = {
    "int": ("integer", False),
    "int2": ("smallint", False),
    "int4": ("integer", False),
    "int8": ("bigint", False),
    "float4": ("real", False),
    "float8": ("double precision", False),
    "decimal": ("numeric", False),
    "bool": ("boolean", False),
    "varchar": ("character varying", False),
    "char": ("character", False),
    "bpchar": ("character", False),
    "varbit": ("bit varying", False),
    "timestamptz": ("timestamp", True),
    "timetz": ("time", True),
}

_ZONES: Final = {"": False, "without time zone": False, "with time zone": True}
_INTERVAL_FIELDS: Final = frozenset(
    {"year", "month", "day", "hour", "minute", "second", "year to month", "day to hour",
     "day to minute", "day to second", "hour to minute", "hour to second",
     "minute to second"}
)  # fmt: skip
_MAX_DIMENSIONS: Final = 6  # PostgreSQL's MAXDIM

_TOKEN = re.compile(
    r'\s*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<char>"char")|(?P<int>[+-]?[0-9]{1,10})'
    r"|(?P<punct>[(),\[\]]))"
)


@dataclass(frozen=True)
class PgType:
    """A PostgreSQL column type from the fixed table: canonical base name, integer modifiers,
    time zone (time/timestamp), interval fields and array dimensions."""

    base: str
    modifiers: tuple[int, ...] = ()
    with_time_zone: bool = False
    fields: str = ""
    dimensions: int = 0

    @property
    def column_type(self) -> ColumnType:
        """The value kind this type's values travel as (arrays as text)."""
        return ColumnType.STRING if self.dimensions else _PG_BASES[self.base].kind

    @property
    def element(self) -> PgType:
        """The type without its array dimensions."""
        return PgType(self.base, self.modifiers, self.with_time_zone, self.fields)

    def render(self) -> str:
        """The type as DDL text, built only from the fixed names and the integers."""
        mods = f"({','.join(str(m) for m in self.modifiers)})" if self.modifiers else ""
        if self.base in ("time", "timestamp"):
            zone = "with" if self.with_time_zone else "without"
            text = f"{self.base}{mods} {zone} time zone"
        elif self.base == "interval":
            text = f"interval{' ' + self.fields if self.fields else ''}{mods}"
        else:
            text = f"{self.base}{mods}"
        return text + "[]" * self.dimensions


def _tokens(text: str) -> list[tuple[str, str]]:
    if len(text) > _MAX_TYPE_TEXT:
        raise TypeSyntaxError(f"longer than {_MAX_TYPE_TEXT} characters")
    out: list[tuple[str, str]] = []
    at = 0
    end = len(text.rstrip())
    while at < end:
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            if text[at:].lstrip().startswith(".") and out:
                raise TypeSyntaxError("a schema-qualified (user-defined) type is not known")
            raise TypeSyntaxError(f"unexpected {text[at : at + 10].strip()!r} at {at}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind).lower()))
        at = m.end()
    return out


class _Reader:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, kind: str, value: str | None = None) -> str:
        got_kind, got = self.peek()
        if got_kind != kind or (value is not None and got != value):
            raise TypeSyntaxError(f"expected {value or kind}, found {got or 'the end'!r}")
        self.at += 1
        return got

    def words(self) -> list[str]:
        out = []
        while self.peek()[0] in ("word", "char"):
            out.append(self.take(self.peek()[0]))
        return out

    def modifiers(self) -> tuple[int, ...] | None:
        if self.peek() != ("punct", "("):
            return None
        self.take("punct", "(")
        values = [int(self.take("int"))]
        while self.peek() == ("punct", ","):
            self.take("punct", ",")
            values.append(int(self.take("int")))
        self.take("punct", ")")
        return tuple(values)

    def dimensions(self) -> int:
        count = 0
        while self.peek() == ("punct", "["):
            self.take("punct", "[")
            if self.peek()[0] == "int":
                self.take("int")
            self.take("punct", "]")
            count += 1
        return count


def _split_base(words: list[str]) -> tuple[str, bool, str]:
    """The longest known base name the words start with: (canonical base, with time zone
    from an alias, the remaining words)."""
    for n in range(min(len(words), 2), 0, -1):
        name = " ".join(words[:n])
        rest = " ".join(words[n:])
        if name in _PG_BASES:
            return name, False, rest
        if name in _PG_ALIASES:
            base, zone = _PG_ALIASES[name]
            return base, zone, rest
    shown = " ".join(words) or "nothing"
    raise TypeSyntaxError(f"{shown!r} is not a known PostgreSQL type")


def parse_pg_type(text: str) -> PgType:
    """A PostgreSQL type name (as ``format_type`` prints it, or a common alias) → a
    :class:`PgType`; :class:`TypeSyntaxError` for anything unknown or malformed."""
    reader = _Reader(_tokens(text))
    base, with_tz, suffix = _split_base(reader.words())
    modifiers = reader.modifiers()
    after = " ".join(reader.words())
    dimensions = reader.dimensions()
    if reader.peek()[0] != "end":
        raise TypeSyntaxError(f"unexpected {reader.peek()[1]!r} after the type")
    if suffix and after:
        raise TypeSyntaxError(f"unexpected {after!r}")
    qualifier = suffix or after
    fields = ""
    if base in ("time", "timestamp"):
        if qualifier not in _ZONES or (with_tz and qualifier):
            raise TypeSyntaxError(f"{qualifier!r} is not 'with time zone'/'without time zone'")
        with_tz = with_tz or _ZONES[qualifier]
    elif base == "interval":
        if after or (qualifier and qualifier not in _INTERVAL_FIELDS):
            raise TypeSyntaxError(f"{qualifier or after!r} are not interval fields")
        if modifiers and qualifier and not qualifier.endswith("second"):
            raise TypeSyntaxError("interval precision needs fields ending in second")
        fields = qualifier
    elif qualifier:
        raise TypeSyntaxError(f"unexpected {qualifier!r} after {base!r}")
    _check_modifiers(base, modifiers or ())
    if dimensions > _MAX_DIMENSIONS:
        raise TypeSyntaxError(f"more than {_MAX_DIMENSIONS} array dimensions")
    return PgType(base, modifiers or (), with_tz, fields, dimensions)


def _check_modifiers(base: str, modifiers: tuple[int, ...]) -> None:
    allowed = _PG_BASES[base].modifiers
    if len(modifiers) > len(allowed):
        raise TypeSyntaxError(f"{base} takes at most {len(allowed)} modifier(s)")
    for value, (low, high) in zip(modifiers, allowed, strict=False):
        if not low <= value <= high:
            raise TypeSyntaxError(f"{base} modifier {value} is outside {low}..{high}")
    if base == "numeric" and len(modifiers) == 2 and modifiers[1] > modifiers[0]:
        # Older servers refuse a scale above the precision; no source of ours produces one.
        raise TypeSyntaxError(f"numeric scale {modifiers[1]} exceeds precision {modifiers[0]}")


def pg_column_type(table: TableSchema, column: Column) -> str:
    """The DDL type of a PostgreSQL source's column for a PostgreSQL target, rendered from
    the fixed table; :class:`TargetSchemaError` if unknown, malformed or not of the column's
    value kind."""
    try:
        parsed = parse_pg_type(column.source_type)
    except TypeSyntaxError as e:
        raise TargetSchemaError.for_column(table, column, "PostgreSQL", str(e)) from None
    if parsed.column_type is not column.type:
        raise TargetSchemaError.for_column(
            table, column, "PostgreSQL",
            f"its values are {parsed.column_type.value}, the schema says {column.type.value}",
        )  # fmt: skip
    return parsed.render()


class TextForm(str):
    """A value a PostgreSQL target holds as the text form of a value that had a type of its
    own (a SQLite ``ANY`` column's integer, real or blob): verification compares the other
    side's value by its text form."""

    __slots__ = ()


def any_text_form(value: object) -> str | None:
    """An ``ANY`` value's text form as a PostgreSQL text column holds it (blobs as ``\\x`` +
    hex, reals in their shortest exact form)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, float):
        return repr(value)
    return str(value)


# -- SQLite -----------------------------------------------------------------------------------

_SQLITE_TYPE = re.compile(
    r"(?P<words>[A-Za-z_][A-Za-z0-9_]*(?: +[A-Za-z_][A-Za-z0-9_]*){0,5})"
    r"(?: *\( *(?P<a>[+-]?[0-9]{1,10}) *(?:, *(?P<b>[+-]?[0-9]{1,10}) *)?\))?"
)


def sqlite_type(text: str) -> str:
    """A SQLite declared type, validated and rendered from its words and integers alone;
    :class:`TypeSyntaxError` for anything else (punctuation, quotes, constraint keywords)."""
    if len(text) > _MAX_TYPE_TEXT:
        raise TypeSyntaxError(f"longer than {_MAX_TYPE_TEXT} characters")
    m = _SQLITE_TYPE.fullmatch(text.strip())
    if m is None:
        raise TypeSyntaxError("not words with optional (n) or (n, m)")
    numbers = [str(int(g)) for g in (m["a"], m["b"]) if g is not None]
    rendered = " ".join(m["words"].split()) + (f"({','.join(numbers)})" if numbers else "")
    # SQLite's own parser is the authority on where a type name ends: a word such as NOT,
    # DEFAULT or GENERATED would start a constraint. Declare it alone and read it back.
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(f"CREATE TABLE t (k INTEGER, c {rendered})")
        (_cid, _name, declared, notnull, default, pk, hidden) = probe.execute(
            "PRAGMA table_xinfo(t)"
        ).fetchall()[1]
        # (SQLite spells the types it knows, such as TEXT, in capitals.)
        clean = (declared.upper(), notnull, default, pk, hidden) == (
            rendered.upper(),
            0,
            None,
            0,
            0,
        )
    except sqlite3.Error as e:
        raise TypeSyntaxError(f"SQLite refuses it ({e})") from None
    finally:
        probe.close()
    if not clean:
        raise TypeSyntaxError("it declares more than a type (a constraint keyword)")
    return rendered


def sqlite_column_type(table: TableSchema, column: Column) -> str:
    """The DDL type of a SQLite source's column for a SQLite target (validated, see
    :func:`sqlite_type`); :class:`TargetSchemaError` if refused or of another value kind. A
    column with no declared type gets none (its values keep their storage class)."""
    if not column.source_type.strip() and column.type is ColumnType.ANY:
        return ""
    try:
        rendered = sqlite_type(column.source_type)
    except TypeSyntaxError as e:
        raise TargetSchemaError.for_column(table, column, "SQLite", str(e)) from None
    if affinity_type(rendered) is not column.type:
        raise TargetSchemaError.for_column(
            table, column, "SQLite",
            f"its values are {affinity_type(rendered).value}, the schema says "
            f"{column.type.value}",
        )  # fmt: skip
    return rendered
