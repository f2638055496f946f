"""Helpers the consumer tests share: topics and records written by confluent-kafka (a
third-party writer), and reading with kayak's consumer until a deadline."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kayak.client.consumer import Consumer, ConsumerRecord, TopicPartition

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A topic or group name no other test uses: Apache Kafka is shared by the whole run."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def numbered_topic(
    bootstrap: str, prefix: str, records: int, partitions: int = 1
) -> list[TopicPartition]:
    """A new topic holding ``records`` records (values b"0", b"1", ..., no keys), dealt to
    its ``partitions`` in turn; its partitions."""
    topic = unique(prefix)
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, [(i % partitions, None, b"%d" % i) for i in range(records)])
    return [TopicPartition(topic, p) for p in range(partitions)]


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    *,
    compression: str = "none",
    headers: list[tuple[str, bytes]] | None = None,
    **config: object,
) -> None:
    """Write (partition, key, value) records with confluent-kafka, waiting for every ack."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5, **config}
    )
    failures: list[object] = []
    for partition, key, value in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=headers,
            on_delivery=lambda err, _msg: err is not None and failures.append(err),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures, failures


def run(coro: Awaitable[T], timeout: float = 30) -> T:
    """Run a test coroutine on a fresh event loop, failing it after ``timeout`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def read_until(
    consumer: Consumer,
    done: Callable[[list[ConsumerRecord]], bool],
    timeout: float = 15,
    *partitions: TopicPartition,
) -> list[ConsumerRecord]:
    """getmany until ``done(records so far)`` or the timeout; returns the records."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while not done(records) and time.monotonic() < deadline:
        batches = await consumer.getmany(*partitions, timeout_ms=200)
        for batch in batches.values():
            records += batch
    return records


async def read_count(
    consumer: Consumer, count: int, timeout: float = 15, *partitions: TopicPartition
) -> list[ConsumerRecord]:
    return await read_until(consumer, lambda got: len(got) >= count, timeout, *partitions)
