"""What the PostgreSQL catalog says about captured tables and about the server's readiness.

Every function takes an open psycopg connection and raises
:class:`~kayak.cdc.errors.SourceSetupError` with a message that says what to change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from kayak.cdc.change import Column, TableSchema, UserType
from kayak.cdc.errors import SourceSetupError
from kayak.cdc.postgres.types import column_type, decode_value

__all__ = [
    "CatalogColumn",
    "CatalogTable",
    "catalog_columns",
    "check_replication_ready",
    "describe_user_type",
    "format_types",
    "load_table",
    "parse_table_name",
    "primary_key",
    "redact_dsn",
]


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **params)


_IDENTIFIER = r'"(?:[^"]|"")+"|[^."]+'
_TABLE_NAME = re.compile(rf"(?:({_IDENTIFIER})\.)?({_IDENTIFIER})")


def parse_table_name(name: str) -> tuple[str, str]:
    """``"schema.table"`` or ``"table"`` (schema ``public``) → ``(schema, table)``.

    Either part may be quoted as in SQL (``public."OrderItems"``, ``"Shop"."T"``,
    ``""`` inside quotes for a quote); an unquoted part is taken exactly as written.
    """
    found = _TABLE_NAME.fullmatch(name.strip())
    if found is None:
        raise SourceSetupError(
            f"bad table name {name!r}: expected 'table' or 'schema.table' (parts may be "
            'quoted: public."OrderItems")'
        )
    schema, table = found.group(1), found.group(2)
    return _unquote(schema) if schema else "public", _unquote(table)


def _unquote(identifier: str) -> str:
    if identifier.startswith('"'):
        return identifier[1:-1].replace('""', '"')
    return identifier


@dataclass(frozen=True)
class CatalogColumn:
    """One live column as ``pg_attribute`` describes it now. ``missing`` is the text of the
    value rows that predate the column hold (``attmissingval``, set by ``ADD COLUMN …
    DEFAULT`` with a non-volatile default until the table is next rewritten)."""

    attnum: int
    name: str
    type_oid: int
    type_modifier: int
    source_type: str
    not_null: bool
    has_default: bool
    has_missing: bool
    missing: str | None  # None with has_missing: an array value, not read


@dataclass(frozen=True)
class CatalogTable:
    """A captured table as the catalog describes it now."""

    oid: int
    schema: TableSchema
    type_oids: tuple[int, ...]  # per column, for reading raw text values
    replica_identity: str  # pg_class.relreplident: 'd', 'f', 'i' or 'n'
    attnums: tuple[int, ...] = ()  # per column: pg_attribute.attnum, stable across renames


def catalog_columns(conn: psycopg.Connection[Any], table_oid: int) -> list[CatalogColumn]:
    """The table's live, non-generated columns in attnum order (pgoutput's order)."""
    # attmissingval is a one-element array of the column's type: its text, read back as
    # text[], gives the element's own output (array columns' missing values stay None).
    rows = conn.execute(
        "SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, "
        "format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef, a.atthasmissing, "
        "CASE WHEN a.atthasmissing AND t.typcategory <> 'A' "
        "THEN (a.attmissingval::text::text[])[1] END "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attgenerated = '' ORDER BY a.attnum",
        (table_oid,),
    ).fetchall()
    return [CatalogColumn(*row) for row in rows]


def check_replication_ready(conn: psycopg.Connection[Any]) -> None:
    """wal_level is logical, the role may use replication slots, the database is UTF-8."""
    row = conn.execute(
        "SELECT current_setting('wal_level'), current_setting('server_encoding'), "
        "r.rolsuper OR r.rolreplication, current_user "
        "FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    assert row is not None
    wal_level, encoding, may_replicate, user = row
    if wal_level != "logical":
        raise SourceSetupError(
            f"PostgreSQL wal_level is {wal_level!r}; change data capture needs 'logical' "
            "(set wal_level = logical in postgresql.conf and restart the server)"
        )
    if not may_replicate:
        raise SourceSetupError(
            f"role {user!r} may not use replication slots: ALTER ROLE {user} REPLICATION"
        )
    if encoding != "UTF8":
        raise SourceSetupError(
            f"database encoding is {encoding}; capture reads values as UTF-8 text and needs a "
            "UTF8 database"
        )


def primary_key(conn: psycopg.Connection[Any], table_oid: int) -> tuple[str, ...]:
    """The primary key's column names in key order (empty if there is none)."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.position",
        (table_oid,),
    ).fetchall()
    return tuple(r[0] for r in rows)


