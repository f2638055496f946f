"""Target DDL is built from a fixed type table, never from registered schema text.

The attack of issue 15: an anonymous client registers a new schema version whose extra
column has a crafted ``kayak.source_type`` and produces one event with it; the job must refuse
the schema with one line naming table, column and type, and run nothing on the target.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from kayak.cdc import Column, ColumnType, TableSchema, format_position
from kayak.cdc.change import Change, Op
from kayak.cdc.postgres.catalog import load_table
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.client.sync import Admin, Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.apply import ChangeApplier
from kayak.pipeline.decode import ChangeDecoder, DecodedChange, decode_records
from kayak.pipeline.targets import AppliedChange, Target, TargetSchemaError, open_target
from kayak.pipeline.targets.postgres_columns import declared_type as pg_declared
from kayak.pipeline.targets.sqlite import declared_type as sqlite_declared
from kayak.pipeline.targets.types import TypeSyntaxError, parse_pg_type, sqlite_type
from kayak.pipeline.topics import topic_ensurer
from kayak.serde import SchemaRegistryClient
from tests.broker.conftest import BrokerProcess
from tests.registry.conftest import registry_url


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One broker (with its schema registry) for the module: (bootstrap servers, registry)."""
    process = BrokerProcess(tmp_path_factory.mktemp("ddl") / "broker", web=True).start()
    try:
        yield process.bootstrap_servers, registry_url(process)
    finally:
        process.stop()


