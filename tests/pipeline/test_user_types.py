"""PostgreSQL user-defined types (enums, domains, composites) from capture to target, without
Spark: captured by the real source, encoded with the envelope's Avro schema (through JSON, as
the registry stores it), decoded, created and applied in a real target, verified."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest
from psycopg import sql

from kayak.cdc import Column, ColumnType, TableSchema
from kayak.cdc.change import Change, Op, UserType
from kayak.cdc.envelope import event_value, table_schema_from_avro, value_schema
from kayak.cdc.errors import SourceSetupError
from kayak.cdc.postgres import PostgresSource, enable
from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.targets import AppliedChange, Target, TargetSchemaError, open_target
from kayak.pipeline.targets.postgres_rows import connect, read_postgres_rows
from kayak.pipeline.verify import compare_rows
from tests.pipeline.conftest import CdcBroker

SOURCE_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'it''s "fine"', 'happy');
CREATE SCHEMA "Shop";
CREATE DOMAIN "Shop"."Price" AS numeric(10,2) CHECK (VALUE >= 0) NOT NULL;
CREATE DOMAIN flag AS boolean;
CREATE TYPE address AS (street text, zip varchar(10), floors integer[]);
CREATE TABLE people (
    id bigint PRIMARY KEY, m mood, ms mood[], price "Shop"."Price", f flag,
    home address, note text
);
"""

ROWS = [
    "(1, 'ok', '{sad,happy}', 12.5, true, ROW('1 Main St', '12345', '{1,2}'), 'a')",
    "(2, 'it''s \"fine\"', '{}', 0, false, ROW('a \"quoted\", (street)', NULL, NULL), NULL)",
    "(3, NULL, NULL, 7, NULL, NULL, 'c')",
]


@pytest.fixture
def source(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(SOURCE_DDL)
        conn.execute("INSERT INTO people VALUES " + ", ".join(ROWS[:2]))
        yield conn


@pytest.fixture
def target_dsn(postgres_dsn: str) -> Iterator[str]:
    """A second database of the same cluster, dropped afterwards."""
    base, name = postgres_dsn.rsplit("/", 1)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(f"{name}_t")))
    yield f"{base}/{name}_t"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(f"{name}_t")))  # fmt: skip


@pytest.fixture
def slot_name(postgres_dsn: str) -> str:
    return "kayak_" + postgres_dsn.rsplit("/", 1)[1]  # slots are cluster-wide


def capture(dsn: str, slot: str) -> PostgresSource:
    enable(dsn, ["people"], publication="kayak", slot=slot)
    return PostgresSource(dsn, ["people"], slot_name=slot, publication="kayak",
                          poll_interval_s=0.02)  # fmt: skip


def read_all(source: PostgresSource) -> list[Change]:
    changes: list[Change] = []
    while more := source.read(1000, 0.3):
        changes.extend(more)
    source.acknowledge(changes[-1])
    return changes


def through_avro(change: Change) -> tuple[TableSchema, dict[str, Any] | None]:
    """The change's table and after image as a target sees them: the envelope's value schema
    through JSON (as registered), the event through Avro."""
    schema = json.loads(json.dumps(value_schema("p", change.table, "postgresql")))
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, event_value(
        change, op=change.op.value, before=change.before, after=change.after, prefix="p",
        connector="postgresql", db="source", now_ms=0))  # fmt: skip
    out.seek(0)
    return table_schema_from_avro(schema), fastavro.schemaless_reader(out, parsed)["after"]


def apply_all(target: Target, changes: list[Change], connector: str = "postgresql") -> TableSchema:
    table: TableSchema | None = None
    for change in changes:
        table, after = through_avro(change)
        target.ensure_table(table, connector, change.position)
        key = table.key_of(after if after is not None else change.before or {})
        target.apply(table, [AppliedChange(change.op.value, key, after, change.position, 0)])
    assert table is not None
    return table


def source_rows(dsn: str, table: TableSchema) -> list[dict[str, Any]]:
    with connect(dsn) as conn:
        return read_postgres_rows(conn, table, sql.Identifier("public", "people"))


