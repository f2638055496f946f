"""Kafka Connect's exactly-once source support (KIP-618) running Debezium's PostgreSQL
connector, against kayak's broker and Apache Kafka 4.3 (the reference: it proves the test).

A distributed worker with ``exactly.once.source.support=enabled`` reads its config, offsets
and status topics read_committed, writes the config topic through a transactional (fencing)
producer, and gives the source task a transactional producer that commits its records
together with their source offsets (the connector says ``exactly.once.support=required``,
so it fails rather than run without; ``transaction.boundary=interval``, one transaction a
second, so that a kill finds one open: with ``poll`` a transaction lasts a few ms).

A writer keeps changing rows in PostgreSQL (an insert and an update per source transaction)
while the worker is killed with SIGKILL, its task's transaction open with records on the
broker, and started again: that transaction must be aborted (the restarted task's producer
fences it) and the task must resume from the offsets committed with the last committed
records. A read_committed reader (confluent-kafka's consumer) must then find every row
change exactly once: the (row key, operation, change LSN) of the change events equal, as a
multiset, the changes a second, independent replication slot (``test_decoding``) decoded
from PostgreSQL's WAL; a read_uncommitted reader finds the aborted records too.

Without exactly-once support (the worker's offsets flushed every 500 ms) the same kill
makes dozens of changes appear twice: the test fails, as it should.
"""

from __future__ import annotations

import collections
import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import ApacheKafka, free_port
from tests.jvm.peer_support import (
    DISTRIBUTED,
    ConnectWorker,
    debezium_postgres_config,
    wait_until,
    worker_properties,
)

pytestmark = pytest.mark.timeout(240)

Change = tuple[int, str, int]  # (row id, Debezium's op: "c" or "u", LSN of the change)
_DECODED = re.compile(r"^table public\.items: (INSERT|UPDATE): id\[integer\]:(\d+)")
_OPS = {"INSERT": "c", "UPDATE": "u"}


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("connect-eos") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


