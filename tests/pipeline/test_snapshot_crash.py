"""Capture dies during the initial snapshot; rows change while it is down (issue 15).

The restart takes the snapshot again. What the first, unfinished snapshot published was
applied already, so the target holds rows the source has since deleted: the second snapshot's
end (each table's ``last_in_data_collection`` row, or a TRUNCATE for a table with no rows
left) removes every target row it did not see. Capture runs here without Spark, its events
decoded and applied micro-batch by micro-batch as the replication job's tasks do
(``decode_records`` → ``latest_per_key`` → ``ChangeApplier``), on the real broker, registry,
PostgreSQL source and a SQLite target; "dying" is closing the source with the snapshot
unacknowledged, which is what a ``kill -9`` leaves in PostgreSQL.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from kayak.cdc.capture import CaptureLoop
from kayak.cdc.postgres import PostgresSource, enable
from kayak.cdc.postgres.catalog import load_table
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.client.sync import Admin, Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.apply import ChangeApplier
from kayak.pipeline.decode import ChangeDecoder, decode_records, latest_per_key
from kayak.pipeline.targets import open_target
from kayak.pipeline.targets.postgres_rows import read_postgres_rows
from kayak.pipeline.topics import topic_ensurer
from kayak.pipeline.verify import verify_table
from kayak.serde import SchemaRegistryClient
from tests.broker.conftest import BrokerProcess
from tests.registry.conftest import registry_url

ROWS = 12_000  # ~4 MB of events per snapshot: many fetch reads per micro-batch
TABLES = ("few", "many")  # snapshotted in this order
FILLER = "x" * 200


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    process = BrokerProcess(tmp_path_factory.mktemp("snapshot") / "broker", web=True).start()
    try:
        yield process.bootstrap_servers, registry_url(process)
    finally:
        process.stop()


class Run:
    """Capture of ``TABLES`` into the broker, and the pipeline's per-batch apply after it."""

    def __init__(self, dsn: str, broker: tuple[str, str], target: Path) -> None:
        bootstrap, registry = broker
        self.dsn = dsn
        self.slot = "kayak_" + dsn.rsplit("/", 1)[1]
        self.prefix = "s" + dsn.rsplit("_", 1)[1]
        enable(dsn, list(TABLES), publication=self.slot, slot=self.slot)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        self.admin = Admin({"bootstrap.servers": bootstrap})
        self.registry = SchemaRegistryClient(registry)
        self.consumer = Consumer({"bootstrap.servers": bootstrap})
        self.partitions = [TopicPartition(f"{self.prefix}.public.{t}", 0) for t in TABLES]
        self.assigned = False
        self.applier = ChangeApplier(open_target(f"sqlite:{target}"), ChangeDecoder(registry))
        self.source: PostgresSource | None = None
        self.capture: CaptureLoop | None = None

    def start_capture(self) -> CaptureLoop:
        self.source = PostgresSource(self.dsn, list(TABLES), slot_name=self.slot,
                                     publication=self.slot, poll_interval_s=0.02)  # fmt: skip
        encoder = EventEncoder(prefix=self.prefix, connector="postgresql", registry=self.registry)
        publisher = ChangePublisher(self.producer, encoder, db="source",
                                    ensure_topic=topic_ensurer(self.admin))  # fmt: skip
        self.capture = CaptureLoop(self.source, publisher, max_batch=1000, poll_timeout_s=0.3)
        return self.capture

    def die(self) -> None:
        """What a kill -9 leaves: connections gone, the slot there, its snapshot not done."""
        assert self.source is not None
        self.source.close()
        self.source = self.capture = None

    def apply_published(self, batch_records: int) -> None:
        """Apply every record published since the last call, ``batch_records`` at a time
        (micro-batches: a table's snapshot spans several)."""
        if not self.assigned:
            self.consumer.assign(self.partitions)
            self.consumer.seek_to_beginning()
            self.assigned = True
        records: list[Any] = []
        ends = self.consumer.end_offsets(self.partitions)
        while any(self.consumer.position(tp) < ends[tp] for tp in self.partitions):
            for batch in self.consumer.getmany(timeout_ms=500).values():
                records.extend(batch)
        for start in range(0, len(records), batch_records):
            chunk = records[start : start + batch_records]
            raw = pa.RecordBatch.from_pydict({
                "key": [r.key for r in chunk], "value": [r.value for r in chunk],
                "topic": [r.topic for r in chunk], "partition": [0] * len(chunk),
                "offset": [r.offset for r in chunk],
            })  # fmt: skip
            changes, bad = decode_records(self.applier.decoder, raw)
            assert bad == []
            self.applier.apply(latest_per_key(changes))

    def differences(self) -> list[str]:
        lines = []
        with psycopg.connect(self.dsn) as conn:
            for name in TABLES:
                table = load_table(conn, "public", name).schema
                rows = read_postgres_rows(conn, table, psycopg.sql.Identifier(name))
                result = verify_table(table, rows, self.applier.target)
                lines += [d.line() for d in result.differences]
        return lines

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
        for closer in (self.consumer.close, self.producer.close, self.admin.close,
                       self.applier.target.close):  # fmt: skip
            closer()


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for name in TABLES:
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, n int NOT NULL, v text)")
        conn.execute("INSERT INTO few SELECT g, g, 'few' FROM generate_series(1, 3) g")
        conn.execute(
            "INSERT INTO many SELECT g, g, %s || g FROM generate_series(1, %s::int) g",
            (FILLER, ROWS),
        )
        yield conn


