"""Batch reads through ``spark.read.format("kayak")`` against a real broker process."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from kayak.client.sync import Admin
from kayak.client.types import TopicPartition
from tests.spark.conftest import create_topic, produce, produce_at, read_options

TS = 1_700_000_000_000  # ms


def _load(spark: Any, options: dict[str, str]) -> Any:
    return spark.read.format("kayak").options(**options).load()


def _pairs(df: Any) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]


def test_batch_read_all_columns(spark: Any, admin: Admin, bootstrap: str, topic_name: str) -> None:
    create_topic(admin, topic_name, 3)
    for p in range(3):
        produce(bootstrap, topic_name, p, 10 + p, start=100 * p, headers=True, timestamp=TS + p)
    df = _load(spark, read_options(bootstrap, subscribe=topic_name, includeHeaders="true"))
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]  # fmt: skip
    assert df.rdd.getNumPartitions() == 3  # one Spark partition per Kafka partition
    rows = df.orderBy("partition", "offset").collect()
    assert len(rows) == 10 + 11 + 12
    by_partition: dict[int, list[Any]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    for p in range(3):
        got = by_partition[p]
        assert [r.offset for r in got] == list(range(10 + p))
        assert [bytes(r.value) for r in got] == [f"v{100 * p + i}".encode() for i in range(10 + p)]
        assert [bytes(r.key) for r in got] == [f"k{100 * p + i}".encode() for i in range(10 + p)]
        assert {r.topic for r in got} == {topic_name}
        assert {r.timestampType for r in got} == {0}
        expected_ts = dt.datetime.fromtimestamp((TS + p) / 1000, dt.UTC).replace(tzinfo=None)
        assert {r.timestamp for r in got} == {expected_ts}
        for i, r in enumerate(got):
            assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] == [
                ("h", str(100 * p + i).encode()),
                ("empty", None),
            ]


def test_without_headers_and_min_partitions(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    create_topic(admin, topic_name, 1)
    produce(bootstrap, topic_name, 0, 50)
    df = _load(spark, read_options(bootstrap, subscribe=topic_name))
    assert "headers" not in df.columns
    assert df.selectExpr("count(*)", "sum(length(value))").first() == (50, 10 * 2 + 40 * 3)
    split = _load(spark, read_options(bootstrap, subscribe=topic_name, minPartitions="4"))
    assert split.rdd.getNumPartitions() == 4
    assert sorted(_pairs(split)) == [(0, o) for o in range(50)]


def test_starting_and_ending_offsets_json(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    create_topic(admin, topic_name, 2)
    produce(bootstrap, topic_name, 0, 10)
    produce(bootstrap, topic_name, 1, 10)
    starting = json.dumps({topic_name: {"0": 3, "1": -2}})
    ending = json.dumps({topic_name: {"0": 7, "1": -1}})
    df = _load(
        spark,
        read_options(
            bootstrap, subscribe=topic_name, startingOffsets=starting, endingOffsets=ending
        ),
    )
    assert sorted(_pairs(df)) == [(0, o) for o in range(3, 7)] + [(1, o) for o in range(10)]


def test_starting_timestamp(spark: Any, admin: Admin, bootstrap: str, topic_name: str) -> None:
    create_topic(admin, topic_name, 2)
    produce_at(bootstrap, topic_name, 0, [TS, TS + 10, TS + 20, TS + 30])
    produce_at(bootstrap, topic_name, 1, [TS + 5, TS + 15, TS + 25])
    df = _load(spark, read_options(bootstrap, subscribe=topic_name, startingTimestamp=str(TS + 12)))
    assert sorted(_pairs(df)) == [(0, 2), (0, 3), (1, 1), (1, 2)]
    by_partition = json.dumps({topic_name: {"0": TS + 30, "1": TS}})
    df = _load(
        spark,
        read_options(bootstrap, subscribe=topic_name, startingOffsetsByTimestamp=by_partition),
    )
    assert sorted(_pairs(df)) == [(0, 3), (1, 0), (1, 1), (1, 2)]
    # No record at or after the timestamp: an error by default, the end with "latest".
    late = str(TS + 1000)
    with pytest.raises(Exception, match="no record at or after the timestamp"):
        _load(spark, read_options(bootstrap, subscribe=topic_name, startingTimestamp=late)).count()
    df = _load(
        spark,
        read_options(
            bootstrap,
            subscribe=topic_name,
            startingTimestamp=late,
            startingOffsetsByTimestampStrategy="latest",
        ),
    )
    assert df.count() == 0


def test_subscribe_pattern_and_assign(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    a, b, other = f"{topic_name}-a", f"{topic_name}-b", f"x{topic_name}"
    for name, partitions in ((a, 1), (b, 2), (other, 1)):
        create_topic(admin, name, partitions)
        for p in range(partitions):
            produce(bootstrap, name, p, 3)
    df = _load(spark, read_options(bootstrap, subscribePattern=f"{topic_name}-.*"))
    got = sorted((r.topic, r.partition, r.offset) for r in df.collect())
    assert got == [(a, 0, o) for o in range(3)] + [(b, p, o) for p in (0, 1) for o in range(3)]
    df = _load(spark, read_options(bootstrap, assign=json.dumps({b: [1], other: [0]})))
    got = sorted((r.topic, r.partition, r.offset) for r in df.collect())
    assert got == sorted([(b, 1, o) for o in range(3)] + [(other, 0, o) for o in range(3)])


def test_fail_on_data_loss(spark: Any, admin: Admin, bootstrap: str, topic_name: str) -> None:
    create_topic(admin, topic_name, 1)
    produce(bootstrap, topic_name, 0, 20)
    assert admin.delete_records({TopicPartition(topic_name, 0): 10}) == {
        TopicPartition(topic_name, 0): 10
    }
    start = json.dumps({topic_name: {"0": 0}})
    options = read_options(bootstrap, subscribe=topic_name, startingOffsets=start)
    with pytest.raises(Exception, match=rf"{topic_name}-0: offsets 0 to 9 were deleted"):
        _load(spark, options).collect()
    df = _load(spark, {**options, "failOnDataLoss": "false"})
    assert sorted(_pairs(df)) == [(0, o) for o in range(10, 20)]
    # earliest means the log start: nothing is missing.
    assert _load(spark, read_options(bootstrap, subscribe=topic_name)).count() == 10


def _read_direct(options: dict[str, str], topic: str, start: int, until: int) -> list[int]:
    """The executor's code path, in this process: the offsets it yields for one range."""
    from kayak.spark.arrow import kafka_arrow_schema
    from kayak.spark.options import parse_read_options
    from kayak.spark.reader import KafkaInputPartition, read_range

    parsed = parse_read_options(options, streaming=False)
    work = KafkaInputPartition(topic, 0, start, until)
    batches = read_range(parsed, work, kafka_arrow_schema(False))
    return [o for batch in batches for o in batch.column("offset").to_pylist()]


def test_executor_data_loss_and_poll_timeout(admin: Admin, bootstrap: str, topic_name: str) -> None:
    """Records deleted between planning and reading, and a range past the log's end."""
    from kayak.spark.options import KayakSparkError

    create_topic(admin, topic_name, 1)
    produce(bootstrap, topic_name, 0, 20)
    admin.delete_records({TopicPartition(topic_name, 0): 10})
    options = read_options(bootstrap, subscribe=topic_name)
    with pytest.raises(KayakSparkError, match=rf"{topic_name}-0: offsets 3 to 9 were deleted"):
        _read_direct(options, topic_name, 3, 15)
    assert _read_direct({**options, "failOnDataLoss": "false"}, topic_name, 3, 15) == list(
        range(10, 15)
    )
    late = {**options, "kafkaConsumer.pollTimeoutMs": "300"}
    with pytest.raises(KayakSparkError, match="no records after offset 20 for kafkaConsumer"):
        _read_direct(late, topic_name, 12, 25)
