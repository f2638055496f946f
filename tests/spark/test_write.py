"""Writing with ``df.write.format("kayak")`` and ``writeStream``, read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kayak.client.sync import Admin
from tests.spark.conftest import create_topic, produce, read_options


def _read(spark: Any, bootstrap: str, topic: str, headers: bool = False) -> list[Any]:
    options = read_options(bootstrap, subscribe=topic, includeHeaders=str(headers).lower())
    return spark.read.format("kayak").options(**options).load().collect()


def test_batch_write_round_trip(spark: Any, admin: Admin, bootstrap: str, topic_name: str) -> None:
    create_topic(admin, topic_name, 3)
    rows = [
        (f"k{n}", f"value {n}", n % 3, [("n", str(n).encode())] if n % 2 else []) for n in range(30)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic_name
    ).mode("append").save()
    got = _read(spark, bootstrap, topic_name, headers=True)
    assert len(got) == 30
    for r in got:
        n = int(bytes(r.key)[1:])
        assert bytes(r.value) == f"value {n}".encode()
        assert r.partition == n % 3
        assert [(h.key, bytes(h.value)) for h in r.headers] == (
            [("n", str(n).encode())] if n % 2 else []
        )


def test_topic_column_and_binary_value(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    a, b = create_topic(admin, f"{topic_name}-a", 1), create_topic(admin, f"{topic_name}-b", 1)
    df = spark.createDataFrame([(a, b"x"), (b, b"y"), (a, b"z")], "topic string, value binary")
    df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    assert sorted(bytes(r.value) for r in _read(spark, bootstrap, a)) == [b"x", b"z"]
    assert [bytes(r.value) for r in _read(spark, bootstrap, b)] == [b"y"]


def test_save_in_the_default_mode_appends_to_a_new_topic_and_overwrite_is_refused(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    # As with Spark's Kafka sink: save() without a mode appends; the topic is created on use.
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap)
    writer.option("topic", topic_name).save()
    assert [bytes(r.value) for r in _read(spark, bootstrap, topic_name)] == [b"v"]
    with pytest.raises(Exception, match='save mode "overwrite" is not supported'):
        writer.option("topic", topic_name).mode("overwrite").save()
    assert len(_read(spark, bootstrap, topic_name)) == 1


def test_stream_write_round_trip(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(admin, source, 2)
    create_topic(admin, sink, 2)
    produce(bootstrap, source, 0, 20)
    produce(bootstrap, source, 1, 20, start=20)
    stream = (
        spark.readStream.format("kayak")
        .options(**read_options(bootstrap, subscribe=source, startingOffsets="earliest"))
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value", "partition")
    )
    query = (
        stream.writeStream.format("kayak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = sorted((r.partition, bytes(r.key), bytes(r.value)) for r in _read(spark, bootstrap, sink))
    expected = sorted((0 if n < 20 else 1, f"k{n}".encode(), f"V{n}".encode()) for n in range(40))
    assert got == expected


def test_failed_send_fails_the_task(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    create_topic(admin, topic_name, 1)
    df = spark.createDataFrame([("x", 7)], "value string, partition int")
    writer = df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap)
    missing_partition = writer.option("topic", topic_name)
    try:
        missing_partition.mode("append").save()
    except Exception as exc:
        assert f"writing to Kafka topic '{topic_name}' failed" in str(exc)
        assert "partition 7" in str(exc)
    else:
        raise AssertionError("writing to a partition that does not exist should fail")