@pytest.fixture(params=["kayak", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return kafka.bootstrap_servers
    broker: BrokerProcess = request.getfixturevalue("kayak_broker")
    return broker.bootstrap_servers


def eos_worker(bootstrap: str, directory: Path, name: str) -> ConnectWorker:
    """A distributed worker with exactly-once source support, on topics of its own (the
    run's Apache Kafka is shared)."""
    properties = worker_properties(
        bootstrap,
        free_port(),
        **{
            "group.id": name,
            "config.storage.topic": f"{name}-configs",
            "offset.storage.topic": f"{name}-offsets",
            "status.storage.topic": f"{name}-status",
            **{f"{kind}.storage.replication.factor": 1 for kind in ("config", "offset", "status")},
            "exactly.once.source.support": "enabled",
            # The killed worker's member must leave the group before the restarted one can
            # lead it: keep its session short (Kafka's group.min.session.timeout.ms is 6 s),
            # and hand out what it held at once rather than after Connect's 5 minutes.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "scheduled.rebalance.max.delay.ms": 0,
            # A worker reads its offsets topic read_committed up to the high watermark
            # before it joins (KafkaBasedLog): a kill between the task's offsets write and
            # its commit leaves a transaction there that only its timeout ends (nothing
            # fences it before the worker runs again). Keep that wait short.
            "producer.transaction.timeout.ms": 10000,
        },
    )
    return ConnectWorker(directory, DISTRIBUTED, properties)


class RowWriter(threading.Thread):
    """Source transactions until stopped: insert row n, then update row n - 1."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.transactions = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn) as db:
            while not self.halt.is_set():
                n = self.transactions + 1
                with db.transaction():
                    db.execute("INSERT INTO items VALUES (%s, 0)", (n,))
                    db.execute("UPDATE items SET n = n + 1 WHERE id = %s", (n - 1,))
                self.transactions = n
                time.sleep(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert not self.is_alive(), "the writer did not stop"


def source_changes(dsn: str, slot: str) -> list[Change]:
    """Every change of ``items`` since ``slot`` was made, as PostgreSQL decodes it."""
    with psycopg.connect(dsn, autocommit=True) as db:
        rows = db.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)", (slot,)
        ).fetchall()
    changes = []
    for lsn, data in rows:
        found = _DECODED.match(data)
        if found:
            changes.append((int(found[2]), _OPS[found[1]], _lsn_number(lsn)))
    return changes


def _lsn_number(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def read_changes(
    bootstrap: str, topic: str, isolation: str = "read_committed", enough: int | None = None
) -> list[Change]:
    """The change events of ``topic`` a reader with ``isolation`` sees now (read_committed:
    up to the last stable offset of each partition), or the first ``enough`` of them (while
    changes keep coming a reader may never be told it reached the end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = _partitions(consumer, topic)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        changes: list[Change] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while at_end != partitions and (enough is None or len(changes) < enough):
            assert time.monotonic() < deadline, f"{topic}: only {sorted(at_end)} read to the end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            changes.append(_change(message.value()))
        return changes
    finally:
        consumer.close()


def _partitions(client: Consumer | AdminClient, topic: str) -> set[int]:
    metadata = client.list_topics(topic, timeout=10).topics[topic]
    return set() if metadata.error is not None else set(metadata.partitions)  # not created yet


def open_records(bootstrap: str, topic: str) -> int:
    """How many offsets of ``topic`` lie past the last stable offset: records (and markers)
    of a transaction not yet committed or aborted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(topic, p) for p in _partitions(admin, topic)]
    if not tps:
        return 0

    def total(isolation: IsolationLevel) -> int:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps}, isolation_level=isolation
        )
        return sum(future.result().offset for future in futures.values())

    return total(IsolationLevel.READ_UNCOMMITTED) - total(IsolationLevel.READ_COMMITTED)


def _change(value: bytes) -> Change:
    event = json.loads(value)["payload"]
    row = event["after"]
    return row["id"], event["op"], event["source"]["lsn"]


def _slot_exists(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as db:
        found = db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        return found.fetchone() is not None


def kill_inside_a_transaction(worker: ConnectWorker, bootstrap: str, topic: str) -> None:
    """SIGKILL the worker while its task's transaction holds records on the broker, so the
    restarted task must fence it (its records aborted) rather than find it committed. Should
    the kill land between a commit and the next record, start the worker and try again."""
    for _ in range(3):
        wait_until(
            lambda: open_records(bootstrap, topic), lambda n: n > 0, timeout=60,
            what=f"records of an open transaction in {topic}",
        )  # fmt: skip
        assert worker.jvm is not None and worker.jvm.stop(signal.SIGKILL) == -signal.SIGKILL
        time.sleep(1.0)  # a commit already asked for completes; the writer writes on
        if open_records(bootstrap, topic) > 0:  # left open for good: nobody will commit it
            return
        worker.start()
    raise AssertionError("every kill landed between two transactions")


def test_debezium_changes_exactly_once_through_a_worker_kill(
    bootstrap: str, postgres_dsn: str, tmp_path: Path
) -> None:
    name = f"eos{uuid.uuid4().hex[:8]}"
    topic = f"{name}.public.items"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("CREATE TABLE items (id integer PRIMARY KEY, n integer NOT NULL)")
        # The truth: every change from here on, decoded by PostgreSQL itself.
        db.execute("SELECT pg_create_logical_replication_slot('truth', 'test_decoding')")
    config = debezium_postgres_config(
        postgres_dsn, name=name, prefix=name, tables=["public.items"], slot=f"{name}_slot"
    )
    # Transactions of a second, not of one poll (~100 ms): a kill then finds one open with
    # records on the broker almost always, and so tests fencing and aborting.
    config |= {
        "exactly.once.support": "required",
        "transaction.boundary": "interval",
        "transaction.boundary.interval.ms": "1000",
    }
    connector = config.pop("name")
    worker = eos_worker(bootstrap, tmp_path, name)
    writer = RowWriter(postgres_dsn)
    try:
        worker.start()
        worker.call("POST", "/connectors", {"name": connector, "config": config})
        worker.wait_running(connector)
        # Debezium's slot exists once its task runs: from here every change is streamed
        # (the table is empty, so its snapshot has nothing).
        assert _slot_exists(postgres_dsn, f"{name}_slot")
        writer.start()
        wait_until(
            lambda: read_changes(bootstrap, topic, enough=150), lambda found: len(found) >= 150,
            timeout=90, what=f"150 committed change events in {topic}",
        )  # fmt: skip
        before_kill = writer.transactions
        kill_inside_a_transaction(worker, bootstrap, topic)
        worker.start()
        worker.wait_running(connector)
        time.sleep(2.0)  # and while the restarted task streams
        writer.stop()
        assert writer.transactions > before_kill + 20, "the writer was not writing mid-stream"

        truth = source_changes(postgres_dsn, "truth")
        assert len(truth) == 2 * writer.transactions - 1  # one insert and one update each
        wait_until(
            lambda: read_changes(bootstrap, topic), lambda found: len(found) >= len(truth),
            timeout=90, what=f"{len(truth)} committed change events in {topic}",
        )  # fmt: skip
        time.sleep(1.5)  # anything sent twice would be committed by now too
        found = read_changes(bootstrap, topic)
        repeated = [c for c, n in collections.Counter(found).items() if n > 1]
        assert not repeated, f"{len(repeated)} changes seen more than once, e.g. {repeated[:5]}"
        assert set(found) == set(truth), (
            f"missing {sorted(set(truth) - set(found))[:5]}, "
            f"unexpected {sorted(set(found) - set(truth))[:5]}"
        )
        # The killed task's open transaction was aborted: its records are in the log, sent
        # again by the restarted task, and hidden from read_committed readers only.
        uncommitted = read_changes(bootstrap, topic, "read_uncommitted")
        assert len(uncommitted) > len(found) and set(uncommitted) == set(truth)
        assert open_records(bootstrap, topic) == 0, "a transaction is still open"
    except AssertionError as e:
        log = worker.jvm.output()[-6000:] if worker.jvm else ""
        raise AssertionError(f"{e}\nConnect log:\n{log}") from None
    finally:
        if writer.is_alive():
            writer.stop()
        worker.stop()
