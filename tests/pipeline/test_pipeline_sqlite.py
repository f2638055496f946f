"""SQLite → log → Spark (local[2]) → SQLite, with the failures a replication must survive."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from kayak.cdc.sqlite import install_triggers
from kayak.client.sync import Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.job import ReplicationJob
from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.workload import create_orders, run_workload
from tests.pipeline.conftest import CdcBroker


def spec_for(tmp_path: Path, source: str, broker: CdcBroker, **kw: object) -> PipelineSpec:
    return PipelineSpec(
        source=f"sqlite:{source}", tables=["items"], target=f"sqlite:{tmp_path / 'target.db'}",
        work_dir=tmp_path / "work", bootstrap_servers=broker.bootstrap_servers,
        registry_url=broker.registry_url, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def assert_replicated(pipeline: Pipeline) -> int:
    (result,) = pipeline.verify()
    assert result.equal, result.differences
    return result.rows


def mutate(db: str, start: int, count: int) -> None:
    """Inserts, updates (NULLs, unicode, a 200 kB value), deletes and a key change."""
    conn = sqlite3.connect(db)
    with conn:
        for i in range(start, start + count):
            values = (i, f"name {i} ✓", f"{i}.{i % 100:02d}", i / 7, bytes([i % 256]))
            conn.execute("INSERT INTO items VALUES ('ap', ?, ?, ?, ?, ?, NULL)", values)
        conn.execute("UPDATE items SET note = ?, price = NULL WHERE region = 'ap' AND id % 3 = 0",
                     ("ü" * 200_000,))  # fmt: skip
        conn.execute("DELETE FROM items WHERE region = 'ap' AND id % 5 = 0")
        conn.execute("UPDATE items SET id = id + 100000 WHERE region = 'ap' AND id = ?",
                     (start + 1,))  # fmt: skip
    conn.close()


def test_replicates_and_survives_a_stopped_query(
    spark: object, items_db: str, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path, items_db, cdc_broker, max_offsets_per_trigger=300)
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        mutate(items_db, 1000, 400)
        pipeline.catch_up()
        rows = assert_replicated(pipeline)
        assert rows == 3 + 400 - 80
        job = pipeline.job
        assert job is not None and job.stats.batches >= 2  # maxOffsetsPerTrigger split it
        # Stop the query in the middle of a stream of changes, then restart it from its
        # checkpoint: the target ends equal to the source, nothing applied twice or missed.
        mutate(items_db, 5000, 800)
        deadline = time.monotonic() + 60
        applied_before = job.stats.applied
        while job.stats.applied == applied_before and time.monotonic() < deadline:
            time.sleep(0.05)
        job.stop()
        assert pipeline.target is not None
        restarted = ReplicationJob(spark, job.settings)
        pipeline.job = restarted
        restarted.start()
        pipeline.catch_up()
        assert_replicated(pipeline)
        # A column added to the source (in the ALTER's transaction) flows through.
        conn = sqlite3.connect(items_db, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute("ALTER TABLE items ADD COLUMN rating INTEGER")
        install_triggers(conn, "items")
        conn.execute("UPDATE items SET rating = 5 WHERE region = 'eu'")
        conn.execute("COMMIT")
        pipeline.catch_up()
        assert_replicated(pipeline)
        target = sqlite3.connect(tmp_path / "target.db")
        assert target.execute("SELECT rating FROM items WHERE region = 'eu' AND id = 1"
                              ).fetchone() == (5,)  # fmt: skip


def test_poison_message_goes_to_the_dead_letter_topic(
    spark: object, items_db: str, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path, items_db, cdc_broker, prefix="poison")
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        pipeline.catch_up()
        with Producer({"bootstrap.servers": cdc_broker.bootstrap_servers}) as producer:
            producer.send("poison.main.items", b"\x00\x00\x00\x99garbage", key=b"k").result()
            producer.send("poison.main.items", b"not avro at all", key=b"k2").result()
        mutate(items_db, 1, 50)
        pipeline.catch_up()
        assert_replicated(pipeline)
        assert pipeline.job is not None and pipeline.job.stats.dead_lettered == 2
    with Consumer({"bootstrap.servers": cdc_broker.bootstrap_servers}) as consumer:
        consumer.assign([TopicPartition("poison.dead-letter", 0)])
        consumer.seek_to_beginning()
        records = [r for rs in consumer.getmany(timeout_ms=5000).values() for r in rs]
    assert sorted(r.value for r in records) == [b"\x00\x00\x00\x99garbage", b"not avro at all"]
    headers = dict(records[0].headers)
    assert headers["kayak.topic"] == b"poison.main.items" and headers["kayak.error"]


def test_capture_process_killed_mid_stream_loses_nothing(
    spark: object, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    db = str(tmp_path / "orders.db")
    create_orders(db, 500)
    spec = PipelineSpec(
        source=f"sqlite:{db}", tables=["orders"], target=f"sqlite:{tmp_path / 'target.db'}",
        work_dir=tmp_path / "work", bootstrap_servers=cdc_broker.bootstrap_servers,
        registry_url=cdc_broker.registry_url,
    )  # fmt: skip
    prepare_source(spec)
    run_workload(db, 20_000)
    log_path = tmp_path / "capture.log"

    def start_capture() -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "kayak", "cdc", "run", f"sqlite:{db}", "orders",
                 "-b", cdc_broker.bootstrap_servers, "--registry-url", cdc_broker.registry_url],
                stdout=log, stderr=log,
            )  # fmt: skip

    def logged() -> int:
        conn = sqlite3.connect(db)
        try:
            return int(conn.execute("SELECT count(*) FROM orders_kayak_cdc_log").fetchone()[0])
        finally:
            conn.close()

    total = logged()
    capture = start_capture()
    deadline = time.monotonic() + 60
    while logged() > total * 0.6 and time.monotonic() < deadline:  # some, not all, published
        time.sleep(0.01)
    os.kill(capture.pid, signal.SIGKILL)
    capture.wait()
    assert 0 < logged() < total, log_path.read_text()
    capture = start_capture()
    while logged() > 0 and time.monotonic() < deadline + 60:
        time.sleep(0.05)
    capture.send_signal(signal.SIGTERM)
    capture.wait(30)
    assert logged() == 0, log_path.read_text()
    # Spark starts from the beginning of the topic (with the repeats the kill caused) and
    # the target must still equal the source.
    with Pipeline(spec, spark) as pipeline:
        pipeline.catch_up()
        (result,) = pipeline.verify()
        assert result.equal, result.differences
        assert pipeline.job is not None and pipeline.job.stats.changes >= total
