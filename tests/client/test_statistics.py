"""``statistics()`` on the producer, consumer and admin clients (librdkafka's statistics, as a
dict), and ``stats_cb`` every ``statistics.interval.ms``, against a real kayak broker and
Apache Kafka (the reconnect test kills the broker: kayak's alone)."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.client import Admin, Consumer, NewTopic, Producer, TopicPartition, sync
from kayak.errors import ConfigError
from tests.broker.conftest import BrokerProcess
from tests.client.consumer_support import unique
from tests.fixtures.jvm import ApacheKafka

pytestmark = pytest.mark.timeout(60)

RECORDS = 600
VALUE = b"v" * 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("statistics")) / "data").start()
    yield process
    process.stop()


@pytest.fixture(params=["kayak", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """kayak's broker (one per module) and the run's shared Apache Kafka in turn."""
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return kafka.bootstrap_servers
    broker: BrokerProcess = request.getfixturevalue("broker")
    return broker.bootstrap_servers


def _partitions(stats: dict[str, Any], topic: str) -> dict[int, dict[str, int]]:
    return stats["topics"][topic]["partitions"]  # type: ignore[no-any-return]


def _check_rtt(broker: dict[str, Any]) -> None:
    rtt = broker["rtt"]
    assert rtt["cnt"] > 0
    assert 0 < rtt["min"] <= rtt["p50"] <= rtt["p99"] <= rtt["max"]
    assert rtt["min"] <= rtt["avg"] <= rtt["max"]


def test_counts_bytes_and_lag_match_what_was_produced_and_consumed(bootstrap: str) -> None:
    topic, group_id = unique("stats-roundtrip"), unique("stats-group")

    async def main() -> None:
        async with Admin({"bootstrap.servers": bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
            admin_stats = admin.statistics()
            leader_id = (await admin.describe_topics([topic]))[topic].partitions[0].leader
        assert admin_stats["type"] == "admin"
        assert sum(b["req"].get("CreateTopics", 0) for b in admin_stats["brokers"].values()) == 1

        async with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            futures = [await producer.send(topic, VALUE) for _ in range(RECORDS)]
            queued = producer.statistics()
            assert queued["msg_cnt"] + queued["txmsgs"] == RECORDS  # buffered or acknowledged
            await asyncio.gather(*futures)
            produced = producer.statistics()

        assert produced["type"] == "producer" and produced["client_id"] == "kayak"
        assert produced["txmsgs"] == RECORDS and produced["msg_cnt"] == 0
        assert produced["msg_size"] == 0
        partition = _partitions(produced, topic)[0]
        assert partition["txmsgs"] == RECORDS and partition["hi_offset"] == RECORDS
        # Encoded batches: every value, plus per-record and per-batch framing.
        assert RECORDS * len(VALUE) < produced["txmsg_bytes"] < RECORDS * (len(VALUE) + 20)
        assert produced["txmsg_bytes"] == partition["txbytes"]
        # The wire carries the batches and the requests around them.
        assert produced["tx_bytes"] > produced["txmsg_bytes"]
        brokers = produced["brokers"]
        assert produced["tx"] == sum(b["tx"] for b in brokers.values())
        assert produced["rx_bytes"] == sum(b["rxbytes"] for b in brokers.values())
        leader = next(b for name, b in brokers.items() if name.endswith(f"/{leader_id}"))
        assert leader["state"] == "UP" and leader["nodeid"] == leader_id
        assert leader["req"]["Produce"] >= 1 and leader["outbuf_cnt"] == 0
        assert leader["rx"] == leader["tx"]  # every request answered (acks=all)
        _check_rtt(leader)

        config = {"bootstrap.servers": bootstrap, "group.id": group_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}  # fmt: skip
        async with Consumer(config) as consumer:
            consumer.subscribe([topic])
            first = await consumer.getmany(timeout_ms=10_000, max_records=RECORDS // 3)
            half = consumer.statistics()
            taken = sum(map(len, first.values()))
            assert 0 < taken <= RECORDS // 3
            assert _partitions(half, topic)[0]["consumer_lag"] == RECORDS - taken
            got = taken
            while got < RECORDS:
                batch = await consumer.getmany(timeout_ms=5_000)
                got += sum(map(len, batch.values()))
            await consumer.commit()
            consumed = consumer.statistics()

        assert consumed["type"] == "consumer"
        assert consumed["rxmsgs"] == RECORDS
        # The same batches came back: as many bytes as the producer's acknowledged ones.
        assert consumed["rxmsg_bytes"] == produced["txmsg_bytes"]
        partition = _partitions(consumed, topic)[0]
        assert partition["rxmsgs"] == RECORDS
        assert partition["hi_offset"] == RECORDS and partition["app_offset"] == RECORDS
        assert partition["consumer_lag"] == 0 and partition["committed_offset"] == RECORDS
        group = consumed["cgrp"]
        assert group["state"] == "up" and group["join_state"] == "steady"
        assert group["rebalance_cnt"] >= 1 and group["assignment_size"] == 1
        coordinator = consumed["brokers"]["GroupCoordinator"]
        assert coordinator["req"]["OffsetCommit"] == 1 and coordinator["req"]["JoinGroup"] >= 1
        fetcher = next(
            b for name, b in consumed["brokers"].items() if name.endswith(f"/{leader_id}")
        )
        assert fetcher["req"]["Fetch"] >= 1
        assert fetcher["rxbytes"] > consumed["rxmsg_bytes"]
        _check_rtt(fetcher)

    asyncio.run(main())


def test_stats_cb_is_called_every_interval_and_survives_a_failing_call(bootstrap: str) -> None:
    reports: list[dict[str, Any]] = []

    def callback(stats: dict[str, Any]) -> None:
        reports.append(stats)
        if len(reports) == 2:
            raise RuntimeError("a broken callback")  # logged; the reports go on

    async def main() -> None:
        config = {"bootstrap.servers": bootstrap, "statistics.interval.ms": 50}
        async with Producer(config, stats_cb=callback) as producer:
            await producer.send_and_wait(unique("stats-callback"), b"x")
            while len(reports) < 4:
                await asyncio.sleep(0.02)
        count = len(reports)
        await asyncio.sleep(0.15)
        assert len(reports) == count  # no report after close

    asyncio.run(main())
    stamps = [report["ts"] for report in reports]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    # librdkafka's ts is in microseconds: reports 50 ms apart (give or take the loop's delays).
    assert all(later - earlier >= 40_000 for earlier, later in itertools.pairwise(stamps))
    assert reports[-1]["txmsgs"] == 1


@pytest.mark.kayak_only("kills the broker with SIGKILL and restarts it")
def test_the_counts_survive_a_reconnect(broker: BrokerProcess) -> None:
    async def main() -> None:
        config = {"bootstrap.servers": broker.bootstrap_servers, "retry.backoff.ms": 50,
                  "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}  # fmt: skip
        async with Producer(config) as producer:
            await producer.send_and_wait("stats-reconnect", b"before")
            before = producer.statistics()["brokers"]
            leader = next(name for name in before if name.endswith("/0"))
            # The connection is lost with the broker; a new one opens to it when it is back.
            await asyncio.to_thread(lambda: broker.stop(signal.SIGKILL) and None)
            await asyncio.to_thread(broker.restart)
            await producer.send_and_wait("stats-reconnect", b"after")
            after = producer.statistics()
        assert after["txmsgs"] == 2
        again = after["brokers"][leader]
        assert again["req"]["ApiVersions"] == before[leader]["req"]["ApiVersions"] + 1
        assert again["req"]["Produce"] >= before[leader]["req"]["Produce"] + 1
        assert again["tx"] > before[leader]["tx"] and again["rxbytes"] > before[leader]["rxbytes"]
        assert again["rtt"]["cnt"] > before[leader]["rtt"]["cnt"]

    asyncio.run(main())


def test_the_blocking_facades_have_statistics_too(bootstrap: str) -> None:
    topic = unique("stats-sync")
    with sync.Producer(bootstrap_servers=bootstrap) as producer:
        producer.send_and_wait(topic, b"one")
        assert producer.statistics()["txmsgs"] == 1
    with sync.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert sum(map(len, consumer.poll(timeout_ms=5_000).values())) == 1
        stats = consumer.statistics()
        assert stats["rxmsgs"] == 1 and "cgrp" not in stats  # no group.id, no group
    with sync.Admin(bootstrap_servers=bootstrap) as admin:
        admin.list_topics()
        assert admin.statistics()["tx"] >= 2  # ApiVersions and Metadata at least


def test_statistics_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="stats_cb"):
        Producer(bootstrap_servers="localhost:9092", stats_cb="not callable")
    with pytest.raises(ConfigError, match=r"statistics\.interval\.ms"):
        Consumer({"bootstrap.servers": "localhost:9092", "statistics.interval.ms": -1})
    idle = Producer(bootstrap_servers="localhost:9092")  # before start: empty, not an error
    assert idle.statistics()["brokers"] == {} and idle.statistics()["txmsgs"] == 0
