"""The consumer's fetch path against real brokers: kayak's, Tansu and Apache Kafka.

Data is written by confluent-kafka, so what kayak decodes was encoded by another client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.client.consumer import (
    Consumer,
    FetchStats,
    NoOffsetForPartitionError,
    TopicPartition,
)
from kayak.errors import OffsetOutOfRangeError
from tests.broker.conftest import BrokerProcess
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import (
    create_topic,
    produce,
    read_count,
    read_until,
    run,
    unique,
)

pytestmark = pytest.mark.timeout(60)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def test_assign_seek_getmany_returns_exactly_what_was_written_in_every_codec(
    any_broker: RunningBroker,
) -> None:
    bootstrap = any_broker.bootstrap_servers
    headers = [("h", b"1"), ("empty", b"")]
    topics = {codec: unique(f"codec-{codec}") for codec in CODECS}
    for codec, topic in topics.items():
        create_topic(bootstrap, topic)
        records = [
            (0, b"k%d" % i if i % 3 else None, b"value-%d" % i * (i % 7)) for i in range(300)
        ]
        produce(bootstrap, topic, records, compression=codec, headers=headers)

    async def main() -> None:
        async with Consumer({"bootstrap.servers": bootstrap}) as consumer:
            for codec, topic in topics.items():
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, 123)
                got = await read_count(consumer, 300 - 123)
                assert [r.offset for r in got] == list(range(123, 300)), codec
                for record in got:
                    i = record.offset
                    assert record.key == (b"k%d" % i if i % 3 else None)
                    assert record.value == b"value-%d" % i * (i % 7)
                    assert record.headers == (("h", b"1"), ("empty", b""))
                    assert (record.topic, record.partition) == tp
                assert await consumer.position(tp) == 300
                assert consumer.highwater(tp) == 300

    run(main())


def test_values_only_fast_path_reads_the_same_values(any_broker: RunningBroker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic = unique("values")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(i % 2, None, b"v%d" % i) for i in range(200)])

    async def main() -> None:
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            values: dict[int, list[bytes | None]] = {0: [], 1: []}
            deadline = time.monotonic() + 15
            while sum(map(len, values.values())) < 200 and time.monotonic() < deadline:
                for tp, batch in (await c.getmany_values(timeout_ms=200)).items():
                    values[tp.partition] += batch
            assert values[0] == [b"v%d" % i for i in range(0, 200, 2)]
            assert values[1] == [b"v%d" % i for i in range(1, 200, 2)]

    run(main())


def test_offset_reset_policies(any_broker: RunningBroker) -> None:
    """Tansu answers a fetch past the end with no records instead of OFFSET_OUT_OF_RANGE, so
    there the consumer just waits at that offset (as every client would)."""
    bootstrap = any_broker.bootstrap_servers
    reports_out_of_range = any_broker.kind != "tansu"
    topic = unique("reset")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"old-%d" % i) for i in range(10)])
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            assert [r.value for r in await read_count(c, 10)][:2] == [b"old-0", b"old-1"]
            c.seek(tp, 1_000)  # past the end: OFFSET_OUT_OF_RANGE, reset to earliest
            again = await read_count(c, 10, 10 if reports_out_of_range else 1)
            assert [r.offset for r in again] == (list(range(10)) if reports_out_of_range else [])
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as c:
            c.assign([tp])
            end = (await c.end_offsets([tp]))[tp]
            # Tansu's ListOffsets(latest) answers the last batch's base offset + 1 (here 1,
            # the ten records being one batch), not the log end offset.
            assert end == (1 if any_broker.kind == "tansu" else 10)
            assert await c.position(tp) == end
            produce(bootstrap, topic, [(0, None, b"new")])
            later = await read_until(c, lambda rs: bool(rs) and rs[-1].value == b"new")
            assert [r.offset for r in later] == list(range(end, 11))
            c.seek_to_beginning(tp)
            assert await c.position(tp) == 0
            c.seek_to_end()
            assert await c.position(tp) == 11  # the last batch is one record: right on Tansu too
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="none") as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError, match="reset"):
                await c.getmany(timeout_ms=2_000)
            c.seek(tp, 5)
            assert [r.offset for r in await read_count(c, 6)] == list(range(5, 11))
            c.seek(tp, 500)
            if reports_out_of_range:
                with pytest.raises(OffsetOutOfRangeError, match="reset"):
                    await read_count(c, 1, 5)

    run(main())


def test_pause_and_resume(any_broker: RunningBroker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic = unique("pausing")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(i % 2, None, b"%d" % i) for i in range(40)])
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> None:
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([p0, p1])
            c.pause(p1)
            assert c.paused() == {p0, p1} - {p0}
            first = await read_count(c, 20)
            assert {(r.topic, r.partition) for r in first} == {p0}
            assert await c.getmany(timeout_ms=300) == {}
            c.resume(p1)
            rest = await read_count(c, 20)
            assert {(r.topic, r.partition) for r in rest} == {p1}
            assert [r.value for r in rest] == [b"%d" % i for i in range(1, 40, 2)]

    run(main())


def test_pipelining_keeps_more_than_one_fetch_in_flight(kafka_cluster: RunningBroker) -> None:
    """Counted by the fetcher, not timed: with depth > 1 requests overlap, for several
    partitions and for one alone (from predicted offsets), and every record arrives once."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("piped")
    create_topic(bootstrap, topic, 4)
    value = b"x" * 2000
    # small batches, so each partition takes many fetches of 64 KiB
    records = [(i % 4, None, value) for i in range(4000)]
    produce(bootstrap, topic, records, **{"batch.size": 16_384})
    every = [TopicPartition(topic, p) for p in range(4)]

    async def read_all(depth: int, partitions: list[TopicPartition]) -> FetchStats:
        config = {
            "bootstrap.servers": bootstrap,
            "fetch.pipeline.depth": depth,
            "max.partition.fetch.bytes": 64 * 1024,  # many small responses
        }
        async with Consumer(config) as c:
            c.assign(partitions)
            c.seek_to_beginning()
            expected = 1000 * len(partitions)
            got = await read_count(c, expected)
            assert sorted((r.partition, r.offset) for r in got) == [
                (tp.partition, o) for tp in partitions for o in range(1000)
            ]
            return c.fetch_stats

    deep = run(read_all(3, every))
    assert deep.max_in_flight >= 2, deep
    alone = run(read_all(2, every[:1]))
    assert alone.max_in_flight == 2 and alone.predicted > 0, alone
    shallow = run(read_all(1, every))
    assert shallow.max_in_flight == 1 and shallow.predicted == 0, shallow