class TargetDb:
    """The target under attack, with an unrelated table ``other`` holding one row."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        self.schema = "public" if kind == "postgresql" else "main"
        self.target: Target = open_target(url)
        self._sql("CREATE TABLE other (id integer PRIMARY KEY, v text)")
        self._sql("INSERT INTO other VALUES (1, 'keep me')")

    def _sql(self, statement: str) -> list[tuple[Any, ...]]:
        if self.kind == "postgresql":
            with psycopg.connect(self.url, autocommit=True) as conn:
                cur = conn.execute(statement)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.url.removeprefix("sqlite:"))
        try:
            with conn:
                return conn.execute(statement).fetchall()
        finally:
            conn.close()

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        return self._sql(f"SELECT * FROM {table} ORDER BY 1")

    def columns(self, table: str) -> list[str]:
        if self.kind == "postgresql":
            found = self._sql(
                "SELECT column_name FROM information_schema.columns "
                f"WHERE table_name = '{table}' ORDER BY ordinal_position"
            )
        else:
            found = [(r[1],) for r in self._sql(f"PRAGMA table_info({table})")]
        return [name for (name,) in found]


@pytest.fixture(params=["sqlite", "postgresql"])
def target_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TargetDb]:
    if request.param == "sqlite":
        db = TargetDb("sqlite", f"sqlite:{tmp_path / 'target.db'}")
    else:
        db = TargetDb("postgresql", request.getfixturevalue("postgres_dsn"))
    yield db
    db.target.close()


def publish_and_decode(
    broker: tuple[str, str], prefix: str, connector: str, changes: list[Change]
) -> list[DecodedChange]:
    """Register the changes' schemas and produce their events as any client could, read the
    topic back and decode it as the Spark workers do (``decode_records``)."""
    bootstrap, registry = broker
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        encoder = EventEncoder(prefix=prefix, connector=connector,
                               registry=SchemaRegistryClient(registry))  # fmt: skip
        publisher = ChangePublisher(producer, encoder, db="source",
                                    ensure_topic=topic_ensurer(admin))  # fmt: skip
        publisher.publish(changes)
    finally:
        producer.close()
        admin.close()
    topic = f"{prefix}.{changes[0].table.schema}.{changes[0].table.name}"
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records: list[Any] = []
        while batch := consumer.getmany(timeout_ms=1000):
            for recs in batch.values():
                records.extend(recs)
    raw = pa.RecordBatch.from_pydict({
        "key": [r.key for r in records], "value": [r.value for r in records],
        "topic": [topic] * len(records), "partition": [0] * len(records),
        "offset": [r.offset for r in records],
    })  # fmt: skip
    rows, bad = decode_records(ChangeDecoder(registry), raw)
    assert bad == [] and len(rows) == len(changes)
    return rows


def insert(table: TableSchema, position: int, **values: Any) -> Change:
    return Change(Op.CREATE, table, None, values, format_position(position), 0)


# Valid in both the CREATE TABLE and the ADD COLUMN position of the old code; COMMIT makes
# the DROP stick although the statement after it fails.
DROP_OTHER = "int); COMMIT; DROP TABLE other; --"
# A constraint smuggled in as a type: every later row would be refused.
SMUGGLED_CHECK = "integer CHECK (evil < 0)"


@pytest.mark.parametrize("crafted", [DROP_OTHER, SMUGGLED_CHECK], ids=["drop", "check"])
@pytest.mark.parametrize("first", [True, False], ids=["create-table", "add-column"])
def test_crafted_source_type_is_refused_and_runs_nothing(
    target_db: TargetDb, broker: tuple[str, str], tmp_path: Path, crafted: str, first: bool
) -> None:
    schema, connector = target_db.schema, target_db.kind
    name = f"accounts_{'create' if first else 'alter'}_{len(crafted)}"
    honest = TableSchema(schema, name, (
        Column("id", ColumnType.LONG, False, "bigint" if connector == "postgresql" else "INTEGER"),
        Column("owner", ColumnType.STRING, True, "text" if connector == "postgresql" else "TEXT"),
    ), ("id",))  # fmt: skip
    evil = TableSchema(
        schema, name, (*honest.columns, Column("evil", ColumnType.LONG, True, crafted)), ("id",)
    )
    changes = [insert(evil, 2, id=2, owner="mallory", evil=0)]
    if not first:
        changes.insert(0, insert(honest, 1, id=1, owner="alice"))
    rows = publish_and_decode(broker, f"ddl{tmp_path.name[-12:]}", connector, changes)
    applier = ChangeApplier(target_db.target, ChangeDecoder(broker[1]))  # as an executor does
    if not first:
        assert applier.apply(rows[:1]) == 1  # the honest version creates the table
    with pytest.raises(TargetSchemaError) as refused:
        applier.apply(rows[-1:])
    message = str(refused.value)
    assert "\n" not in message
    assert f"table '{schema}.{name}' column 'evil': type {crafted!r}" in message
    # Nothing ran: the unrelated table and its row are there, the attacked table unchanged.
    assert target_db.rows("other") == [(1, "keep me")]
    if first:
        assert target_db.columns(name) == []  # no table was created
    else:
        assert target_db.columns(name) == ["id", "owner"]
        assert target_db.rows(name) == [(1, "alice")]


# -- the grammar, table-driven -----------------------------------------------------------------

PG_ACCEPTED = {
    "integer": "integer", "int4": "integer", "int8": "bigint", "smallint": "smallint",
    "numeric(12,4)": "numeric(12,4)", "NUMERIC ( 12 , 4 )": "numeric(12,4)",
    "numeric": "numeric", "decimal(5)": "numeric(5)",
    "character varying(255)": "character varying(255)", "varchar": "character varying",
    "character(1)": "character(1)", '"char"': '"char"', "bpchar": "character",
    "timestamp(3) with time zone": "timestamp(3) with time zone",
    "timestamptz": "timestamp with time zone",
    "timestamp without time zone": "timestamp without time zone",
    "time(6) with time zone": "time(6) with time zone",
    "interval day to second(3)": "interval day to second(3)", "interval(2)": "interval(2)",
    "int4[]": "integer[]", "text[][]": "text[][]", "numeric(10,2)[3]": "numeric(10,2)[]",
    "double precision": "double precision", "bit varying(8)": "bit varying(8)",
    "jsonb": "jsonb", "uuid": "uuid", "tstzrange": "tstzrange",
}  # fmt: skip

PG_REFUSED = [
    "int); DROP TABLE other; --", "int; DROP TABLE other", "integer -- comment",
    "integer /* c */", "public.mood", "mood", '"Mood"', "integer not null",
    "integer default 1", 'integer collate "C"', "text references other", "numeric(1001)",
    "numeric(0)", "numeric(12,4,1)", "numeric(2,5)", "varchar(0)", "varchar(10485761)",
    "timestamp(7)", "timestamptz with time zone", "timestamp with time", "interval day(3)",
    "interval fortnight", "integer(4)", "text(10)", "int4[][][][][][][]", "integer[",
    "numeric(99999999999)", "", "   ", "int\n; drop", "x" * 200, "integer;",
]  # fmt: skip

SQLITE_ACCEPTED = {
    "INTEGER": "INTEGER", "VARCHAR(255)": "VARCHAR(255)", "UNSIGNED BIG INT": "UNSIGNED BIG INT",
    "DECIMAL(10, 5)": "DECIMAL(10,5)", "double   precision": "double precision",
    "DATETIME": "DATETIME", "NVARCHAR(100)": "NVARCHAR(100)", "NUMERIC": "NUMERIC",
    "REAL": "REAL", "BLOB": "BLOB", "text": "text", "BOOLEAN": "BOOLEAN",
}  # fmt: skip

SQLITE_REFUSED = [
    "INT); DROP TABLE other; --", "INT; DROP TABLE other", "INT NOT NULL", "INT DEFAULT 0",
    "INT PRIMARY KEY", "INT UNIQUE", "INT CHECK (1)", "INT REFERENCES other",
    "INT GENERATED ALWAYS AS (1)", "INT AS (1)", "TEXT COLLATE NOCASE", "INT CONSTRAINT c",
    '"INT"', "INT -- x", "VARCHAR(1,2,3)", "x" * 200,
]  # fmt: skip


@pytest.mark.parametrize(("text", "rendered"), PG_ACCEPTED.items())
def test_postgres_types_parse_and_render_canonically(text: str, rendered: str) -> None:
    assert parse_pg_type(text).render() == rendered


@pytest.mark.parametrize("text", PG_REFUSED)
def test_postgres_types_refused(text: str) -> None:
    with pytest.raises(TypeSyntaxError):
        parse_pg_type(text)


@pytest.mark.parametrize(("text", "rendered"), SQLITE_ACCEPTED.items())
def test_sqlite_types_accepted(text: str, rendered: str) -> None:
    assert sqlite_type(text) == rendered


@pytest.mark.parametrize("text", SQLITE_REFUSED)
def test_sqlite_types_refused(text: str) -> None:
    with pytest.raises(TypeSyntaxError):
        sqlite_type(text)


def test_type_must_match_the_value_kind() -> None:
    """A schema whose declared type contradicts the values it carries is refused too."""
    table = TableSchema("public", "t", (
        Column("id", ColumnType.LONG, False, "bigint"),
        Column("n", ColumnType.STRING, True, "integer"),
    ), ("id",))  # fmt: skip
    with pytest.raises(TargetSchemaError, match=r"'public\.t' column 'n'.*'integer'.*string"):
        pg_declared(table, table.columns[1], "postgresql")
    lite = TableSchema("main", "t", (
        Column("id", ColumnType.LONG, False, "INTEGER"),
        Column("n", ColumnType.STRING, True, "INTEGER"),
    ), ("id",))  # fmt: skip
    with pytest.raises(TargetSchemaError, match=r"'main\.t' column 'n'.*'INTEGER'"):
        sqlite_declared(lite, lite.columns[1], "sqlite")
    # Another source's types are never read: the value kind decides.
    assert pg_declared(lite, lite.columns[1], "sqlite") == "text"
    assert sqlite_declared(table, table.columns[1], "postgresql") == "TEXT"


SOURCE_DDL = """
CREATE TABLE public."Odd ""name"" ;--" (
    "Id; DROP" bigint PRIMARY KEY, a smallint, b integer, c numeric(12,4), d numeric,
    e character varying(255), f character(3), g "char", h text, i timestamp(3) with time zone,
    j timestamp without time zone, k time(2) without time zone, l interval day to second(3),
    m date, n double precision, o real, p boolean, q bytea, r jsonb, s json, t uuid,
    u integer[], v numeric(10,2)[], w text[][], x bit varying(8), y inet, z tstzrange,
    "x.y" interval year to month, "Mixed Case" money
)
"""


def test_postgres_target_recreates_every_known_source_type(postgres_dsn: str) -> None:
    """PostgreSQL → PostgreSQL: each column's target type is exactly the source's, through
    the parse/render round trip, and awkward identifiers are quoted."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(SOURCE_DDL)
        conn.execute("CREATE SCHEMA copy")
        source = load_table(conn, "public", 'Odd "name" ;--').schema
        target = open_target(postgres_dsn)
        moved = TableSchema("copy", source.name, source.columns, source.key)
        target.ensure_table(moved, "postgresql")
        target.ensure_table(moved, "postgresql")  # again: nothing to add, nothing fails
        target.close()
        types = conn.execute(
            "SELECT n.nspname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND a.attnum > 0 ORDER BY n.nspname, a.attnum",
            (source.name,),
        ).fetchall()
    copied = [(name, t) for schema, name, t in types if schema == "copy"]
    assert copied == [(name, t) for schema, name, t in types if schema == "public"]
    assert len(copied) == 29


def test_sqlite_target_identifiers_are_quoted(tmp_path: Path) -> None:
    table = TableSchema("main", 'we"ird; DROP TABLE other; --', (
        Column('k"; --', ColumnType.LONG, False, "INTEGER"),
        Column("v", ColumnType.STRING, True, "VARCHAR(10)"),
    ), ('k"; --',))  # fmt: skip
    db = TargetDb("sqlite", f"sqlite:{tmp_path / 'target.db'}")
    db.target.ensure_table(table, "sqlite")
    row = {'k"; --': 1, "v": "x"}
    change = AppliedChange("c", {'k"; --': 1}, row, format_position(1), 0)
    assert db.target.apply(table, [change]) == 1
    assert db.target.read_rows(table) == [row]
    assert db.rows("other") == [(1, "keep me")]
    conn = sqlite3.connect(tmp_path / "target.db")
    declared = conn.execute(f"PRAGMA table_info({quote(table.name)})").fetchall()
    conn.close()
    assert [(r[1], r[2]) for r in declared] == [('k"; --', "INTEGER"), ("v", "VARCHAR(10)")]
    db.target.close()


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