def test_snapshots_taken_again_leave_no_deleted_row_in_the_target(
    db: psycopg.Connection[Any], postgres_dsn: str, broker: tuple[str, str], tmp_path: Path
) -> None:
    run = Run(postgres_dsn, broker, tmp_path / "target.db")
    rng = random.Random(7)
    live = set(range(1, ROWS + 1))
    next_id = ROWS + 1
    try:
        # Capture dies three times, each in a new snapshot, at changes published: in the
        # first table, early in the big one, and just before its last row.
        for point in (2, ROWS // 3, None):
            # None: the big table's last row (after the small table's TRUNCATE) stays unread
            published = point or len(live)
            capture = run.start_capture()
            capture.max_batch = min(published, 1000)
            while capture.stats.changes < published:
                assert capture.run_once(), "the snapshot ended before capture was to die"
            run.apply_published(batch_records=4000)  # the pipeline applied what it read
            run.die()
            # While capture is down: deletes (of rows the target holds, and of rows it does
            # not have yet), updates and inserts; the small table loses every row.
            gone = rng.sample(sorted(live), 400)
            live.difference_update(gone[:300])
            with db.transaction():
                db.execute("DELETE FROM many WHERE id = ANY(%s)", (gone[:300],))
                db.execute("UPDATE many SET n = -n, v = 'changed' WHERE id = ANY(%s)",
                           (gone[300:],))  # fmt: skip
                db.execute("INSERT INTO many SELECT g, g, 'new' FROM generate_series("
                           "%s::int, %s::int) g", (next_id, next_id + 199))  # fmt: skip
                db.execute("DELETE FROM few")
            live.update(range(next_id, next_id + 200))
            next_id += 200

        capture = run.start_capture()  # the snapshot is taken again, and completes
        capture.drain()
        db.execute("DELETE FROM many WHERE id = ANY(%s)", (sorted(live)[:100],))  # streamed
        db.execute("UPDATE many SET v = 'after' WHERE id = ANY(%s)", (sorted(live)[100:200],))
        capture.drain()
        run.apply_published(batch_records=4000)
        assert run.differences() == []
        with psycopg.connect(postgres_dsn) as conn:
            (count,) = conn.execute("SELECT count(*) FROM many").fetchone() or (0,)
        assert count == len(live) - 100 == ROWS - 900 + 600 - 100
    finally:
        run.close()