def test_a_caught_up_partition_never_long_polls_while_another_has_data_held_back(
    kafka_cluster: RunningBroker,
) -> None:
    """Partition 0 has far more data than its share of the prefetch buffer, partition 1 a
    little. Once 1 is caught up and 0's fetched data waits in the buffer, a request for 1
    alone would be held by the broker for ``fetch.max.wait.ms``; the next request for 0,
    due as soon as the application drains it, would then wait behind it (one long poll
    per broker). So no long poll goes out while 0 has a backlog: reading everything takes
    no ``fetch.max.wait.ms`` (here a minute; ``read_count`` gives up after 15 s)."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("held-back")
    create_topic(bootstrap, topic, 2)
    value = b"x" * 1000
    records = [(0, None, value) for _ in range(4000)] + [(1, None, value) for _ in range(10)]
    produce(bootstrap, topic, records)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> list[tuple[int, int]]:
        config = {
            "bootstrap.servers": bootstrap,
            "fetch.max.wait.ms": 60_000,
            "request.timeout.ms": 90_000,
            "prefetch.max.bytes": 256 * 1024,  # 128 KiB a partition: 0 is held back
            "max.partition.fetch.bytes": 256 * 1024,
        }
        async with Consumer(config) as c:
            c.assign([p0, p1])
            c.seek_to_beginning()
            got = await read_count(c, 4010)
            return sorted((r.partition, r.offset) for r in got)

    assert run(main()) == [(0, o) for o in range(4000)] + [(1, o) for o in range(10)]


def test_a_poll_for_one_partition_fetches_it_while_another_is_held_back(
    kafka_cluster: RunningBroker,
) -> None:
    """The other side of the rule above: an application polling partition 1 alone, while
    partition 0's unread data fills its share of the buffer, still gets 1's new records."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("poll-one")
    create_topic(bootstrap, topic, 2)
    value = b"x" * 1000
    produce(bootstrap, topic, [(0, None, value) for _ in range(2000)] + [(1, None, b"old")])
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> list[bytes | None]:
        config = {
            "bootstrap.servers": bootstrap,
            "prefetch.max.bytes": 256 * 1024,
            "max.partition.fetch.bytes": 256 * 1024,
        }
        async with Consumer(config) as c:
            c.assign([p0, p1])
            c.seek_to_beginning()
            first = await c.getmany(p0, max_records=1, timeout_ms=10_000)
            assert [r.offset for r in first[p0]] == [0]
            assert [r.value for r in await read_count(c, 1, 15, p1)] == [b"old"]
            produce(bootstrap, topic, [(1, None, b"new")])
            return [r.value for r in await read_count(c, 1, 15, p1)]

    assert run(main()) == [b"new"]


