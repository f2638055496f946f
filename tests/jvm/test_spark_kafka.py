"""Spark's own Kafka source and sink (``format("kafka")``, the connector's jars from
``.jvm/spark-kafka`` on the shared session's ``spark.jars``) against kayak's broker, and the
same reads against Apache Kafka: every test runs on both, so a difference between the two
shows as a test failing on one broker only.

Options are those of Spark's Kafka integration guide: offsets as JSON and by timestamp,
``minPartitions``, ``includeHeaders``, ``maxOffsetsPerTrigger``, ``failOnDataLoss`` after
DeleteRecords, ``subscribe`` / ``subscribePattern`` / ``assign``, and the sink's key, value,
headers, partition and topic (option and column).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.client.admin import NewTopic
from kayak.client.sync import Admin, Producer
from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import jars

BROKERS = ["kayak", "apache-kafka"]
# Apache Kafka refuses CreateTime timestamps more than an hour ahead or far behind
# (log.message.timestamp.{before,after}.max.ms): timestamps are taken near now.
BASE_TS = (int(time.time()) - 600) * 1000


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-kafka") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture(params=BROKERS)
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The broker under test: kayak's, or the run's shared Apache Kafka."""
    name = "kayak_broker" if request.param == "kayak" else "apache_kafka"
    servers: str = request.getfixturevalue(name).bootstrap_servers
    return servers


@pytest.fixture
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap_servers=bootstrap) as client:
        yield client


@pytest.fixture(scope="module")
def kspark(spark: Any) -> Any:
    """The shared session, which must carry Spark's Kafka connector (``local_spark`` adds
    it when ``make jvm`` fetched it)."""
    connector = [jar for jar in jars("spark-kafka") if jar.name.startswith("spark-sql-kafka")]
    loaded = spark.sparkContext.getConf().get("spark.jars", "")
    assert connector and str(connector[0]) in loaded.split(","), loaded
    return spark


def _topic(admin: Admin, partitions: int = 1, prefix: str = "sk") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    return name


def _produce(
    bootstrap: str,
    topic: str,
    partition: int,
    values: range,
    *,
    timestamps: list[int] | None = None,
    batch_each: bool = False,
) -> None:
    """Records ``k{n}``/``v{n}`` for n in ``values``; with ``batch_each`` one batch each."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=0 if batch_each else 5) as producer:
        futures = []
        for i, n in enumerate(values):
            future = producer.send(
                topic,
                f"v{n}".encode(),
                key=f"k{n}".encode(),
                partition=partition,
                timestamp=timestamps[i] if timestamps else None,
            )
            if batch_each:
                future.result()
            futures.append(future)
        producer.flush()
        for future in futures:
            future.result()


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**options)
        .load()
    )


def _values(df: Any) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every row, sorted."""
    rows = df.select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value).decode()) for r in rows)


