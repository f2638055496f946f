"""Streaming reads: availableNow and processingTime triggers, admission control, and a
query stopped and restarted from its checkpoint continuing exactly where it stopped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kayak.client.sync import Admin
from kayak.client.types import TopicPartition
from tests.spark.conftest import create_topic, produce, read_options


class Collector:
    """A foreachBatch sink: every micro-batch's (topic, partition, offset, value) rows."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int, int, bytes]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in df.collect()]
        with self._lock:
            self.batches.append(rows)

    @property
    def rows(self) -> list[tuple[str, int, int, bytes]]:
        return [row for batch in self.batches for row in batch]

    @property
    def sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches if batch]


def _stream(spark: Any, options: dict[str, str]) -> Any:
    return spark.readStream.format("kayak").options(**options).load()


def _run_available_now(spark: Any, options: dict[str, str], checkpoint: Path) -> Collector:
    collector = Collector()
    query = (
        _stream(spark, options)
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return collector


def test_available_now_max_offsets_and_restart(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, 2)
    produce(bootstrap, topic_name, 0, 30)
    produce(bootstrap, topic_name, 1, 30)
    options = read_options(
        bootstrap,
        subscribePattern=f"{topic_name}.*",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="25",
    )
    checkpoint = tmp_path / "checkpoint"
    first = _run_available_now(spark, options, checkpoint)
    assert first.sizes == [25, 25, 10]
    assert sorted(first.rows) == [
        (topic_name, p, o, f"v{o}".encode()) for p in (0, 1) for o in range(30)
    ]
    # More data, and a new topic matching the pattern: the restarted query goes on from the
    # checkpoint, and reads the new topic from its earliest offset.
    produce(bootstrap, topic_name, 0, 10, start=30)
    newcomer = create_topic(admin, f"{topic_name}-new", 1)
    produce(bootstrap, newcomer, 0, 5)
    second = _run_available_now(spark, options, checkpoint)
    assert sorted(second.rows) == sorted(
        [(topic_name, 0, o, f"v{o}".encode()) for o in range(30, 40)]
        + [(newcomer, 0, o, f"v{o}".encode()) for o in range(5)]
    )
    assert all(size <= 25 for size in second.sizes)
    # Nothing new: a restart reads nothing.
    assert _run_available_now(spark, options, checkpoint).rows == []


def test_processing_time_stop_restart_exactly_once(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, 3)
    for p in range(3):
        produce(bootstrap, topic_name, p, 5)
    options = read_options(bootstrap, subscribe=topic_name, startingOffsets="earliest")
    checkpoint = tmp_path / "checkpoint"
    collector = Collector()

    def start() -> Any:
        return (
            _stream(spark, options)
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    query = start()
    query.processAllAvailable()
    assert len(collector.rows) == 15
    produce(bootstrap, topic_name, 1, 7, start=5)
    query.processAllAvailable()
    query.stop()
    produce(bootstrap, topic_name, 2, 4, start=5)  # written while the query is down
    query = start()
    query.processAllAvailable()
    produce(bootstrap, topic_name, 0, 3, start=5)
    query.processAllAvailable()
    query.stop()
    got = sorted((p, o) for _, p, o, _ in collector.rows)
    expected = sorted(
        [(0, o) for o in range(8)] + [(1, o) for o in range(12)] + [(2, o) for o in range(9)]
    )
    assert got == expected  # no duplicates, no gaps


def test_stream_data_loss(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, 1)
    produce(bootstrap, topic_name, 0, 10)
    options = read_options(bootstrap, subscribe=topic_name, startingOffsets="earliest")
    checkpoint = tmp_path / "checkpoint"
    assert len(_run_available_now(spark, options, checkpoint).rows) == 10
    produce(bootstrap, topic_name, 0, 10, start=10)
    admin.delete_records({TopicPartition(topic_name, 0): 15})  # 10..14 never read
    query = (
        _stream(spark, options)
        .writeStream.foreachBatch(Collector())
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as exc:
        assert f"{topic_name}-0: offsets 10 to 14 were deleted" in str(exc)
    else:
        raise AssertionError("the query should have failed on data loss")
    skipping = _run_available_now(spark, {**options, "failOnDataLoss": "false"}, checkpoint)
    assert sorted(o for _, _, o, _ in skipping.rows) == list(range(15, 20))
