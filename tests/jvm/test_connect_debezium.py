"""Kafka Connect (4.3) running Debezium's PostgreSQL connector (3.6) against kayak's broker.

* Connect standalone (offsets in a file, no internal topics) captures a table: the snapshot,
  then inserts, updates and deletes (with the tombstone after each delete) arrive in kayak's
  topic as Debezium's JSON envelope.
* Connect distributed (one worker, shared by the module) creates its config, offsets and status
  topics on kayak with ``cleanup.policy=compact``, runs the same connector created through its
  REST API, and survives a worker restart: what changed while it was down arrives, and nothing
  from before is sent again (no second snapshot).
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kayak.client.sync import Admin
from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import free_port, write_properties
from tests.jvm.peer_support import (
    DISTRIBUTED,
    STANDALONE,
    ConnectWorker,
    change_events,
    debezium_postgres_config,
    wait_until,
    worker_properties,
)

INTERNAL_TOPICS = {
    "config.storage.topic": "connect-configs",
    "offset.storage.topic": "connect-offsets",
    "status.storage.topic": "connect-status",
}


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("connect") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


@pytest.fixture(scope="module")
def distributed_worker(
    kayak_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnectWorker]:
    """One distributed worker for the module (a Connect JVM is slow to start)."""
    properties = worker_properties(
        kayak_broker.bootstrap_servers,
        free_port(),
        **{"group.id": "kayak-connect", **INTERNAL_TOPICS},
        **{f"{kind}.storage.replication.factor": 1 for kind in ("config", "offset", "status")},
    )
    worker = ConnectWorker(tmp_path_factory.mktemp("distributed"), DISTRIBUTED, properties)
    worker.start()
    yield worker
    worker.stop()


def _customers(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(
            "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, "
            "balance numeric(10, 2), joined date)"
        )
        for i in range(1, rows + 1):
            db.execute(
                "INSERT INTO customers VALUES (%s, %s, %s, '2024-01-01')", (i, f"c{i}", i * 1.5)
            )


def _ops(events: list[dict[str, Any] | None]) -> list[str]:
    return [event["op"] if event else "tombstone" for event in events]


def _wait_events(bootstrap: str, topic: str, count: int) -> list[dict[str, Any] | None]:
    return wait_until(
        lambda: change_events(bootstrap, topic) if _topic_exists(bootstrap, topic) else [],
        lambda events: len(events) >= count,
        180,
        f"{count} change events in {topic}",
    )


def _topic_exists(bootstrap: str, topic: str) -> bool:
    with Admin(bootstrap_servers=bootstrap) as admin:
        return topic in set(admin.list_topics())


def test_standalone_captures_inserts_updates_deletes(
    kayak_broker: BrokerProcess, postgres_dsn: str, tmp_path: Path
) -> None:
    _customers(postgres_dsn, 3)
    prefix = f"sa{uuid.uuid4().hex[:6]}"
    connector = debezium_postgres_config(
        postgres_dsn, name="pg-standalone", prefix=prefix, tables=["public.customers"],
        slot=f"{prefix}_slot",
    )  # fmt: skip
    properties = worker_properties(
        kayak_broker.bootstrap_servers,
        free_port(),
        **{"offset.storage.file.filename": tmp_path / "offsets.dat"},
    )
    worker = ConnectWorker(
        tmp_path, STANDALONE, properties, (write_properties(tmp_path / "pg.properties", connector),)
    )
    worker.start()
    try:
        worker.wait_running("pg-standalone")
        topic = f"{prefix}.public.customers"
        snapshot = _wait_events(kayak_broker.bootstrap_servers, topic, 3)
        assert _ops(snapshot) == ["r", "r", "r"]
        assert [e["after"]["id"] for e in snapshot if e] == [1, 2, 3]

        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("INSERT INTO customers VALUES (4, 'c4', 6.25, '2024-02-29')")
            db.execute("UPDATE customers SET name = 'renamed' WHERE id = 2")
            db.execute("DELETE FROM customers WHERE id = 1")
        events = _wait_events(kayak_broker.bootstrap_servers, topic, 7)
        assert _ops(events) == ["r", "r", "r", "c", "u", "d", "tombstone"]
        insert, update, delete = events[3], events[4], events[5]
        assert insert is not None and update is not None and delete is not None
        assert insert["after"]["id"] == 4 and insert["after"]["name"] == "c4"
        assert update["after"] == {**update["after"], "id": 2, "name": "renamed"}
        assert delete["before"]["id"] == 1 and delete["after"] is None
        assert delete["source"]["table"] == "customers" and delete["source"]["connector"] == (
            "postgresql"
        )
    finally:
        worker.stop()


def test_distributed_internal_topics_are_compacted(
    kayak_broker: BrokerProcess, distributed_worker: ConnectWorker
) -> None:
    with Admin(bootstrap_servers=kayak_broker.bootstrap_servers) as admin:
        described = admin.describe_topics(list(INTERNAL_TOPICS.values()))
        for topic in INTERNAL_TOPICS.values():
            assert admin.describe_configs(topic)["cleanup.policy"].value == "compact", topic
    partitions = {name: len(t.partitions) for name, t in described.items()}
    assert partitions["connect-configs"] == 1  # Connect requires exactly one
    assert partitions["connect-offsets"] == 25 and partitions["connect-status"] == 5


def test_distributed_survives_a_worker_restart(
    kayak_broker: BrokerProcess, distributed_worker: ConnectWorker, postgres_dsn: str
) -> None:
    _customers(postgres_dsn, 4)
    prefix = f"di{uuid.uuid4().hex[:6]}"
    config = debezium_postgres_config(
        postgres_dsn, name="pg-distributed", prefix=prefix, tables=["public.customers"],
        slot=f"{prefix}_slot",
    )  # fmt: skip
    name = config.pop("name")
    distributed_worker.call("POST", "/connectors", {"name": name, "config": config})
    distributed_worker.wait_running(name)
    topic = f"{prefix}.public.customers"
    bootstrap = kayak_broker.bootstrap_servers
    _wait_events(bootstrap, topic, 4)
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("UPDATE customers SET balance = 99.99 WHERE id = 3")
    before = _wait_events(bootstrap, topic, 5)
    assert _ops(before) == ["r", "r", "r", "r", "u"]

    distributed_worker.stop()
    with psycopg.connect(postgres_dsn, autocommit=True) as db:  # changes while it is down
        db.execute("INSERT INTO customers VALUES (5, 'c5', 7.5, '2024-03-01')")
        db.execute("UPDATE customers SET name = 'while-down' WHERE id = 4")
        db.execute("DELETE FROM customers WHERE id = 2")
    distributed_worker.start()
    distributed_worker.wait_running(name)
    after = _wait_events(bootstrap, topic, 9)

    ops = _ops(after)
    # No second snapshot and no earlier change sent again: the restart resumed from the
    # offsets Connect kept in kayak's offsets topic.
    assert collections.Counter(ops) == {"r": 4, "u": 2, "c": 1, "d": 1, "tombstone": 1}, ops
    assert ops[5:] == ["c", "u", "d", "tombstone"]
    assert after[5] is not None and after[5]["after"]["id"] == 5
    assert after[6] is not None and after[6]["after"]["name"] == "while-down"
    assert after[7] is not None and after[7]["before"]["id"] == 2
    distributed_worker.call("DELETE", f"/connectors/{name}")
    # Deleting is asynchronous: wait until its task let go of the slot, so the database can go.
    wait_until(
        lambda: _slot_active(postgres_dsn, f"{prefix}_slot"), lambda active: not active,
        timeout=60, what="the deleted connector's replication slot to be released",
    )  # fmt: skip


def _slot_active(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return bool(row and row[0])
