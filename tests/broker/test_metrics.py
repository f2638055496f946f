"""/metrics: scraped over HTTP after real client traffic, numbers checked against that traffic."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kayak.broker.server import Broker
from kayak.protocol.messages import MetadataRequest, ProduceRequest
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

RECORDS = 50
LATER = 7


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


async def scrape(url: str) -> tuple[str, Samples]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200
        return response.headers["Content-Type"], parse(await response.text())


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce(topic, value=b"value-%04d" % i, partition=i % 2)
        producer.flush(10)  # one batch per record: the request counts below are exact
    assert producer.flush(10) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, expected: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen, ended = 0, set()
    deadline = time.monotonic() + 30
    while (seen < expected or len(ended) < 2) and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.5):
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
            else:
                seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def test_metrics_match_the_traffic_of_real_clients(tmp_path: Path) -> None:
    async def run() -> None:
        async with Broker(tmp_path / "data", port=0, schema_registry_port=0) as broker:
            url = broker.schema_registry_url
            assert url is not None
            bootstrap = broker.bootstrap_servers
            await asyncio.to_thread(create_topic, bootstrap, "orders")
            await asyncio.to_thread(produce, bootstrap, "orders", 0, RECORDS)
            seen = await asyncio.to_thread(consume_and_commit, bootstrap, "orders", "g1", RECORDS)
            assert seen == RECORDS

            wire = await asyncio.to_thread(WireClient, bootstrap)
            content_type, before = await scrape(url)
            assert content_type.startswith("text/plain; version=0.0.4")
            for _ in range(3):
                await asyncio.to_thread(wire.request, MetadataRequest(topics=[]), 9)
            wrong = TopicProduceData(
                "orders", [PartitionProduceData(99, build_record_batch([b"x"]))]
            )
            request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[wrong])
            await asyncio.to_thread(wire.request, request, 9)
            _, after = await scrape(url)

            # Requests and errors per API: exactly what the wire client sent.
            assert (
                value(after, "kayak_requests_total", shard="0", api="Metadata")
                - value(before, "kayak_requests_total", shard="0", api="Metadata")
                == 3
            )
            errors = "kayak_request_errors_total"
            labels = {"shard": "0", "api": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
            assert value(after, errors, **labels) - value(before, errors, **labels) == 1
            produces = value(after, "kayak_requests_total", shard="0", api="Produce")
            assert produces >= RECORDS + 1  # one per record (flushed each), and the wrong one
            for phase in ("request_queue", "request_local", "response_queue", "response_send",
                          "request_total"):  # fmt: skip
                name = f"kayak_{phase}_time_seconds_count"
                assert value(after, name, shard="0", api="Produce") == produces, name
            assert value(after, "kayak_request_total_time_seconds_bucket", shard="0",
                         api="Produce", le="+Inf") == produces  # fmt: skip
            # Fetch responses leave by sendfile (the slow path): each is timed once too.
            fetches = value(after, "kayak_requests_total", shard="0", api="Fetch")
            assert fetches >= 1
            assert value(after, "kayak_request_total_time_seconds_count", shard="0",
                         api="Fetch") == fetches  # fmt: skip

            # Bytes and records in and out: everything produced was stored once, read once.
            size = total(after, "kayak_log_size_bytes", topic="orders")
            assert (
                value(after, "kayak_topic_records_in_total", shard="0", topic="orders") == RECORDS
            )
            assert value(after, "kayak_topic_bytes_in_total", shard="0", topic="orders") == size
            assert (
                value(after, "kayak_topic_records_out_total", shard="0", topic="orders") == RECORDS
            )
            assert value(after, "kayak_topic_bytes_out_total", shard="0", topic="orders") == size
            for p in ("0", "1"):
                partition = {"shard": "0", "topic": "orders", "partition": p}
                assert value(after, "kayak_log_segments", **partition) == 1
                assert value(after, "kayak_log_end_offset", **partition) == RECORDS / 2
                assert value(after, "kayak_partition_high_watermark", **partition) == RECORDS / 2

            # Group commit: every appended record was made durable by some round.
            appended = total(after, "kayak_topic_records_in_total")
            assert value(after, "kayak_group_commit_records_sum", shard="0") == appended
            assert value(after, "kayak_log_flush_time_seconds_count", shard="0") >= 1

            # Connections: only the wire client is still connected.
            assert value(after, "kayak_connections", shard="0", listener="PLAINTEXT") == 1
            assert value(after, "kayak_connections_created_total", shard="0") >= 4

            # Lag: none after the commit; LATER more records are LATER behind.
            assert total(after, "kayak_consumer_group_lag", group="g1") == 0
            await asyncio.to_thread(produce, bootstrap, "orders", RECORDS, LATER)
            _, later = await scrape(url)
            committed = total(later, "kayak_consumer_group_committed_offset", group="g1")
            assert committed == RECORDS
            assert total(later, "kayak_consumer_group_lag", group="g1", topic="orders") == LATER
            assert value(later, "kayak_consumer_group_lag", group="g1", topic="orders",
                         partition="0") == 4  # records 50, 52, 54, 56  # fmt: skip
            wire.close()

    asyncio.run(run())


def test_metrics_off_counts_nothing_and_serves_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        async with Broker(tmp_path / "data", port=0, schema_registry_port=0, metrics=False) as b:
            assert b.schema_registry_url is not None
            wire = await asyncio.to_thread(WireClient, b.bootstrap_servers)
            await asyncio.to_thread(wire.request, MetadataRequest(topics=[]), 9)
            wire.close()
            url = f"{b.schema_registry_url}/metrics"
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                assert response.status == 404
            assert b.context is not None and b.context.commit.observer is None

    asyncio.run(run())


def test_shard_zero_serves_every_shards_numbers(tmp_path: Path) -> None:
    """Two shards of one cluster (in this process, as `kayak broker --shards 2` runs them in
    two): shard 0's /metrics shows shard 1's numbers, from its snapshot file, and the lag of a
    group coordinated by one shard on partitions of both."""
    data = tmp_path / "data"
    shard: dict[str, object] = {"shard_count": 2, "port": 0, "schema_registry_port": 0}

    async def run() -> None:
        async with Broker(data, node_id=0, **shard) as front:
            second = Broker(data, node_id=1, **shard)
            await second.start()
            url, bootstrap = front.schema_registry_url, front.bootstrap_servers
            assert url is not None
            await asyncio.to_thread(create_topic, bootstrap, "spread")  # a partition per shard
            await asyncio.to_thread(produce, bootstrap, "spread", 0, 10)
            seen = await asyncio.to_thread(consume_and_commit, bootstrap, "spread", "g2", 10)
            assert seen == 10
            await asyncio.to_thread(produce, bootstrap, "spread", 10, 4)
            deadline = time.monotonic() + 15
            while True:  # shard 1's snapshot is up to SNAPSHOT_INTERVAL_S old
                _, samples = await scrape(url)
                records_in = [
                    value(samples, "kayak_topic_records_in_total", shard=s, topic="spread")
                    for s in ("0", "1")
                ]
                lag = total(samples, "kayak_consumer_group_lag", group="g2", topic="spread")
                if (records_in == [7, 7] and lag == 4) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert records_in == [7, 7]
            assert lag == 4
            assert value(samples, "kayak_shard_up", shard="1") == 1
            assert value(samples, "kayak_requests_total", shard="1", api="Produce") >= 7
            assert value(samples, "kayak_log_segments", shard="1", topic="spread", partition="1")
            await second.stop()  # a shard that is down is reported down, its numbers left out
            _, samples = await scrape(url)
            assert value(samples, "kayak_shard_up", shard="1") == 0
            assert not value(samples, "kayak_topic_records_in_total", shard="1", topic="spread")

    asyncio.run(run())
