"""PostgreSQL user-defined types a target may create: enum, domain, composite.

A PostgreSQL source's column of a user-defined type carries its description
(:class:`~kayak.cdc.change.UserType`) in the registered schema, untrusted like any schema
text. :func:`parse_user_type` validates it into a :class:`PgUserType`, whose DDL is composed
with psycopg's ``sql`` module from quoted identifiers, literals and types re-rendered from
:mod:`~kayak.pipeline.targets.types`' fixed table, never pasted. A domain is created over its
base type only: its ``CHECK`` constraints and ``NOT NULL`` are not carried (they are
expressions, which a target never takes from a registered schema; the source enforced them
already).

This module imports psycopg (the ``postgres`` extra): only the PostgreSQL target imports it,
so a SQLite-only pipeline runs without that extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import sql

from kayak.cdc.change import Column, ColumnType, TableSchema, UserType
from kayak.pipeline.targets.types import (
    PgType,
    TargetSchemaError,
    TypeSyntaxError,
    parse_pg_type,
)

__all__ = ["PgUserType", "parse_user_type", "pg_user_type"]

_MAX_NAME_BYTES: Final = 63  # NAMEDATALEN - 1: longer names and labels are refused


@dataclass(frozen=True)
class PgUserType:
    """A validated user-defined type: its DDL is composed with psycopg's ``sql`` module from
    identifiers, literals and types re-rendered from the fixed table."""

    kind: str  # enum, domain, composite
    schema: str
    name: str
    labels: tuple[str, ...] = ()
    base: PgType | None = None
    fields: tuple[tuple[str, PgType], ...] = ()
    dimensions: int = 0

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def column_type(self) -> str:
        """The column's type as DDL text: the quoted name, ``[]`` for an array of it."""
        return self.identifier.as_string(None) + "[]" * self.dimensions

    def create(self) -> sql.Composed:
        """``CREATE TYPE``/``CREATE DOMAIN`` for this type."""
        if self.kind == "enum":
            labels = sql.SQL(", ").join(sql.Literal(label) for label in self.labels)
            return sql.SQL("CREATE TYPE {} AS ENUM ({})").format(self.identifier, labels)
        if self.kind == "domain":
            assert self.base is not None
            return sql.SQL("CREATE DOMAIN {} AS {}").format(
                self.identifier, sql.SQL(self.base.render()))
        fields = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(f), sql.SQL(t.render())) for f, t in self.fields
        )
        return sql.SQL("CREATE TYPE {} AS ({})").format(self.identifier, fields)

    def add_label(self, label: str, before: str | None) -> sql.Composed:
        """``ALTER TYPE … ADD VALUE`` for an enum label, before ``before`` (None: last)."""
        _check_name(label, "label")
        place = sql.SQL("") if before is None else sql.SQL(" BEFORE {}").format(
            sql.Literal(before))
        return sql.SQL("ALTER TYPE {} ADD VALUE IF NOT EXISTS {}{}").format(
            self.identifier, sql.Literal(label), place)

    def add_field(self, name: str, kind: PgType) -> sql.Composed:
        """``ALTER TYPE … ADD ATTRIBUTE`` for a composite's new field."""
        return sql.SQL("ALTER TYPE {} ADD ATTRIBUTE {} {}").format(
            self.identifier, sql.Identifier(name), sql.SQL(kind.render()))


def _check_name(text: str, what: str) -> None:
    if not text or len(text.encode()) > _MAX_NAME_BYTES or "\0" in text:
        raise TypeSyntaxError(f"{what} {text[:70]!r} is not 1-{_MAX_NAME_BYTES} bytes")


def parse_user_type(described: UserType) -> PgUserType:
    """A user type's description, validated; :class:`TypeSyntaxError` if a name, label or
    type in it is not acceptable."""
    _check_name(described.schema, "schema")
    _check_name(described.name, "type name")
    if described.dimensions not in (0, 1):
        raise TypeSyntaxError("only scalars and one-dimensional arrays of a user type")
    if described.kind == "enum":
        for label in described.labels:
            _check_name(label, "label")
        if len(set(described.labels)) != len(described.labels):
            raise TypeSyntaxError("enum labels repeat")
        return PgUserType("enum", described.schema, described.name, labels=described.labels,
                          dimensions=described.dimensions)  # fmt: skip
    if described.kind == "domain":
        base = parse_pg_type(described.base)
        return PgUserType("domain", described.schema, described.name, base=base,
                          dimensions=described.dimensions)  # fmt: skip
    if described.kind == "composite":
        if not described.fields:
            raise TypeSyntaxError("a composite type without fields")
        fields = []
        for name, kind in described.fields:
            _check_name(name, "field")
            fields.append((name, parse_pg_type(kind)))
        if len({f for f, _ in fields}) != len(fields):
            raise TypeSyntaxError("composite fields repeat")
        return PgUserType("composite", described.schema, described.name, fields=tuple(fields),
                          dimensions=described.dimensions)  # fmt: skip
    raise TypeSyntaxError(f"{described.kind!r} is not enum, domain or composite")


def pg_user_type(table: TableSchema, column: Column) -> PgUserType:
    """A column's user-defined type for a PostgreSQL target, validated;
    :class:`TargetSchemaError` (one line) if its description is refused."""
    assert column.user_type is not None
    described = column.user_type
    try:
        if column.type is not ColumnType.STRING:
            raise TypeSyntaxError(
                f"its values are text, the schema says {column.type.value}")
        return parse_user_type(described)
    except TypeSyntaxError as e:
        shown = f"{described.kind} {described.schema[:60]}.{described.name[:60]}"
        raise TargetSchemaError(
            f"table {table.qualified_name!r} column {column.name!r}: type {shown!r} is not "
            f"created in a PostgreSQL target: {e}"
        ) from None
