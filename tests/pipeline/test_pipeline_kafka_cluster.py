"""The pipeline over a three-broker Apache Kafka cluster, one broker killed while it replicates.

``kayak pipeline run -b <three KRaft nodes> --registry-url <kayak registry on that cluster>``
with a SQLite source under a steady workload, a SQLite target and Spark's Kafka source (the
default reader). First the plain run: the target reaches the source while it runs. Then, a
third of the way into a second stretch of the workload, ``kill -9`` of the node that leads
the change topic and coordinates the capture's Kafka transactions: the transactional
producer, Spark's reader and the registry must carry on with the other two
(``min.insync.replicas=2`` still holds) and the target must reach the source again, soon,
while the node stays dead. The node then comes back, and on SIGTERM the pipeline catches up
and verifies source == target; the test compares every row itself as well."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.cdc.capture import capture_transactional_id
from kayak.client.sync import Admin, Producer
from kayak.pipeline.source_database import database_name
from kayak.pipeline.spark_kafka import kafka_source_options
from kayak.pipeline.topics import ensure_topic
from kayak.pipeline.workload import create_orders, run_workload
from tests.fixtures.jvm import free_port
from tests.fixtures.kafka_cluster import KafkaCluster, kafka_cluster3

__all__ = ["kafka_cluster3"]  # the module-scoped fixture, used by name below

_SNAPSHOT = 1_000
_PLAIN_CHANGES, _KILLED_CHANGES = 1_500, 3_000
_RATE = 250.0  # changes/s: steady, and leaves the two cores to Kafka and Spark
_TOPIC = "kayak.main.orders"
_CATCH_UP_S = 40.0  # from the workload's end; the kill was two thirds of it (8 s) before


@contextlib.contextmanager
def standalone_registry(bootstrap: str, log_path: Path) -> Iterator[str]:
    """A schema registry keeping its schemas in ``bootstrap``'s ``_schemas`` topic (``kayak
    registry``), its URL yielded once it answers; stopped on exit."""
    port = free_port()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kayak", "registry", "-b", bootstrap, "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            if _answers(f"{url}/subjects"):
                break
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def registry_url(kafka_cluster3: KafkaCluster) -> Iterator[str]:
    with standalone_registry(
        kafka_cluster3.bootstrap_servers, kafka_cluster3.directory / "registry.log"
    ) as url:
        yield url


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, timeout=30.0)
    try:
        return conn.execute("SELECT * FROM orders ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # the target table is not there yet
        return []
    finally:
        conn.close()


def _wait_equal(
    source: Path, target: Path, run: subprocess.Popen[bytes], logs: Path, timeout: float
) -> float:
    """Wait until every row of the target equals the source's; returns the seconds it took."""
    started = time.monotonic()
    while (expected := _rows(source)) != _rows(target):
        assert run.poll() is None, f"the pipeline stopped: {_tail(logs)}"
        assert time.monotonic() - started < timeout, (
            f"the target never reached the source ({len(expected)} rows, target "
            f"{len(_rows(target))}): {_tail(logs)}"
        )
        time.sleep(0.5)
    return time.monotonic() - started


def _tail(logs: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                     for p in sorted(logs.glob("*.log")))  # fmt: skip


def _leader(bootstrap: str, topic: str) -> int:
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        (partition,) = admin.describe_topics([topic])[topic].partitions
        return partition.leader
    finally:
        admin.close()


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (of text in the Basic Multilingual Plane)."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _transaction_coordinators(bootstrap: str) -> dict[int, int]:
    """The leader of each ``__transaction_state`` partition, by partition."""
    topic = "__transaction_state"
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        return {p.partition: p.leader for p in admin.describe_topics([topic])[topic].partitions}
    finally:
        admin.close()


def _doomed_node_and_source_name(bootstrap: str) -> tuple[int, str]:
    """The node to kill and the source's file name: the change topic is created first (with
    the cluster's defaults, as the pipeline would) and its leader is the node; the name is
    one that puts the capture's transactional id on a ``__transaction_state`` partition the
    same node leads. Killing it then moves the change topic's leadership and the capture's
    transaction coordinator at once: the hardest case for the transactional producer."""
    ensure_admin = Admin({"bootstrap.servers": bootstrap})
    try:
        ensure_topic(ensure_admin, _TOPIC)
    finally:
        ensure_admin.close()
    warm = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kayak-test-warm-up"})
    try:
        warm.init_transactions()  # creates __transaction_state
    finally:
        warm.close()
    leader = _leader(bootstrap, _TOPIC)
    coordinators = _transaction_coordinators(bootstrap)
    for i in range(100):
        name = f"shop{i}"
        transactional_id = capture_transactional_id("kayak", database_name(f"sqlite:{name}.db"))
        # Kafka's partition for a transactional id: abs(String.hashCode) % partitions.
        partition = (_java_hash(transactional_id) & 0x7FFFFFFF) % len(coordinators)
        if coordinators[partition] == leader:
            return leader, name
    raise AssertionError(f"node {leader} leads no __transaction_state partition")


