"""PostgreSQL capture survives its server going away under load: the capture's backend
terminated by an administrator, the server restarted. It reconnects, resumes from its slot's
confirmed position, and the change topic ends with every change exactly once: replayed by key
it equals the source table."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kayak.cdc.capture import CaptureLoop
from kayak.cdc.change import snapshot_floor
from kayak.cdc.postgres import enable
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.cdc.reconnect import ReconnectingSource
from kayak.client.sync import Admin, Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.source_database import open_source
from kayak.pipeline.topics import topic_ensurer
from kayak.serde import SchemaRegistryClient
from tests.fixtures.postgres import PostgresCluster, PostgresServer
from tests.pipeline.conftest import CdcBroker

TOPIC = "rc.public.accounts"
# A table's snapshot ends at its last row: "last" on the whole snapshot's final row, which is
# also its table's last.
SNAPSHOT_ENDS = frozenset({"last_in_data_collection", "last"})


class Writer(threading.Thread):
    """Transactions of inserts, updates and deletes until stopped; a lost connection is
    opened again (a transaction whose commit was cut off is whatever the server kept)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="writer")
        self.dsn = dsn
        self.stop = threading.Event()
        self.transactions = 0
        self.backend_pid = 0

    def run(self) -> None:
        n = 1000
        conn: psycopg.Connection[Any] | None = None
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True)
                    self.backend_pid = conn.info.backend_pid
                with conn.transaction():
                    conn.execute("INSERT INTO accounts VALUES (%s, 0), (%s, 0)", (n, n + 1))
                    conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id %% 7 = %s",
                                 (n % 7,))  # fmt: skip
                    conn.execute("DELETE FROM accounts WHERE id = %s", (n - 40,))
                n += 2
                self.transactions += 1
            except psycopg.OperationalError:
                conn = None
                time.sleep(0.05)
            time.sleep(0.005)
        if conn is not None:
            conn.close()


class Capture(threading.Thread):
    """The capture loop in a thread, as ``kayak pipeline run`` runs it."""

    def __init__(self, loop: CaptureLoop) -> None:
        super().__init__(name="capture")
        self.loop = loop
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.loop.run_once()
        except BaseException as e:
            self.error = e


@pytest.fixture
def capture_to(cdc_broker: CdcBroker) -> Iterator[Callable[..., tuple[Capture, Any]]]:
    opened: list[tuple[Capture, Any, Producer, Admin]] = []

    def start(dsn: str, enabled: Callable[[str], None] = lambda publication: None,
              ) -> tuple[Capture, Any]:  # fmt: skip
        """Capture the table ``accounts`` of ``dsn``; ``enabled`` is called with the
        publication's name before the capture starts."""
        slot = "kayak_rc_" + dsn.rsplit("/", 1)[1]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
            conn.execute("INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 300) g")
        enable(dsn, ["accounts"], publication=slot, slot=slot)
        enabled(slot)
        source = open_source(dsn, ["accounts"], slot_name=slot)
        assert isinstance(source, ReconnectingSource)
        config = {"bootstrap.servers": cdc_broker.bootstrap_servers}
        producer, admin = Producer({**config, "acks": "all"}), Admin(config)
        encoder = EventEncoder(prefix="rc", connector="postgresql",
                               registry=SchemaRegistryClient(cdc_broker.registry_url))  # fmt: skip
        publisher = ChangePublisher(producer, encoder, db="db", ensure_topic=topic_ensurer(admin))
        capture = Capture(CaptureLoop(source, publisher, max_batch=200))
        capture.start()
        opened.append((capture, source, producer, admin))
        return capture, source

    yield start
    for capture, source, producer, admin in opened:
        capture.stop.set()
        capture.join(60)
        source.close()
        producer.close()
        admin.close()


