"""``kayak pipeline run --from-topics … --format debezium-json``: Debezium's own change topics
applied by kayak's pipeline.

Debezium's PostgreSQL connector runs in Kafka Connect standalone against kayak's broker, two
connectors in one worker: one with JsonConverter's schemas (``schemas.enable=true``) on a table
with dates, timestamps, numerics and bytes, one without (``schemas.enable=false``,
``decimal.handling.mode=string``) on a table of plain JSON kinds. After a snapshot and a round
of inserts, updates (one of a primary key), deletes and NULLs, ``kayak pipeline run --once``
reads each connector's topics into a SQLite target and verifies it against the PostgreSQL
source. A topic holding an event the pipeline cannot apply stops it with one line naming the
topic and the problem.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from kayak.client.sync import Producer
from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import free_port, write_properties
from tests.fixtures.postgres import PostgresServer
from tests.jvm.peer_support import (
    STANDALONE,
    ConnectWorker,
    change_events,
    debezium_postgres_config,
    wait_until,
    worker_properties,
)

CUSTOMERS = """CREATE TABLE customers (
    id integer PRIMARY KEY, name text NOT NULL, balance numeric(10, 2), joined date,
    seen timestamp(6), big bigint, ratio double precision, active boolean, photo bytea,
    at timestamptz, opens time, ref uuid, doc jsonb, code varchar(8)
)"""
ACCOUNTS = """CREATE TABLE accounts (
    id integer PRIMARY KEY, owner text NOT NULL, balance numeric(12, 3), active boolean,
    ratio double precision
)"""


@dataclass
class Captured:
    """The source database and the topics Debezium writes its two tables to."""

    dsn: str
    bootstrap: str
    with_schemas: str  # topic prefix of the schemas.enable=true connector (customers)
    without_schemas: str  # topic prefix of the schemas.enable=false connector (accounts)


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("pipeline-debezium") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


def _seed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(CUSTOMERS)
        db.execute(ACCOUNTS)
        for i in range(1, 21):
            db.execute(
                "INSERT INTO customers VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s, %s)",
                (i, f"c{i}", f"{i}.{i % 100:02d}", f"2024-01-{i:02d}",
                 f"2024-02-03 04:05:{i:02d}.123456", i * 10**12, i / 7, i % 2 == 0,
                 bytes([i, 0, 255]), f"2024-03-0{1 + i % 9} 10:00:00.5+02", f"0{i % 10}:30:15",
                 str(uuid.UUID(int=i)), f'{{"n": {i}, "tags": ["a", "b"]}}', f"k{i}"),
            )  # fmt: skip
            db.execute(
                "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s)",
                (i, f"o{i}", f"-{i}.125", i % 3 == 0, i * 0.5),
            )


def _change(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("INSERT INTO customers VALUES (100, 'new', 0.01, '1999-12-31', "
                   "'1970-01-01 00:00:00', -1, -0.5, true, '', '1969-07-20 20:17:40Z', "
                   "'23:59:59.999999', NULL, '[]', '')")  # fmt: skip
        db.execute("UPDATE customers SET name = 'renamed', balance = NULL, photo = NULL "
                   "WHERE id = 2")  # fmt: skip
        db.execute("UPDATE customers SET id = 200 WHERE id = 3")  # a primary-key change
        db.execute("DELETE FROM customers WHERE id IN (4, 5)")
        db.execute("INSERT INTO accounts VALUES (100, 'new', 99999.999, NULL, NULL)")
        db.execute("UPDATE accounts SET owner = 'renamed', balance = 0 WHERE id = 2")
        db.execute("DELETE FROM accounts WHERE id = 6")


@pytest.fixture(scope="module")
def captured(
    kayak_broker: BrokerProcess,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Captured]:
    """Both tables captured by Debezium into kayak, snapshot and changes all in the topics."""
    dbname = f"dbz_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    dsn = postgres_server.dsn(dbname)
    _seed(dsn)
    directory = tmp_path_factory.mktemp("connect-standalone")
    tag = uuid.uuid4().hex[:6]
    with_schemas = debezium_postgres_config(
        dsn, name="dbz-schemas", prefix=f"ws{tag}", tables=["public.customers"],
        slot=f"ws{tag}",
    )  # fmt: skip
    without_schemas = {
        **debezium_postgres_config(
            dsn,
            name="dbz-plain",
            prefix=f"wo{tag}",
            tables=["public.accounts"],
            slot=f"wo{tag}",
        ),
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "decimal.handling.mode": "string",
    }
    files = (
        write_properties(directory / "schemas.properties", with_schemas),
        write_properties(directory / "plain.properties", without_schemas),
    )
    properties = worker_properties(
        kayak_broker.bootstrap_servers,
        free_port(),
        **{"offset.storage.file.filename": directory / "offsets.dat"},
    )
    worker = ConnectWorker(directory, STANDALONE, properties, files).start()
    bootstrap = kayak_broker.bootstrap_servers
    try:
        for name in ("dbz-schemas", "dbz-plain"):
            worker.wait_running(name)
        topics = (f"ws{tag}.public.customers", f"wo{tag}.public.accounts")
        for topic in topics:
            _wait_events(bootstrap, topic, 20)
        _change(dsn)
        # customers: 20 + insert + update + (delete, tombstone, create) + 2 * (delete,
        # tombstone); accounts: 20 + insert + update + delete + tombstone
        _wait_events(bootstrap, topics[0], 20 + 1 + 1 + 3 + 4)
        _wait_events(bootstrap, topics[1], 20 + 1 + 1 + 2)
    finally:
        worker.stop()
    yield Captured(dsn, bootstrap, f"ws{tag}", f"wo{tag}")
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        for slot in (f"ws{tag}", f"wo{tag}"):
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot,),
            )
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _wait_events(bootstrap: str, topic: str, count: int) -> None:
    def events() -> int:
        try:
            return len(change_events(bootstrap, topic))
        except Exception:  # the topic is not there yet
            return 0

    wait_until(events, lambda n: n >= count, 180, f"{count} events in {topic}")


def kayak_pipeline(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--metrics-port", "0", "--once",
         "--work-dir", str(cwd / f"work-{uuid.uuid4().hex[:6]}"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_debezium_topics_replicate_to_sqlite(captured: Captured, tmp_path: Path) -> None:
    """Both JsonConverter forms in one run (one Spark start): each table verified."""
    target = tmp_path / "replica.db"
    pattern = rf"({captured.with_schemas}|{captured.without_schemas})\..*"
    done = kayak_pipeline(
        "--source", captured.dsn, "--table", "public.customers", "--table", "public.accounts",
        "--target", f"sqlite:{target}", "-b", captured.bootstrap, "--from-topics", pattern,
        "--format", "debezium-json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # customers: 20 + 1 - 2 deleted (the key change keeps the count); accounts: 20 + 1 - 1
    assert "verified: 39 rows, source == target" in done.stdout, done.stdout


def test_an_event_it_cannot_apply_stops_with_one_line(captured: Captured, tmp_path: Path) -> None:
    topic = f"bad{uuid.uuid4().hex[:6]}.public.accounts"
    with Producer(bootstrap_servers=captured.bootstrap) as producer:
        producer.send_and_wait(
            topic, b'{"before": null, "after": {"id": 1}, "op": "m"}', key=b'{"id": 1}'
        )
    refused = kayak_pipeline(
        "--source", captured.dsn, "--table", "public.accounts",
        "--target", f"sqlite:{tmp_path / 'r.db'}", "-b", captured.bootstrap,
        "--from-topics", topic.replace(".", r"\."), "--format", "debezium-json", cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert f"topic {topic}: unknown Debezium op 'm'" in lines[0]


def test_topics_options_are_checked(tmp_path: Path) -> None:
    common = ["--source", "postgresql://kayak@127.0.0.1:1/x", "--table", "public.t",
              "--target", f"sqlite:{tmp_path / 'r.db'}"]  # fmt: skip
    no_format = kayak_pipeline(*common, "-b", "127.0.0.1:1", "--from-topics", "x", cwd=tmp_path)
    assert no_format.returncode == 2 and "--from-topics needs --format" in no_format.stderr
    no_topics = kayak_pipeline(*common, "--format", "debezium-json", cwd=tmp_path)
    assert no_topics.returncode == 2 and "give --from-topics" in no_topics.stderr
    avro = kayak_pipeline(*common, "-b", "127.0.0.1:1", "--from-topics", "x",
                          "--format", "debezium-avro", cwd=tmp_path)  # fmt: skip
    assert avro.returncode == 2 and "debezium-avro" in avro.stderr