def load_table(conn: psycopg.Connection[Any], schema: str, name: str) -> CatalogTable:
    """Read a table's columns, key and replica identity; error if it cannot be captured."""
    qualified = f"{schema}.{name}"
    row = conn.execute(
        "SELECT c.oid, c.relkind, c.relreplident, has_table_privilege(c.oid, 'SELECT') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, name),
    ).fetchone()
    if row is None:
        raise SourceSetupError(f"table {qualified} does not exist")
    oid, relkind, replica_identity, may_select = row
    if relkind not in ("r", "p"):
        raise SourceSetupError(f"{qualified} is not a table (relkind {relkind!r})")
    if not may_select:
        raise SourceSetupError(f"no SELECT privilege on {qualified} (needed for the snapshot)")
    # pgoutput leaves generated columns out of its tuples, so the schema does too.
    catalog = catalog_columns(conn, oid)
    key = primary_key(conn, oid)
    if not key:
        raise SourceSetupError(
            f"table {qualified} has no primary key; capture needs one for per-key order"
        )
    if replica_identity not in ("d", "f"):
        kind = {"n": "NOTHING", "i": "USING INDEX"}.get(replica_identity, replica_identity)
        raise SourceSetupError(
            f"table {qualified} has REPLICA IDENTITY {kind}; capture supports DEFAULT "
            f"(primary key) and FULL: ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT"
        )
    user_types = {}
    for c in catalog:
        try:
            user_types[c.name] = describe_user_type(conn, c.type_oid)
        except UnsupportedTypeError as e:
            raise SourceSetupError(
                f"table {qualified} column {c.name!r}: type {c.source_type} is not captured: {e}"
            ) from None
    columns = tuple(
        Column(c.name, column_type(c.type_oid), nullable=not c.not_null,
               source_type=c.source_type, default=missing_value(c),
               user_type=user_types[c.name])
        for c in catalog
    )  # fmt: skip
    return CatalogTable(
        oid=oid,
        schema=TableSchema(schema=schema, name=name, columns=columns, key=key),
        type_oids=tuple(wire_type_oid(conn, c.type_oid) for c in catalog),
        replica_identity=replica_identity,
        attnums=tuple(c.attnum for c in catalog),
    )


def wire_type_oid(conn: psycopg.Connection[Any], type_oid: int) -> int:
    """The type OID a query result reports for a column of this type: a domain's base type
    (repeatedly), any other type itself. Raw-text readers register loaders for these."""
    for _ in range(32):  # domains over domains, never a cycle
        row = conn.execute(
            "SELECT typbasetype FROM pg_type WHERE oid = %s AND typtype = 'd'", (type_oid,)
        ).fetchone()
        if row is None:
            return type_oid
        type_oid = int(row[0])
    return type_oid


class UnsupportedTypeError(ValueError):
    """A user-defined type capture cannot describe to a target; the message says why."""


# A type kayak's targets may know: one of PostgreSQL's own (not an extension's, not a
# pseudo-type), so a target can recreate it from the fixed type table.
_BUILT_IN = "n.nspname = 'pg_catalog' AND t.typtype IN ('b', 'r', 'm')"


def describe_user_type(conn: psycopg.Connection[Any], type_oid: int) -> UserType | None:
    """The description of a column type that is a user-defined enum, domain or composite (or
    a one-dimensional array of one) for a target to create the same type; None for a
    built-in type. :class:`UnsupportedTypeError` for a user type a target could not create
    (a domain or composite over another user-defined or extension type)."""
    row = conn.execute(
        "SELECT t.typtype, n.nspname, t.typname, t.typcategory, t.typelem "
        "FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s",
        (type_oid,),
    ).fetchone()
    if row is None:
        return None
    typtype, _schema, _name, category, element = row
    if category == "A" and element:
        inner = describe_user_type(conn, element)
        if inner is None:
            return None
        if inner.dimensions:
            raise UnsupportedTypeError("an array of arrays of a user-defined type")
        return UserType(inner.kind, inner.schema, inner.name, inner.labels, inner.base,
                        inner.fields, dimensions=1)  # fmt: skip
    if typtype == "e":
        return _enum_type(conn, type_oid)
    if typtype == "d":
        return _domain_type(conn, type_oid)
    if typtype == "c":
        return _composite_type(conn, type_oid)
    return None


