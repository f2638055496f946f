"""The source against Tansu, a Kafka-compatible broker kayak did not write: nothing in
kayak.spark depends on kayak's broker."""

from __future__ import annotations

import json
from typing import Any

from kayak.client.sync import Admin
from tests.client.conftest import RunningBroker
from tests.spark.conftest import create_topic, produce, read_options


def test_read_and_write_against_tansu(spark: Any, tansu: RunningBroker, topic_name: str) -> None:
    bootstrap = tansu.bootstrap_servers
    with Admin(bootstrap_servers=bootstrap) as admin:
        create_topic(admin, topic_name, 2)
        create_topic(admin, f"{topic_name}-out", 1)
    # Tansu (in-memory storage) answers ListOffsets(latest) with the last batch's base
    # offset + 1 rather than its end offset: one record per batch keeps the two equal.
    produce(bootstrap, topic_name, 0, 6, headers=True, one_per_batch=True)
    produce(bootstrap, topic_name, 1, 4, start=6, one_per_batch=True)
    df = (
        spark.read.format("kayak")
        .options(
            **read_options(
                bootstrap,
                subscribe=topic_name,
                includeHeaders="true",
                startingOffsets=json.dumps({topic_name: {"0": 2, "1": -2}}),
            )
        )
        .load()
    )
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.partition, r.offset, bytes(r.value)) for r in rows] == [
        (0, o, f"v{o}".encode()) for o in range(2, 6)
    ] + [(1, o, f"v{o + 6}".encode()) for o in range(4)]
    assert [h.key for h in rows[0].headers] == ["h", "empty"]
    df.select("key", "value").write.format("kayak").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", f"{topic_name}-out").mode("append").save()
    back = (
        spark.read.format("kayak")
        .options(
            **read_options(
                bootstrap,
                subscribe=f"{topic_name}-out",
                # The writer sends batches: Tansu's ListOffsets(latest) would fall short.
                endingOffsets=json.dumps({f"{topic_name}-out": {"0": len(rows)}}),
            )
        )
        .load()
        .collect()
    )
    assert sorted(bytes(r.value) for r in back) == sorted(bytes(r.value) for r in rows)