def test_read_committed_on_tansu_hides_markers_but_tansu_lists_no_aborted_transactions(
    tansu: RunningBroker,
) -> None:
    """Tansu stores transactions and their markers but answers read_committed fetches with an
    empty aborted-transactions list, so no client can hide aborted records there (librdkafka
    shows them too). What kayak can do, it does: control records never reach the application.
    The aborted-data filtering itself is tested on bytes in test_consumer_records.py."""
    bootstrap = tansu.bootstrap_servers
    create_topic(bootstrap, "txn")
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-test"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("txn", b"aborted")
    producer.flush(10)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce("txn", b"committed")
    producer.flush(10)
    producer.commit_transaction(20)

    async def main() -> list[tuple[int, bytes | None]]:
        config = {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}
        async with Consumer(config, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("txn", 0)])
            got = await read_until(c, lambda rs: any(r.value == b"committed" for r in rs))
            return [(r.offset, r.value) for r in got]

    assert run(main()) == [(0, b"aborted"), (2, b"committed")]


@pytest.fixture
def two_shards(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    """``kayak broker --shards 2``: two processes, partitions spread over them."""
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"]).start()
    deadline = time.monotonic() + 30
    shards: dict[str, list[object]] = {}
    while len(shards) < 2 and time.monotonic() < deadline:
        path = broker.data_dir / "shards.json"
        if path.exists():
            shards = json.loads(path.read_text())["shards"]
        time.sleep(0.05)
    assert len(shards) == 2, broker.log_text()[-2000:]
    yield broker, [f"{shards[str(n)][0]}:{shards[str(n)][1]}" for n in range(2)]
    broker.stop()


@pytest.mark.kayak_only("moves a partition between shards with `kayak partitions move`")
def test_a_moved_partition_is_fetched_from_its_new_leader(
    two_shards: tuple[BrokerProcess, list[str]],
) -> None:
    broker, addresses = two_shards
    create_topic(addresses[0], "moving", 2)
    produce(addresses[0], "moving", [(0, None, b"a%d" % i) for i in range(50)])
    tp = TopicPartition("moving", 0)

    async def main() -> None:
        async with Consumer(bootstrap_servers=addresses[1], metadata_max_age_ms=60_000) as c:
            c.assign([tp])
            c.seek(tp, 0)
            before = await read_count(c, 50)
            assert c._cluster is not None and c._cluster.leader("moving", 0) == 0
            moved = subprocess.run(
                [sys.executable, "-m", "kayak", "partitions", "move", "moving", "0", "--to", "1",
                 "--data-dir", str(broker.data_dir)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert moved.returncode == 0, moved.stderr
            produce(addresses[1], "moving", [(0, None, b"b%d" % i) for i in range(50)])
            after = await read_count(c, 50, 30)
            values = [r.value for r in before + after]
            assert values == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
            assert [r.offset for r in before + after] == list(range(100))
            assert c._cluster.leader("moving", 0) == 1

    run(main(), timeout=50)