def terminate_capture(dsn: str, writer: Writer, spared: int = 0) -> None:
    """``pg_terminate_backend`` on the capture's connections: every client backend of the
    database but the writer's (and ``spared``)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        victims = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND backend_type = 'client backend' AND pid <> "
            "pg_backend_pid() AND pid <> ALL(%s)", ([writer.backend_pid, spared],),
        ).fetchall()  # fmt: skip
    assert victims, "the capture has no connection to terminate"


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


class Replay(NamedTuple):
    rows: dict[int, int]  # id → balance
    positions: list[str]  # every event's, in topic order
    snapshot_ends: int  # tables' snapshots that ended: more than one when one was taken again


def replayed_topic(broker: CdcBroker) -> Replay:
    """The topic's events replayed by key (id → balance) as a target applies them, and every
    event's position. A snapshot taken again (the server went away before the first was
    acknowledged) ends by dropping the rows it did not see, as the target does."""
    deserialize = AvroDeserializer(ConfluentRegistry({"url": broker.registry_url}))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    rows: dict[int, int] = {}
    row_positions: dict[int, str] = {}
    positions: list[str] = []
    snapshot_ends = 0
    with Consumer({"bootstrap.servers": broker.bootstrap_servers}) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        while batch := consumer.getmany(timeout_ms=2000):
            for records in batch.values():
                for record in records:
                    if record.value is None:
                        continue  # a delete's tombstone
                    event = deserialize(record.value, ctx)
                    position = event["source"]["pos"]
                    positions.append(position)
                    if event["op"] == "d":
                        rows.pop(event["before"]["id"])
                    else:
                        rows[event["after"]["id"]] = event["after"]["balance"]
                        row_positions[event["after"]["id"]] = position
                    if event["source"]["snapshot"] in SNAPSHOT_ENDS:
                        snapshot_ends += 1
                        floor = snapshot_floor(position)
                        for key in [k for k, at in row_positions.items() if at < floor]:
                            rows.pop(key, None)
                            del row_positions[key]
    return Replay(rows, positions, snapshot_ends)


def source_rows(dsn: str) -> dict[int, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, balance FROM accounts").fetchall())


def assert_topic_equals_source(broker: CdcBroker, dsn: str, capture: Capture) -> Replay:
    """Once the capture caught up: the topic replayed equals the source, each change once."""
    expected = source_rows(dsn)
    deadline = time.monotonic() + 60
    while (replayed := replayed_topic(broker)).rows != expected:
        assert capture.error is None, capture.error
        assert time.monotonic() < deadline, "the topic never matched the source"
    positions = replayed.positions
    assert len(positions) == len(set(positions)), "a change was published twice"
    assert positions == sorted(positions)
    return replayed


def test_capture_reconnects_after_its_backend_is_terminated(
    postgres_dsn: str, capture_to: Callable[..., tuple[Capture, Any]], cdc_broker: CdcBroker
) -> None:
    capture, source = capture_to(postgres_dsn)
    writer = Writer(postgres_dsn)
    writer.start()
    try:
        for round_ in range(1, 4):

            def written(n: int = 10 * round_) -> bool:
                return writer.transactions >= n

            def reconnected(n: int = round_) -> bool:
                return source.reconnects >= n or capture.error is not None

            wait_for(written, "the writer is stuck")
            terminate_capture(postgres_dsn, writer)
            wait_for(reconnected, "the capture did not reconnect")
            assert capture.error is None, capture.error
        wait_for(lambda: writer.transactions >= 40, "the writer is stuck")
    finally:
        writer.stop.set()
        writer.join(30)
    assert_topic_equals_source(cdc_broker, postgres_dsn, capture)


def restart(cluster: PostgresCluster) -> None:
    argv = [str(cluster.bin_dir / "pg_ctl"), "-D", str(cluster.data_dir), "-m", "fast", "-w",
            "-l", str(cluster.base_dir / "server.log"), "restart"]  # fmt: skip
    if os.geteuid() == 0:  # as the fixture runs it: PostgreSQL refuses root
        argv = ["runuser", "-u", "postgres", "--", *argv]
    subprocess.run(argv, check=True, capture_output=True)


def test_capture_reconnects_after_a_server_restart(
    postgres_server: PostgresServer, capture_to: Callable[..., tuple[Capture, Any]],
    cdc_broker: CdcBroker,
) -> None:  # fmt: skip
    cluster = postgres_server.start_cluster()
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE restarted")
    dsn = cluster.dsn("restarted")
    capture, source = capture_to(dsn)
    writer = Writer(dsn)
    writer.start()
    try:
        wait_for(lambda: writer.transactions >= 10, "the writer is stuck")
        restart(cluster)  # a fast shutdown: every backend is told to go, then it comes back
        wait_for(lambda: source.reconnects >= 1 or capture.error is not None,
                 "the capture did not reconnect")  # fmt: skip
        assert capture.error is None, capture.error
        done = writer.transactions
        wait_for(lambda: writer.transactions >= done + 10, "the writer is stuck")
    finally:
        writer.stop.set()
        writer.join(30)
    assert_topic_equals_source(cdc_broker, dsn, capture)


def test_capture_takes_the_snapshot_again_when_its_acknowledgement_is_cut_off(
    postgres_dsn: str, capture_to: Callable[..., tuple[Capture, Any]], cdc_broker: CdcBroker
) -> None:
    """The race CI met by chance, made certain: the capture published its snapshot and is
    recording it as done when its connection goes. It takes the snapshot again; rows deleted
    between the two snapshots must not stay in the topic's picture."""
    with psycopg.connect(postgres_dsn, autocommit=True) as blocker:

        def hold_the_publication(publication: str) -> None:
            # An open COMMENT on the publication holds the lock the capture's record needs.
            blocker.execute("BEGIN")
            blocker.execute(f"COMMENT ON PUBLICATION {publication} IS NULL")

        capture, source = capture_to(postgres_dsn, hold_the_publication)
        writer = Writer(postgres_dsn)
        writer.start()
        try:
            wait_for(lambda: waiting_on_a_lock(blocker) or capture.error is not None,
                     "the capture never tried to record its snapshot")  # fmt: skip
            # Rows the first snapshot published, gone before the second.
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM accounts WHERE id <= 50")
            wait_for(lambda: writer.transactions >= 20, "the writer is stuck")
            terminate_capture(postgres_dsn, writer, spared=blocker.info.backend_pid)
            wait_for(lambda: source.reconnects >= 1 or capture.error is not None,
                     "the capture did not reconnect")  # fmt: skip
            blocker.execute("ROLLBACK")
            assert capture.error is None, capture.error
            done = writer.transactions
            wait_for(lambda: writer.transactions >= done + 10, "the writer is stuck")
        finally:
            writer.stop.set()
            writer.join(30)
    replayed = assert_topic_equals_source(cdc_broker, postgres_dsn, capture)
    assert replayed.snapshot_ends == 2, "the snapshot was not taken again"


def waiting_on_a_lock(blocker: psycopg.Connection[Any]) -> bool:
    row = blocker.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()"
    ).fetchone()
    return row is not None and row[0] > 0
