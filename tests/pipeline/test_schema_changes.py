"""Schema changes and TRUNCATE while a PostgreSQL → PostgreSQL pipeline runs (issue 15).

Each scenario issues the DDL on a captured table while capture runs, then DML, and ends
either with the change carried (a new, compatible schema version in the registry; the target
altered; the rows that predate it as PostgreSQL gives them) or with capture stopped at the
change by one line naming the table, the column and the change, everything before it
applied. The replication job's per-batch plan (latest change per key, then
:class:`~kayak.pipeline.apply.ChangeApplier`) runs here without Spark, on the real broker and
registry; ``test_schema_changes_spark`` runs several of these DDLs through Spark once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from kayak.cdc.capture import CaptureLoop
from kayak.cdc.errors import SchemaChangeError
from kayak.cdc.postgres import PostgresSource, enable
from kayak.cdc.postgres.catalog import load_table
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.client.sync import Admin, Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.apply import ChangeApplier
from kayak.pipeline.decode import ChangeDecoder, DecodedChange, decode_records, latest_per_key
from kayak.pipeline.targets import open_target
from kayak.pipeline.targets.postgres_rows import connect, read_postgres_rows
from kayak.pipeline.topics import topic_ensurer
from kayak.pipeline.verify import verify_table
from kayak.serde import SchemaRegistryClient
from tests.broker.conftest import BrokerProcess
from tests.registry.conftest import registry_url

DDL = (
    "CREATE TABLE t (id int PRIMARY KEY, a text, c int NOT NULL, d int, "
    "n numeric(10,2), v varchar(5))"
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One broker (with its schema registry) for the module: (bootstrap servers, registry)."""
    process = BrokerProcess(tmp_path_factory.mktemp("schema") / "broker", web=True).start()
    try:
        yield process.bootstrap_servers, registry_url(process)
    finally:
        process.stop()