def _enum_type(conn: psycopg.Connection[Any], type_oid: int) -> UserType:
    schema, name, labels = _one(conn.execute(
        "SELECT n.nspname, t.typname, array(SELECT e.enumlabel FROM pg_enum e "
        "WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) "
        "FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s",
        (type_oid,)).fetchone())  # fmt: skip
    return UserType("enum", schema, name, labels=tuple(labels))


def _domain_type(conn: psycopg.Connection[Any], type_oid: int) -> UserType:
    schema, name, base, built_in = _one(conn.execute(
        "SELECT dn.nspname, d.typname, format_type(d.typbasetype, d.typtypmod), "
        f"EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        f"WHERE t.oid = d.typbasetype AND {_BUILT_IN}) "
        "FROM pg_type d JOIN pg_namespace dn ON dn.oid = d.typnamespace WHERE d.oid = %s",
        (type_oid,)).fetchone())  # fmt: skip
    if not built_in:
        raise UnsupportedTypeError(
            f"domain {schema}.{name} is over {base}, not over a built-in type")
    return UserType("domain", schema, name, base=base)


def _composite_type(conn: psycopg.Connection[Any], type_oid: int) -> UserType:
    schema, name = _one(conn.execute(
        "SELECT n.nspname, t.typname FROM pg_type t "
        "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s",
        (type_oid,)).fetchone())  # fmt: skip
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
        f"EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        f"WHERE t.oid = a.atttypid AND {_BUILT_IN}) "
        "FROM pg_type c JOIN pg_attribute a ON a.attrelid = c.typrelid "
        "WHERE c.oid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (type_oid,),
    ).fetchall()
    foreign = [f"{field} {kind}" for field, kind, built_in in rows if not built_in]
    if foreign:
        raise UnsupportedTypeError(
            f"composite {schema}.{name} has fields of types that are not built in "
            f"({', '.join(foreign)})")
    return UserType("composite", schema, name, fields=tuple((f, k) for f, k, _ in rows))


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    if row is None:
        raise UnsupportedTypeError("the type is gone from the catalog")
    return row


def missing_value(column: CatalogColumn) -> Any:
    """The value rows that predate the column hold, in its type's representation (None:
    NULL, or not known from the catalog)."""
    if column.missing is None:
        return None
    return decode_value(column_type(column.type_oid), column.missing)


def format_types(
    conn: psycopg.Connection[Any], types: Sequence[tuple[int, int]]
) -> list[str]:
    """``format_type(oid, typmod)`` for each pair, in one round trip."""
    if not types:
        return []
    rows = conn.execute(
        "SELECT format_type(t.oid, t.typmod) FROM unnest(%s::oid[], %s::int[]) "
        "WITH ORDINALITY AS t(oid, typmod, position) ORDER BY t.position",
        ([oid for oid, _ in types], [mod for _, mod in types]),
    ).fetchall()
    return [r[0] for r in rows]


def not_null_columns(conn: psycopg.Connection[Any], table_oid: int) -> set[str]:
    """Names of the table's NOT NULL columns as of now."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
        "AND NOT attisdropped AND attnotnull",
        (table_oid,),
    ).fetchall()
    return {r[0] for r in rows}


def tables_in_publication(conn: psycopg.Connection[Any], publication: str) -> set[tuple[str, str]]:
    """``(schema, table)`` of every table the publication publishes."""
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (publication,),
    ).fetchall()
    return {(r[0], r[1]) for r in rows}


def check_publication(
    conn: psycopg.Connection[Any], publication: str, tables: Iterable[tuple[str, str]]
) -> None:
    """The publication exists, publishes inserts, updates and deletes, and every table."""
    row = conn.execute(
        "SELECT pubinsert AND pubupdate AND pubdelete FROM pg_publication WHERE pubname = %s",
        (publication,),
    ).fetchone()
    if row is None:
        raise SourceSetupError(
            f"publication {publication!r} does not exist: run "
            "kayak.cdc.postgres.enable(dsn, tables) first"
        )
    if not row[0]:
        raise SourceSetupError(
            f"publication {publication!r} must publish insert, update and delete"
        )
    published = tables_in_publication(conn, publication)
    missing = [f"{s}.{t}" for s, t in tables if (s, t) not in published]
    if missing:
        raise SourceSetupError(
            f"publication {publication!r} does not publish {', '.join(missing)}: run "
            "kayak.cdc.postgres.enable(dsn, tables) with every captured table"
        )