def catalog(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


ENUM_LABELS = ("SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e "
               "JOIN pg_type t ON t.oid = e.enumtypid GROUP BY 1")  # fmt: skip
TYPES = ("SELECT n.nspname, t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod) "
         "FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
         "WHERE t.typtype IN ('e', 'd') OR t.typname = 'address' ORDER BY 2")  # fmt: skip
FIELDS = ("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
          "JOIN pg_type t ON t.typrelid = a.attrelid WHERE t.typname = 'address' "
          "AND a.attnum > 0 ORDER BY a.attnum")  # fmt: skip
COLUMNS = ("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
           "WHERE attrelid = 'people'::regclass AND attnum > 0 ORDER BY attnum")  # fmt: skip


def test_enum_domain_composite_replicated_to_postgres(
    source: psycopg.Connection[Any], postgres_dsn: str, target_dsn: str, slot_name: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    capturing = capture(postgres_dsn, slot_name)
    source.execute("INSERT INTO people VALUES " + ROWS[2])
    source.execute("UPDATE people SET m = 'happy', home.zip = '99' WHERE id = 1")
    changes = read_all(capturing)
    columns = {c.name: c for c in changes[0].table.columns}
    assert columns["m"].type is ColumnType.STRING
    assert columns["m"].user_type == UserType(
        "enum", "public", "mood", labels=("sad", "ok", 'it\'s "fine"', "happy"))
    assert columns["ms"].user_type is not None and columns["ms"].user_type.dimensions == 1
    assert columns["price"].user_type == UserType("domain", "Shop", "Price", base="numeric(10,2)")
    assert columns["home"].user_type == UserType("composite", "public", "address", fields=(
        ("street", "text"), ("zip", "character varying(10)"), ("floors", "integer[]")))

    target = open_target(target_dsn)
    table = apply_all(target, changes)
    assert table.column("m").user_type == columns["m"].user_type  # the schema carried it
    assert compare_rows(table, source_rows(postgres_dsn, table), target.read_rows(table)).equal
    # Same types, labels in the same order, same fields; CHECK/NOT NULL of the domain are
    # not carried (the source enforced them).
    for query in (ENUM_LABELS, TYPES, FIELDS, COLUMNS):
        assert catalog(target_dsn, query) == catalog(postgres_dsn, query), query

    # A label added in the source later reaches the target with the first change carrying
    # it (the table's shape, and so its schema, did not change).
    source.execute("ALTER TYPE mood ADD VALUE 'ecstatic'")
    source.execute("UPDATE people SET m = 'ecstatic' WHERE id = 2")
    apply_all(target, read_all(capturing))
    capturing.close()
    assert catalog(target_dsn, ENUM_LABELS) == catalog(postgres_dsn, ENUM_LABELS)
    assert compare_rows(table, source_rows(postgres_dsn, table), target.read_rows(table)).equal
    # A label the source inserted in the middle: a newer schema carries it (here: a capture
    # started again reads the type anew) and the target adds it in its place.
    source.execute("ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok'")
    source.execute("UPDATE people SET m = 'meh' WHERE id = 3")
    again = PostgresSource(postgres_dsn, ["people"], slot_name=slot_name, publication="kayak")
    assert again.tables()[0].column("m").user_type is not None
    apply_all(target, read_all(again))
    again.close()
    assert catalog(target_dsn, ENUM_LABELS) == catalog(postgres_dsn, ENUM_LABELS)
    assert compare_rows(table, source_rows(postgres_dsn, table), target.read_rows(table)).equal
    target.close()

    # Into SQLite they are TEXT holding the text form.
    lite = open_target(f"sqlite:{tmp_path / 'target.db'}")
    apply_all(lite, changes)
    declared = dict(row[1:3] for row in sqlite3.connect(tmp_path / "target.db").execute(
        "PRAGMA table_info(people)"))  # fmt: skip
    assert [declared[c] for c in ("m", "ms", "price", "f", "home")] == ["TEXT"] * 5
    assert [r["home"] for r in lite.read_rows(table)][:2] == [
        '("1 Main St",99,"{1,2}")', '("a ""quoted"", (street)",,)']
    lite.close()


def test_user_types_a_target_cannot_create_are_refused_at_enable(
    postgres_dsn: str, slot_name: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('a'); CREATE DOMAIN md AS mood; "
                     "CREATE TYPE pair AS (m mood, n integer); "
                     "CREATE TABLE a (id int PRIMARY KEY, v md); "
                     "CREATE TABLE b (id int PRIMARY KEY, v pair)")  # fmt: skip
    with pytest.raises(SourceSetupError) as refused:
        enable(postgres_dsn, ["a"], slot=slot_name)
    assert str(refused.value) == (
        "table public.a column 'v': type md is not captured: domain public.md is over mood, "
        "not over a built-in type")
    with pytest.raises(SourceSetupError, match=r"^table public.b column 'v': type pair is not "
                       r"captured: composite public.pair has fields of types that are not "
                       r"built in \(m mood\)$"):  # fmt: skip
        enable(postgres_dsn, ["b"], slot=slot_name)


def described(user_type: dict[str, Any]) -> TableSchema:
    """A table whose column ``v`` has the (crafted) ``kayak.user_type``, as read from a
    registered schema."""
    honest = TableSchema("public", "victim", (
        Column("id", ColumnType.LONG, False, "bigint"),
        Column("v", ColumnType.STRING, True, "x", user_type=UserType("enum", "public", "x")),
    ), ("id",))  # fmt: skip
    schema = value_schema("p", honest, "postgresql")
    row = schema["fields"][0]["type"][1]
    row["fields"][1]["kayak.user_type"] = user_type
    return table_schema_from_avro(json.loads(json.dumps(schema)))


DROP = "x'); COMMIT; DROP TABLE other; --"


@pytest.mark.parametrize("crafted", [
    {"kind": "enum", "schema": "public", "name": 'e"; DROP TABLE other; --', "labels": [DROP]},
    {"kind": "composite", "schema": "public", "name": "c", "fields": [[DROP, "text"]]},
], ids=["enum", "composite"])  # fmt: skip
def test_crafted_names_and_labels_are_only_names_and_labels(
    postgres_dsn: str, crafted: dict[str, Any]
) -> None:
    """Names are quoted identifiers and labels literals: a crafted one creates a type of that
    odd name or label, and runs nothing else."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES (1)")
        target = open_target(postgres_dsn)
        table = described(crafted)
        target.ensure_table(table, "postgresql")
        target.close()
        assert conn.execute("SELECT count(*) FROM other").fetchone() == (1,)
        labels = conn.execute("SELECT enumlabel FROM pg_enum").fetchall()
        fields = conn.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_type t ON t.typrelid = a.attrelid "
            "WHERE t.typname = 'c'").fetchall()  # fmt: skip
    assert (labels if crafted["kind"] == "enum" else fields) == [(DROP,)]


@pytest.mark.parametrize("crafted", [
    {"kind": "domain", "schema": "public", "name": "d", "base": "integer CHECK (false)"},
    {"kind": "domain", "schema": "public", "name": "d", "base": "int); DROP TABLE other; --"},
    {"kind": "composite", "schema": "public", "name": "c", "fields": [["a", "int); DROP"]]},
    {"kind": "enum", "schema": "public", "name": "e", "labels": ["x" * 64]},
], ids=["domain-check", "domain-drop", "field-type", "long-label"])  # fmt: skip
def test_crafted_types_are_refused_before_any_ddl(
    postgres_dsn: str, crafted: dict[str, Any]
) -> None:
    target = open_target(postgres_dsn)
    with pytest.raises((TargetSchemaError, ValueError)) as refused:
        target.ensure_table(described(crafted), "postgresql")
    target.close()
    assert "\n" not in str(refused.value) and "'v'" in str(refused.value)
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_type WHERE typname IN ('d', 'c', 'e')"
                            ).fetchone() == (0,)  # fmt: skip
        assert conn.execute("SELECT to_regclass('victim')").fetchone() == (None,)


def test_malformed_user_type_descriptions_are_refused() -> None:
    for bad in ({"kind": "range", "schema": "s", "name": "n"},
                {"kind": "enum", "schema": "s", "name": "n", "labels": "abc"},
                {"kind": "enum", "schema": "s", "name": "n", "labels": ["a", "a"]},
                {"kind": "enum", "schema": "", "name": "n", "labels": []},
                {"kind": "composite", "schema": "s", "name": "n", "fields": [["a"]]},
                {"kind": "enum", "schema": "s", "name": "n", "labels": [], "dimensions": 3}):
        with pytest.raises(ValueError, match=r"column 'v': kayak\.user_type"):
            described(bad)


def test_a_schema_with_a_user_type_evolves_the_target(postgres_dsn: str) -> None:
    """A newer schema adds labels in their place and composite fields at the end; a type of
    that name that is something else in the target is refused with one line."""
    enum = UserType("enum", "public", "e", labels=("a", "c"))
    comp = UserType("composite", "public", "c", fields=(("x", "integer"),))
    table = TableSchema("public", "t", (
        Column("id", ColumnType.LONG, False, "bigint"),
        Column("e", ColumnType.STRING, True, "e", user_type=enum),
        Column("c", ColumnType.STRING, True, "c", user_type=comp),
    ), ("id",))  # fmt: skip
    target = open_target(postgres_dsn)
    target.ensure_table(table, "postgresql", "1")
    newer = replace(table, columns=(
        table.columns[0],
        replace(table.columns[1], user_type=replace(enum, labels=("a", "b", "c", "d"))),
        replace(table.columns[2], user_type=replace(comp, fields=(("x", "integer"),
                                                                  ("y", "text")))),
    ))  # fmt: skip
    target.ensure_table(newer, "postgresql", "2")
    row = {"id": 1, "e": "b", "c": "(1,two)"}
    target.apply(newer, [AppliedChange("c", {"id": 1}, row, "3", 0)])
    assert target.read_rows(newer) == [row]
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT enum_range(NULL::e)::text").fetchone() == ("{a,b,c,d}",)
    clash = replace(table, name="t2", columns=(
        table.columns[0], replace(table.columns[1], user_type=UserType(
            "domain", "public", "e", base="text"))))  # fmt: skip
    with pytest.raises(TargetSchemaError, match=r"^table 'public\.t2' column 'e': type "
                       r"'public\.e' exists in the target as enum, the source's is domain$"):
        target.ensure_table(clash, "postgresql")
    target.close()


def test_pgoutput_changes_of_user_types_keep_their_description(
    source: psycopg.Connection[Any], postgres_dsn: str, slot_name: str
) -> None:
    """Streamed changes (not only the snapshot) carry the columns' user types."""
    capturing = capture(postgres_dsn, slot_name)
    source.execute("INSERT INTO people VALUES " + ROWS[2])
    changes = read_all(capturing)
    capturing.close()
    streamed = [c for c in changes if c.op is Op.CREATE]
    assert streamed and streamed[0].table.column("home").user_type is not None


def test_user_types_end_to_end_through_spark(
    spark: object, postgres_dsn: str, target_dsn: str, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    """The one Spark run: snapshot and stream of enum, domain and composite columns, a label
    added while running, then source == target and the same types in the target."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(SOURCE_DDL)
        conn.execute("INSERT INTO people VALUES " + ", ".join(ROWS[:2]))
        spec = PipelineSpec(
            source=postgres_dsn, tables=["public.people"], target=target_dsn,
            work_dir=tmp_path / "work", bootstrap_servers=cdc_broker.bootstrap_servers,
            registry_url=cdc_broker.registry_url, slot_name="usertypes",
        )  # fmt: skip
        prepare_source(spec)
        with Pipeline(spec, spark) as pipeline:
            conn.execute("INSERT INTO people VALUES " + ROWS[2])
            conn.execute("ALTER TYPE mood ADD VALUE 'ecstatic'")
            conn.execute("UPDATE people SET m = 'ecstatic', home.zip = '7' WHERE id = 1")
            pipeline.catch_up()
            (result,) = pipeline.verify()
            assert result.equal, [d.line() for d in result.differences]
            assert result.rows == 3
    for query in (ENUM_LABELS, TYPES, FIELDS, COLUMNS):
        assert catalog(target_dsn, query) == catalog(postgres_dsn, query), query