class Replica:
    """Capture → broker → decode → latest per key → ChangeApplier, one step per :meth:`sync`
    (what the pipeline does per micro-batch), for table ``t`` of the source."""

    def __init__(self, source_dsn: str, target_dsn: str, broker: tuple[str, str]) -> None:
        bootstrap, self.registry_url = broker
        self.source_dsn, self.target_dsn = source_dsn, target_dsn
        self.slot = "kayak_" + source_dsn.rsplit("/", 1)[1]
        enable(source_dsn, ["t"], publication=self.slot, slot=self.slot)
        self.source: PostgresSource | None = None
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        self.admin = Admin({"bootstrap.servers": bootstrap})
        # Every test has its own source database: its own topic prefix in the shared broker.
        self.prefix = "s" + source_dsn.rsplit("_", 1)[1]
        self.topic = f"{self.prefix}.public.t"
        self.registry = SchemaRegistryClient(self.registry_url)
        self.open_capture()
        self.consumer = Consumer({"bootstrap.servers": bootstrap})
        self.assigned = False
        self.applier = ChangeApplier(open_target(target_dsn), ChangeDecoder(self.registry_url))

    def open_capture(self) -> None:
        if self.source is not None:
            self.source.close()
        self.source = PostgresSource(self.source_dsn, ["t"], slot_name=self.slot,
                                     publication=self.slot, poll_interval_s=0.02)  # fmt: skip
        encoder = EventEncoder(prefix=self.prefix, connector="postgresql",
                               registry=self.registry)  # fmt: skip
        publisher = ChangePublisher(self.producer, encoder, db="source",
                                    ensure_topic=topic_ensurer(self.admin))  # fmt: skip
        self.capture = CaptureLoop(self.source, publisher, poll_timeout_s=0.3)

    def records(self) -> list[Any]:
        """Every record published since the last call."""
        if not self.assigned:
            self.consumer.assign([TopicPartition(self.topic, 0)])
            self.consumer.seek_to_beginning()
            self.assigned = True
        partition = TopicPartition(self.topic, 0)
        end = self.consumer.end_offsets([partition])[partition]
        records: list[Any] = []
        while self.consumer.position(partition) < end:
            for batch in self.consumer.getmany(timeout_ms=500).values():
                records.extend(batch)
        return records

    def decoded(self, records: list[Any]) -> list[DecodedChange]:
        raw = pa.RecordBatch.from_pydict({
            "key": [r.key for r in records], "value": [r.value for r in records],
            "topic": [self.topic] * len(records), "partition": [0] * len(records),
            "offset": [r.offset for r in records],
        })  # fmt: skip
        changes, bad = decode_records(self.applier.decoder, raw)
        assert bad == []
        return changes

    @staticmethod
    def latest(changes: list[DecodedChange]) -> list[DecodedChange]:
        """The job's plan: the latest change of every key, and every TRUNCATE."""
        return latest_per_key(changes)

    def sync(self) -> list[DecodedChange]:
        """Capture everything committed, apply it as one micro-batch; the decoded rows."""
        self.capture.drain()
        rows = self.decoded(self.records())
        self.applier.apply(self.latest(rows))
        return rows

    def verify(self) -> None:
        with connect(self.source_dsn) as conn:
            table = load_table(conn, "public", "t").schema
            rows = read_postgres_rows(conn, table, psycopg.sql.Identifier("t"))
        result = verify_table(table, rows, self.applier.target)
        assert result.equal, [d.line() for d in result.differences]

    def target(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.target_dsn) as conn:
            return conn.execute(query).fetchall()

    def target_columns(self) -> dict[str, tuple[str, bool, str | None]]:
        """name -> (type, NOT NULL, default expression) of the target's ``t``."""
        rows = self.target(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a LEFT JOIN pg_attrdef d "
            "ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = 't'::regclass "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
        return {name: (kind, notnull, default) for name, kind, notnull, default in rows}

    def close(self) -> None:
        for closer in (self.consumer.close, self.producer.close, self.admin.close,
                       self.applier.target.close):  # fmt: skip
            closer()
        if self.source is not None:
            self.source.close()


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute("INSERT INTO t VALUES (1, 'one', 10, 1, 1.50, 'a'), (2, 'two', 20, 2, 2.25, "
                     "'b'), (3, 'three', 30, 3, NULL, NULL)")  # fmt: skip
        yield conn


@pytest.fixture
def replica(db: psycopg.Connection[Any], postgres_dsn: str,
            broker: tuple[str, str]) -> Iterator[Replica]:  # fmt: skip
    base, name = postgres_dsn.rsplit("/", 1)
    db.execute(f'CREATE DATABASE "{name}_target"')
    replica = Replica(postgres_dsn, f"{base}/{name}_target", broker)
    replica.sync()  # the snapshot
    replica.verify()
    yield replica
    replica.close()
    db.execute(f'DROP DATABASE "{name}_target" WITH (FORCE)')


def versions(replica: Replica) -> list[int]:
    return replica.registry.versions(f"{replica.topic}-value")


def test_add_column_with_a_default_gives_existing_rows_the_default(
    db: psycopg.Connection[Any], replica: Replica
) -> None:
    db.execute("ALTER TABLE t ADD COLUMN e text DEFAULT 'dflt'")
    db.execute("INSERT INTO t (id, c) VALUES (4, 40)")
    db.execute("UPDATE t SET a = 'uno' WHERE id = 1")
    replica.sync()
    db.execute("ALTER TABLE t ADD COLUMN f int NOT NULL DEFAULT 42")
    db.execute("INSERT INTO t (id, c, f) VALUES (5, 50, 7)")
    replica.sync()
    replica.verify()
    # rows 2 and 3 were never changed since: they hold what PostgreSQL gave them
    assert replica.target("SELECT id, e, f FROM t ORDER BY id") == [
        (1, "dflt", 42), (2, "dflt", 42), (3, "dflt", 42), (4, "dflt", 42), (5, "dflt", 7)]
    columns = replica.target_columns()
    assert columns["e"] == ("text", False, "'dflt'::text")
    assert columns["f"] == ("integer", True, "42")
    assert len(versions(replica)) == 3  # each change a compatible new version


def test_drop_column_that_was_not_null(db: psycopg.Connection[Any], replica: Replica) -> None:
    db.execute("ALTER TABLE t DROP COLUMN c")
    with db.transaction():
        db.execute("INSERT INTO t (id, a) VALUES (4, 'four')")
        db.execute("UPDATE t SET a = 'deux' WHERE id = 2")
        db.execute("DELETE FROM t WHERE id = 3")
    replica.sync()
    replica.verify()  # the batch's insert, update and delete all arrived
    # kept (its values stay readable in the target), no longer NOT NULL
    assert replica.target_columns()["c"] == ("integer", False, None)
    assert replica.target("SELECT id, c FROM t ORDER BY id") == [(1, 10), (2, 20), (4, None)]


def test_rename_column_renames_the_target_column(
    db: psycopg.Connection[Any], replica: Replica
) -> None:
    db.execute("ALTER TABLE t RENAME COLUMN a TO a2")
    db.execute("INSERT INTO t (id, a2, c) VALUES (4, 'four', 40)")
    replica.sync()
    db.execute("ALTER TABLE t RENAME COLUMN a2 TO a3")
    db.execute("UPDATE t SET a3 = 'deux' WHERE id = 2")
    replica.sync()
    replica.verify()
    assert "a" not in replica.target_columns() and "a2" not in replica.target_columns()
    assert replica.target("SELECT id, a3 FROM t ORDER BY id") == [
        (1, "one"), (2, "deux"), (3, "three"), (4, "four")]


def test_rename_that_cannot_be_told_from_drop_and_add_stops_capture(
    db: psycopg.Connection[Any], replica: Replica
) -> None:
    db.execute("UPDATE t SET a = 'before' WHERE id = 1")
    db.execute("ALTER TABLE t RENAME COLUMN v TO v2")
    db.execute("UPDATE t SET v2 = 'x' WHERE id = 2")
    # renamed again before capture saw the first rename: the catalog no longer tells
    db.execute("ALTER TABLE t RENAME COLUMN v2 TO v3")
    with pytest.raises(SchemaChangeError) as stopped:
        replica.sync()
    line = str(stopped.value)
    assert "\n" not in line and "table public.t" in line and "'v2'" in line
    assert "RENAME COLUMN" in line
    # everything before the change was published: apply it as the pipeline would
    rows = replica.decoded(replica.records())
    replica.applier.apply(replica.latest(rows))
    assert replica.target("SELECT a, v FROM t WHERE id = 1") == [("before", "a")]
    assert replica.target("SELECT v FROM t WHERE id = 2") == [("b",)]  # nothing after it


def test_alter_type_to_bigint_widens_the_target(
    db: psycopg.Connection[Any], replica: Replica
) -> None:
    db.execute("ALTER TABLE t ALTER COLUMN d TYPE bigint")
    db.execute("INSERT INTO t (id, c, d) VALUES (4, 40, 3000000000)")
    replica.sync()
    replica.verify()
    assert replica.target_columns()["d"][0] == "bigint"
    assert replica.target("SELECT d FROM t WHERE id = 4") == [(3_000_000_000,)]


def test_numeric_scale_and_varchar_widened(db: psycopg.Connection[Any], replica: Replica) -> None:
    db.execute("ALTER TABLE t ALTER COLUMN n TYPE numeric(12,4), "
               "ALTER COLUMN v TYPE varchar(20)")  # fmt: skip
    db.execute("INSERT INTO t (id, c, n, v) VALUES (4, 40, 12345678.1234, 'longer than five')")
    db.execute("UPDATE t SET n = 0.0001 WHERE id = 1")
    replica.sync()
    replica.verify()  # no rounding: scale kept, values exact
    columns = replica.target_columns()
    assert (columns["n"][0], columns["v"][0]) == ("numeric(12,4)", "character varying(20)")
    assert replica.target("SELECT id, n::text, v FROM t ORDER BY id") == [
        (1, "0.0001", "a"), (2, "2.2500", "b"), (3, None, None),
        (4, "12345678.1234", "longer than five")]


def test_int_to_text_stops_naming_the_column_then_carries_once_allowed(
    db: psycopg.Connection[Any], replica: Replica
) -> None:
    db.execute("UPDATE t SET a = 'before' WHERE id = 1")
    db.execute("ALTER TABLE t ALTER COLUMN d TYPE text")
    db.execute("UPDATE t SET d = 'not a number' WHERE id = 2")
    with pytest.raises(SchemaChangeError) as stopped:
        replica.sync()
    line = str(stopped.value)
    assert "\n" not in line and "table public.t" in line
    assert "column 'd': ALTER COLUMN TYPE integer → text" in line
    assert "source position" in line
    rows = replica.decoded(replica.records())  # the update before the DDL was published
    replica.applier.apply(replica.latest(rows))
    assert replica.target("SELECT a, d FROM t ORDER BY id")[:2] == [("before", 1), ("two", 2)]
    # what the line says to do carries the change
    replica.registry.set_compatibility("NONE", f"{replica.topic}-value")
    replica.open_capture()
    replica.sync()
    replica.verify()
    assert replica.target_columns()["d"][0] == "text"


def test_truncate_is_a_barrier_in_its_batch(db: psycopg.Connection[Any], replica: Replica) -> None:
    with db.transaction():
        db.execute("INSERT INTO t (id, c) VALUES (4, 40)")
        db.execute("UPDATE t SET a = 'gone anyway' WHERE id = 1")
    db.execute("TRUNCATE t")
    db.execute("INSERT INTO t (id, c) VALUES (5, 50), (1, 11)")
    rows = replica.sync()  # one micro-batch: changes before the truncate, it, changes after
    assert [r.op for r in rows if r.op == "t"] == ["t"]
    replica.verify()
    assert replica.target("SELECT id, c FROM t ORDER BY id") == [(1, 11), (5, 50)]
    # replayed (a retried task), or met after the later changes (another partition was
    # ahead): the same result
    latest = replica.latest(rows)
    truncate = [r for r in latest if r.op == "t"]
    replica.applier.apply([r for r in latest if r.op != "t"])
    replica.applier.apply(truncate)
    replica.applier.apply(latest)
    assert replica.target("SELECT id, c FROM t ORDER BY id") == [(1, 11), (5, 50)]
    db.execute("INSERT INTO t (id, c) VALUES (6, 60)")
    replica.sync()
    replica.verify()
