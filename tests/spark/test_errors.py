"""Bad options surface through Spark at ``load()`` (Spark's own options) or at the first
action (``kafka.*`` properties, what needs the cluster), naming the option. Every case of
the parsing itself is in test_options.py; these check that Spark passes the errors on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kayak.client.sync import Admin
from tests.spark.conftest import create_topic, read_options


def _load(spark: Any, options: dict[str, str]) -> Any:
    return spark.read.format("kayak").options(**options).load()


def test_bad_options_fail_at_load(spark: Any) -> None:
    with pytest.raises(Exception, match=r"option 'kafka\.bootstrap\.servers' is required"):
        _load(spark, {"subscribe": "t"})
    with pytest.raises(Exception, match="exactly one of the options 'subscribe', 'subscribePat"):
        _load(spark, {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t":[0]}'})


def test_bad_options_fail_at_first_use(
    spark: Any, admin: Admin, bootstrap: str, topic_name: str
) -> None:
    create_topic(admin, topic_name, 2)
    df = _load(
        spark, read_options(bootstrap, subscribe=topic_name, **{"kafka.fetch.max.bites": "1"})
    )
    with pytest.raises(Exception, match=r"option 'kafka\.fetch\.max\.bites'"):
        df.collect()
    missing = json.dumps({f"{topic_name}-nope": [0]})
    with pytest.raises(Exception, match=rf"option 'assign': topic '{topic_name}-nope'"):
        _load(spark, read_options(bootstrap, assign=missing)).collect()
    beyond = json.dumps({topic_name: [0, 5]})
    with pytest.raises(
        Exception, match=rf"option 'assign': topic '{topic_name}' has no partition 5"
    ):
        _load(spark, read_options(bootstrap, assign=beyond)).collect()
    partial = json.dumps({topic_name: {"0": 0}})
    with pytest.raises(Exception, match=rf"'startingOffsets' must give an offset .*{topic_name}-1"):
        _load(
            spark, read_options(bootstrap, subscribe=topic_name, startingOffsets=partial)
        ).collect()


def test_stream_only_and_writer_errors(spark: Any, bootstrap: str) -> None:
    stream = (
        spark.readStream.format("kayak")
        .options(**read_options(bootstrap, subscribe="t", endingOffsets="latest"))
        .load()
    )
    query = stream.writeStream.format("noop").start()
    with pytest.raises(Exception, match="'endingOffsets' is for batch queries only"):
        query.awaitTermination(60)
    df = spark.createDataFrame([("a",)], "key string")
    writer = df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap).mode("append")
    with pytest.raises(Exception, match="needs a 'value' column"):
        writer.option("topic", "t").save()
    df = spark.createDataFrame([("a",)], "value string")
    writer = df.write.format("kayak").option("kafka.bootstrap.servers", bootstrap).mode("append")
    with pytest.raises(Exception, match="set the option 'topic' or add a 'topic' column"):
        writer.save()