def test_the_pipeline_replicates_through_a_broker_kill(
    kafka_cluster3: KafkaCluster, registry_url: str, tmp_path: Path
) -> None:
    cluster = kafka_cluster3
    # The node to kill leads the change topic and coordinates the capture's transactions.
    doomed, name = _doomed_node_and_source_name(cluster.bootstrap_servers)
    source, target, logs = tmp_path / f"{name}.db", tmp_path / "copy.db", tmp_path / "logs"
    logs.mkdir()
    create_orders(str(source), _SNAPSHOT)
    with open(logs / "pipeline-out.log", "wb") as out, open(logs / "pipeline.log", "wb") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
             "--table", "orders", "--target", f"sqlite:{target}",
             "-b", cluster.bootstrap_servers, "--registry-url", registry_url,
             "--work-dir", str(tmp_path / "run"), "--metrics-port", "0",
             "--status-interval", "2"],
            cwd=tmp_path, stdout=out, stderr=err,
        )  # fmt: skip
    try:
        # The plain run: the snapshot, then a steady workload, all reach the target.
        _wait_equal(source, target, run, logs, timeout=120)
        run_workload(str(source), _PLAIN_CHANGES, seed=1, transaction_size=25, rate=_RATE)
        _wait_equal(source, target, run, logs, timeout=60)

        # The same workload again; a third of the way in, that node dies.
        workload = threading.Thread(
            target=run_workload, args=(str(source), _KILLED_CHANGES),
            kwargs={"seed": 2, "transaction_size": 25, "rate": _RATE},
        )  # fmt: skip
        workload.start()
        time.sleep(_KILLED_CHANGES / _RATE / 3)
        cluster.kill(doomed)
        workload.join()
        assert run.poll() is None, f"the pipeline stopped after the kill: {_tail(logs)}"
        # It goes on with two brokers: the target reaches the source with the node still dead,
        # soon (Spark's reader stood still for the Admin's 60 s API timeout before kayak set
        # a shorter one: see KAFKA_SOURCE_DEFAULTS).
        _wait_equal(source, target, run, logs, timeout=_CATCH_UP_S)
        survivors = ",".join(n.address for n in cluster.nodes if n.alive)
        assert _leader(survivors, _TOPIC) != doomed
        cluster.restart(doomed)  # and back: the last catch-up and verification run on three

        run.send_signal(signal.SIGTERM)
        run.wait(120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    stdout = (logs / "pipeline-out.log").read_text()
    assert run.returncode == 0, _tail(logs)
    assert "(reader: kafka)" in " ".join(stdout.split()), stdout
    log = (tmp_path / "run" / "pipeline.log").read_text()
    assert "publishing in Kafka transactions" in log  # Apache Kafka's, not a plain producer
    rows = _rows(source)
    assert len(rows) > _SNAPSHOT
    assert stdout.strip().splitlines()[-1] == f"verified: {len(rows)} rows, source == target"
    assert _rows(target) == rows


def test_sparks_reader_times_out_in_seconds_unless_told_otherwise() -> None:
    """Spark's Kafka source gets short client timeouts (its Admin's ListOffsets could hang for
    Kafka's 60 s default after a leader died); -X overrides them, and a longer request
    timeout given alone lifts the API timeout with it (the Java clients refuse less)."""
    defaults = kafka_source_options({"isolation.level": "read_committed"})
    assert defaults == {
        "isolation.level": "read_committed",
        "request.timeout.ms": "5000",
        "default.api.timeout.ms": "10000",
    }
    given = {"request.timeout.ms": "40000", "default.api.timeout.ms": "90000"}
    assert kafka_source_options(given) == given
    assert kafka_source_options({"request.timeout.ms": "40000"}) == {
        "request.timeout.ms": "40000",
        "default.api.timeout.ms": "40000",
    }
    assert kafka_source_options({"request.timeout.ms": "2000"})["default.api.timeout.ms"] == "10000"