class Collector:
    """A foreachBatch sink keeping each non-empty micro-batch's (partition, offset, value)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, str]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = _values(df)
        if rows:
            with self._lock:
                self.batches.append(rows)

    @property
    def rows(self) -> list[tuple[int, int, str]]:
        return sorted(row for batch in self.batches for row in batch)


def _stream_available_now(
    spark: Any, bootstrap: str, checkpoint: Path, **options: str
) -> tuple[Collector, Any]:
    """Run a Kafka-source query to the end of what is there now; returns the batches seen
    and the query (its ``exception()`` is the failure, if it failed)."""
    collector = Collector()
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**options)
        .load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    # A failed query raises here; the failure is read from query.exception() by the caller.
    with contextlib.suppress(Exception):
        query.awaitTermination(180)
    assert not query.isActive, "the availableNow query did not finish"
    return collector, query


# -- the sink, then the batch source ------------------------------------------------------------


def test_sink_key_value_headers_partition_then_read(
    kspark: Any, admin: Admin, bootstrap: str
) -> None:
    """The sink writes key, value, headers and partition (topic from the option); the
    source reads them back with ``includeHeaders``."""
    topic = _topic(admin, partitions=3)
    rows = [(f"k{n}", f"v{n}", n % 3, [("n", str(n).encode()), ("none", None)]) for n in range(30)]
    schema = (
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )
    df = kspark.createDataFrame(rows, schema)
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()

    read = _read(kspark, bootstrap, subscribe=topic, includeHeaders="true").collect()
    assert len(read) == 30
    for row in read:
        n = int(bytes(row.value).decode()[1:])
        assert bytes(row.key).decode() == f"k{n}"
        assert row.partition == n % 3
        assert row.topic == topic
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == [
            ("n", str(n).encode()),
            ("none", None),
        ]
    # Offsets are dense from 0 in each partition, in the order each task wrote.
    for p in range(3):
        assert sorted(r.offset for r in read if r.partition == p) == list(range(10))


def test_sink_topic_column_and_option(kspark: Any, admin: Admin, bootstrap: str) -> None:
    """Without the ``topic`` option each row goes to its ``topic`` column; with it the
    option wins over the column."""
    first, second, third = _topic(admin), _topic(admin), _topic(admin)
    df = kspark.createDataFrame(
        [(first, "a"), (second, "b"), (first, "c")], "topic string, value string"
    )
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save()
    assert sorted(v for _, _, v in _values(_read(kspark, bootstrap, subscribe=first))) == ["a", "c"]
    assert [v for _, _, v in _values(_read(kspark, bootstrap, subscribe=second))] == ["b"]

    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", third
    ).save()
    assert sorted(v for _, _, v in _values(_read(kspark, bootstrap, subscribe=third))) == [
        "a", "b", "c",
    ]  # fmt: skip


def test_offsets_as_json(kspark: Any, admin: Admin, bootstrap: str) -> None:
    """``startingOffsets``/``endingOffsets`` JSON with explicit offsets, -2 (earliest) and
    -1 (latest)."""
    topic = _topic(admin, partitions=3)
    for p in range(3):
        _produce(bootstrap, topic, p, range(p * 100, p * 100 + 10))
    df = _read(
        kspark, bootstrap, subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 2, "1": -2, "2": 5}}),
        endingOffsets=json.dumps({topic: {"0": 7, "1": 3, "2": -1}}),
    )  # fmt: skip
    got = _values(df)
    assert [(p, o) for p, o, _ in got] == (
        [(0, o) for o in range(2, 7)] + [(1, o) for o in range(3)] + [(2, o) for o in range(5, 10)]
    )
    assert all(v == f"v{p * 100 + o}" for p, o, v in got)
    # earliest/latest by name, the defaults of a batch query.
    assert len(_values(_read(kspark, bootstrap, subscribe=topic))) == 30


def test_offsets_by_timestamp(kspark: Any, admin: Admin, bootstrap: str) -> None:
    """``startingTimestamp``, ``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``:
    each is the first offset whose timestamp is at or after the given one (ListOffsets by
    timestamp); an ending timestamp after every record means the end."""
    topic = _topic(admin, partitions=2)
    # Several records per batch: the lookup must find a record inside a batch.
    _produce(bootstrap, topic, 0, range(10), timestamps=[BASE_TS + i * 1000 for i in range(10)])
    _produce(
        bootstrap, topic, 1, range(100, 110),
        timestamps=[BASE_TS + 500 + i * 1000 for i in range(10)],
    )  # fmt: skip

    since = _read(kspark, bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 5000))
    assert [(p, o) for p, o, _ in _values(since)] == [(0, o) for o in range(5, 10)] + [
        (1, o) for o in range(5, 10)
    ]

    between = _read(
        kspark, bootstrap, subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS + 2000, "1": BASE_TS + 8000}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS + 4000, "1": BASE_TS + 60_000}}),
    )  # fmt: skip
    assert [(p, o) for p, o, _ in _values(between)] == [(0, 2), (0, 3), (1, 8), (1, 9)]
    timestamps = sorted(r.timestamp.timestamp() for r in between.select("timestamp").collect())
    assert [round(t * 1000) for t in timestamps] == [
        BASE_TS + 2000, BASE_TS + 3000, BASE_TS + 8500, BASE_TS + 9500,
    ]  # fmt: skip


def test_min_partitions_splits_offset_ranges(kspark: Any, admin: Admin, bootstrap: str) -> None:
    topic = _topic(admin, partitions=2)
    _produce(bootstrap, topic, 0, range(40))
    _produce(bootstrap, topic, 1, range(100, 120))
    df = _read(kspark, bootstrap, subscribe=topic, minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    got = _values(df)
    assert [(p, o) for p, o, _ in got] == [(0, o) for o in range(40)] + [(1, o) for o in range(20)]


def test_subscribe_pattern_and_assign(kspark: Any, admin: Admin, bootstrap: str) -> None:
    prefix = f"skp{uuid.uuid4().hex[:6]}"
    matching = [_topic(admin, partitions=2, prefix=prefix) for _ in range(2)]
    other = _topic(admin, partitions=1)
    for topic in [*matching, other]:
        _produce(bootstrap, topic, 0, range(3))
    _produce(bootstrap, matching[0], 1, range(10, 14))

    by_pattern = _read(kspark, bootstrap, subscribePattern=f"{prefix}-.*")
    topics = sorted(r.topic for r in by_pattern.select("topic").collect())
    assert topics == sorted([matching[0]] * 7 + [matching[1]] * 3)

    assigned = _read(kspark, bootstrap, assign=json.dumps({matching[0]: [1], other: [0]}))
    rows = sorted((r.topic, r.partition, r.offset) for r in assigned.collect())
    assert rows == sorted(
        [(matching[0], 1, o) for o in range(4)] + [(other, 0, o) for o in range(3)]
    )


# -- streaming ----------------------------------------------------------------------------------


def test_stream_max_offsets_per_trigger(
    kspark: Any, admin: Admin, bootstrap: str, tmp_path: Path
) -> None:
    """An availableNow query with ``maxOffsetsPerTrigger`` reads everything in batches of
    at most that many; a restart from its checkpoint reads only what came after."""
    topic = _topic(admin, partitions=2)
    _produce(bootstrap, topic, 0, range(20))
    _produce(bootstrap, topic, 1, range(100, 115))
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"}
    collector, query = _stream_available_now(kspark, bootstrap, tmp_path / "cp", **options)
    assert query.exception() is None
    assert [(p, o) for p, o, _ in collector.rows] == [(0, o) for o in range(20)] + [
        (1, o) for o in range(15)
    ]
    assert len(collector.batches) >= 4
    assert all(len(batch) <= 10 for batch in collector.batches)

    _produce(bootstrap, topic, 1, range(115, 118))
    again, query = _stream_available_now(kspark, bootstrap, tmp_path / "cp", **options)
    assert query.exception() is None
    assert again.rows == [(1, 15, "v115"), (1, 16, "v116"), (1, 17, "v117")]


def test_stream_starting_timestamp_and_kafka_sink(
    kspark: Any, admin: Admin, bootstrap: str, tmp_path: Path
) -> None:
    """A streaming read from ``startingTimestamp`` written by the streaming Kafka sink
    (key, value and headers carried) into another topic."""
    source, target = _topic(admin), _topic(admin, partitions=2)
    _produce(bootstrap, source, 0, range(8), timestamps=[BASE_TS + i * 1000 for i in range(8)])
    query = (
        kspark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingTimestamp", str(BASE_TS + 3000))
        .option("includeHeaders", "true")
        .load()
        .selectExpr(
            "key", "upper(cast(value as string)) as value", "cast(offset % 2 as int) as partition",
            "array(named_struct('key', 'from', 'value', cast(cast(offset as string) as binary)))"
            " as headers",
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None
    read = _read(kspark, bootstrap, subscribe=target, includeHeaders="true").collect()
    got = sorted(
        (bytes(r.value).decode(), r.partition, [(h.key, bytes(h.value)) for h in r.headers])
        for r in read
    )
    assert got == [(f"V{n}", n % 2, [("from", str(n).encode())]) for n in range(3, 8)]


def test_fail_on_data_loss_after_delete_records(
    kspark: Any, admin: Admin, bootstrap: str, tmp_path: Path
) -> None:
    """Records deleted (DeleteRecords) before a query read them: with ``failOnDataLoss``
    the query fails with Spark's data-loss error, without it it skips them; a batch query
    asking for deleted offsets does the same."""
    topic = _topic(admin)
    _produce(bootstrap, topic, 0, range(10), batch_each=True)
    strict = {"subscribe": topic, "startingOffsets": "earliest", "failOnDataLoss": "true"}
    lenient = {**strict, "failOnDataLoss": "false"}
    for name, options in (("strict", strict), ("lenient", lenient)):
        first, query = _stream_available_now(kspark, bootstrap, tmp_path / name, **options)
        assert query.exception() is None
        assert len(first.rows) == 10

    _produce(bootstrap, topic, 0, range(10, 20), batch_each=True)
    assert admin.delete_records({(topic, 0): 15}) == {(topic, 0): 15}

    _, query = _stream_available_now(kspark, bootstrap, tmp_path / "strict", **strict)
    error = query.exception()
    assert error is not None
    assert "KAFKA_DATA_LOSS" in str(error) or "data may have been lost" in str(error), str(error)

    skipped, query = _stream_available_now(kspark, bootstrap, tmp_path / "lenient", **lenient)
    assert query.exception() is None
    assert skipped.rows == [(0, o, f"v{o}") for o in range(15, 20)]

    below = json.dumps({topic: {"0": 5}})
    with pytest.raises(Exception, match=r"KAFKA_DATA_LOSS|data may have been lost"):
        _read(kspark, bootstrap, subscribe=topic, startingOffsets=below).collect()
    tolerated = _read(
        kspark, bootstrap, subscribe=topic, startingOffsets=below, failOnDataLoss="false"
    )
    assert _values(tolerated) == [(0, o, f"v{o}") for o in range(15, 20)]


# -- what the Java consumer and producer meet less often ----------------------------------------


def test_offsets_by_timestamp_out_of_order_and_deleted(
    kspark: Any, admin: Admin, bootstrap: str
) -> None:
    """Timestamps need not rise with offsets: a lookup answers the first offset whose
    timestamp is at or after the one asked, never one below the log start (kayak answered
    the log start offset when an earlier, deleted record matched: found here, fixed in
    ListOffsets; tests/broker/test_list_offsets_by_time.py); no match is Spark's error, or
    the end with ``startingOffsetsByTimestampStrategy=latest``."""
    topic = _topic(admin, partitions=2)
    stamps = [BASE_TS + t * 1000 for t in (5, 1, 7, 3, 9, 2, 8)]
    _produce(bootstrap, topic, 0, range(7), timestamps=stamps)  # one batch
    _produce(bootstrap, topic, 1, range(7), timestamps=stamps, batch_each=True)

    def first_offsets(**options: str) -> list[tuple[int, int]]:
        got = _values(_read(kspark, bootstrap, subscribe=topic, **options))
        return sorted({(p, min(o for q, o, _ in got if q == p)) for p, _, _ in got})

    for at, offset in ((6, 2), (9, 4)):
        both = json.dumps({topic: {"0": BASE_TS + at * 1000, "1": BASE_TS + at * 1000}})
        assert first_offsets(startingOffsetsByTimestamp=both) == [(0, offset), (1, offset)]
    after_all = json.dumps({topic: {"0": BASE_TS + 99_000, "1": BASE_TS}})
    with pytest.raises(Exception, match="No offset matched"):
        _read(kspark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=after_all).collect()
    assert first_offsets(
        startingOffsetsByTimestamp=after_all, startingOffsetsByTimestampStrategy="latest"
    ) == [(1, 0)]

    # Offset 3 (one batch with 0-9, or its own) is stamped later than 4-9; 5 is the log start.
    for batch_each in (False, True):
        deleted = _topic(admin)
        stamps = [BASE_TS + i * 1000 for i in range(10)]
        stamps[3] = BASE_TS + 50_000
        _produce(bootstrap, deleted, 0, range(10), timestamps=stamps, batch_each=batch_each)
        _produce(
            bootstrap, deleted, 0, range(10, 12),
            timestamps=[BASE_TS + 60_000, BASE_TS + 61_000], batch_each=True,
        )  # fmt: skip
        admin.delete_records({(deleted, 0): 5})
        for at, offset in ((7, 7), (40, 10)):
            starting = json.dumps({deleted: {"0": BASE_TS + at * 1000}})
            got = _read(kspark, bootstrap, subscribe=deleted, startingOffsetsByTimestamp=starting)
            assert [o for _, o, _ in _values(got)] == list(range(offset, 12)), (batch_each, at)


def test_log_append_time_topic(kspark: Any, admin: Admin, bootstrap: str) -> None:
    """``message.timestamp.type=LogAppendTime``: the broker's time, ``timestampType`` 1."""
    topic = f"sk-lat-{uuid.uuid4().hex[:8]}"
    configs = {"message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, configs=configs)])
    before = time.time()
    _produce(bootstrap, topic, 0, range(5), timestamps=[BASE_TS] * 5)
    rows = _read(kspark, bootstrap, subscribe=topic).collect()
    assert sorted(r.offset for r in rows) == list(range(5))
    assert {r.timestampType for r in rows} == {1}
    assert all(r.timestamp.timestamp() >= before - 5 for r in rows)


def test_compressed_large_records_small_fetches(kspark: Any, admin: Admin, bootstrap: str) -> None:
    """The sink compresses with each codec; the source reads the batches back through fetch
    limits smaller than one record (the first batch comes whole, KIP-74), nulls included."""
    rows = [(f"k{n}", "x" * 5000 + str(n)) for n in range(30)] + [(None, "no key"), ("k", None)]
    df = kspark.createDataFrame(rows, "key string, value string").coalesce(1)
    limits = {"kafka.max.partition.fetch.bytes": "1024", "kafka.fetch.max.bytes": "2048"}
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = _topic(admin)
        (
            df.write.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("kafka.compression.type", codec)
            .option("kafka.linger.ms", "20")
            .save()
        )
        read = _read(kspark, bootstrap, subscribe=topic, **limits).collect()
        assert sorted(r.offset for r in read) == list(range(32)), codec
        got = {
            (
                None if r.key is None else bytes(r.key).decode(),
                None if r.value is None else bytes(r.value).decode(),
            )
            for r in read
        }
        assert got == set(rows), codec


def test_read_committed_long_poll_and_empty(
    kspark: Any, admin: Admin, bootstrap: str, tmp_path: Path
) -> None:
    """``kafka.isolation.level=read_committed`` and a ``fetch.min.bytes`` never reached (the
    broker answers after ``fetch.max.wait.ms``); an empty topic reads as nothing."""
    topic = _topic(admin, partitions=2)
    assert _read(kspark, bootstrap, subscribe=topic).count() == 0
    collector, query = _stream_available_now(
        kspark, bootstrap, tmp_path / "empty", subscribe=topic, startingOffsets="earliest"
    )
    assert query.exception() is None and collector.rows == []
    _produce(bootstrap, topic, 0, range(5))
    _produce(bootstrap, topic, 1, range(5))
    options = {
        "kafka.isolation.level": "read_committed",
        "kafka.fetch.min.bytes": "50000000",
        "kafka.fetch.max.wait.ms": "300",
    }
    assert len(_values(_read(kspark, bootstrap, subscribe=topic, **options))) == 10


def test_stream_from_latest_picks_up_new_partitions(
    kspark: Any, admin: Admin, bootstrap: str, tmp_path: Path
) -> None:
    """A stream starts at the end by default; partitions added later (CreatePartitions) are
    read from their first offset."""
    topic = _topic(admin, partitions=1)
    _produce(bootstrap, topic, 0, range(3))
    collector, query = _stream_available_now(kspark, bootstrap, tmp_path / "cp", subscribe=topic)
    assert query.exception() is None and collector.rows == []
    _produce(bootstrap, topic, 0, range(3, 5))
    admin.create_partitions({topic: 3})
    _produce(bootstrap, topic, 2, range(100, 102))
    collector, query = _stream_available_now(kspark, bootstrap, tmp_path / "cp", subscribe=topic)
    assert query.exception() is None
    assert collector.rows == [(0, 3, "v3"), (0, 4, "v4"), (2, 0, "v100"), (2, 1, "v101")]


def _shard_addresses(broker: BrokerProcess, shards: int) -> list[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        path = broker.data_dir / "shards.json"
        if path.exists():
            found = json.loads(path.read_text())["shards"]
            if len(found) == shards:
                return [f"{found[str(n)][0]}:{found[str(n)][1]}" for n in range(shards)]
        time.sleep(0.05)
    raise AssertionError(f"the shards did not start: {broker.log_text()[-2000:]}")


def test_stream_across_a_partition_move_between_shards(kspark: Any, tmp_path: Path) -> None:
    """kayak alone (Apache Kafka's single node cannot move a partition): a running query's
    consumers meet a partition moved to another shard (NOT_LEADER_OR_FOLLOWER, a new
    leader epoch, validation with OffsetForLeaderEpoch) and go on without loss or repeat."""
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"]).start()
    try:
        bootstrap = _shard_addresses(broker, 2)[0]
        with Admin(bootstrap_servers=bootstrap) as admin:
            topic = _topic(admin, partitions=2)
        _produce(bootstrap, topic, 0, range(10))
        _produce(bootstrap, topic, 1, range(100, 110))
        collector = Collector()
        query = (
            kspark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            _wait_for_rows(query, collector, 20)
            moved = subprocess.run(
                [sys.executable, "-m", "kayak", "partitions", "move", topic, "0", "--to", "1",
                 "--data-dir", str(broker.data_dir)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert moved.returncode == 0, moved.stderr
            _produce(bootstrap, topic, 0, range(10, 20))
            _produce(bootstrap, topic, 1, range(110, 120))
            _wait_for_rows(query, collector, 40)
        finally:
            query.stop()
        assert query.exception() is None
        assert collector.rows == [(0, o, f"v{o}") for o in range(20)] + [
            (1, o, f"v{100 + o}") for o in range(20)
        ]
    finally:
        broker.stop()


def _wait_for_rows(query: Any, collector: Collector, rows: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(collector.rows) < rows and query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    assert query.exception() is None
    assert len(collector.rows) >= rows, f"{len(collector.rows)} rows of {rows}"
