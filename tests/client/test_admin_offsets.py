"""ListOffsets and DeleteRecords through the admin client, against kayak's broker, Tansu and
Apache Kafka, cross-checked with confluent-kafka's watermarks and timestamp lookups.

Tansu drops the connection on a MAX_TIMESTAMP lookup and never answers DeleteRecords (both
are in its ApiVersions): asserted below as the timeouts they become.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TheirPartition

from kayak.client.admin import Admin, NewTopic, OffsetAndTimestamp, OffsetSpec, TopicPartition
from kayak.errors import KafkaTimeoutError, KayakError, UnknownTopicOrPartitionError
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
T0 = 1_700_000_000_000  # record i of each partition is stamped T0 + i seconds
RECORDS = 6


def run(bootstrap: str, scenario: Callable[[Admin], Awaitable[T]]) -> T:
    async def main() -> T:
        config = {"request_timeout_ms": 5000, "default_api_timeout_ms": 10000}
        async with Admin(bootstrap_servers=bootstrap, **config) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 45))


def produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(partitions):
        for i in range(RECORDS):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p, timestamp=T0 + i * 1000)
    assert producer.flush(15) == 0


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TheirPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def offset_for_time(bootstrap: str, topic: str, partition: int, ms: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        (found,) = consumer.offsets_for_times([TheirPartition(topic, partition, ms)], timeout=10)
        return int(found.offset)
    finally:
        consumer.close()


def test_list_offsets_matches_confluent(any_broker: RunningBroker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic = f"offs-{uuid.uuid4().hex[:6]}"
    run(bootstrap, lambda admin: admin.create_topics([NewTopic(topic, 2, 1)]))
    produce(bootstrap, topic, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    at_3s = OffsetSpec.timestamp(T0 + 2500)

    async def scenario(admin: Admin) -> list[dict[TopicPartition, OffsetAndTimestamp]]:
        return [
            await admin.list_offsets({tp0: OffsetSpec.EARLIEST, tp1: OffsetSpec.EARLIEST}),
            await admin.list_offsets({tp0: OffsetSpec.LATEST, (topic, 1): OffsetSpec.LATEST}),
            await admin.list_offsets({tp0: at_3s, tp1: OffsetSpec.timestamp(T0 + 999_999)}),
        ]

    earliest, latest, by_time = run(bootstrap, scenario)
    for tp in (tp0, tp1):
        assert (earliest[tp].offset, latest[tp].offset) == watermarks(bootstrap, topic, tp[1])
    assert by_time[tp0].offset == offset_for_time(bootstrap, topic, 0, T0 + 2500)
    if any_broker.kind != "tansu":
        assert latest[tp0].offset == latest[tp1].offset == RECORDS
        assert by_time[tp0] == (3, T0 + 3000)  # first record at or after T0 + 2.5 s
        assert by_time[tp1].offset == -1  # nothing that late
    else:
        # Tansu (memory storage) moves the high watermark by one per batch, not per record,
        # and answers timestamp lookups with offset 0; confluent sees the same (above).
        assert latest[tp0].offset < RECORDS

    async def max_timestamp(admin: Admin) -> dict[TopicPartition, OffsetAndTimestamp]:
        return await admin.list_offsets({tp0: OffsetSpec.MAX_TIMESTAMP}, timeout_ms=1500)

    if any_broker.kind == "tansu":
        with pytest.raises(KafkaTimeoutError, match=f"{topic}-0: list offsets did not succeed"):
            run(bootstrap, max_timestamp)
    else:
        assert run(bootstrap, max_timestamp)[tp0] == (RECORDS - 1, T0 + (RECORDS - 1) * 1000)


def test_list_offsets_errors_name_the_partition(any_broker: RunningBroker) -> None:
    topic = f"errs-{uuid.uuid4().hex[:6]}"

    async def scenario(admin: Admin) -> dict[TopicPartition, KayakError]:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{topic}-7: .*no partition 7"):
            await admin.list_offsets({TopicPartition(topic, 7): OffsetSpec.LATEST})
        errors: dict[TopicPartition, KayakError] = {}
        found = await admin.list_offsets(
            {TopicPartition(topic, 0): -1, TopicPartition("no-such", 0): -1}, errors=errors
        )
        assert found == {TopicPartition(topic, 0): OffsetAndTimestamp(0, -1)}
        return errors

    errors = run(any_broker.bootstrap_servers, scenario)
    assert list(errors) == [TopicPartition("no-such", 0)]
    assert "no-such-0: topic 'no-such' does not exist" in str(errors[TopicPartition("no-such", 0)])


def test_delete_records(any_broker: RunningBroker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic = f"trunc-{uuid.uuid4().hex[:6]}"
    run(bootstrap, lambda admin: admin.create_topics([NewTopic(topic, 2, 1)]))
    produce(bootstrap, topic, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def scenario(admin: Admin) -> dict[TopicPartition, int]:
        return await admin.delete_records({tp0: 4, tp1: -1}, timeout_ms=2000)

    if any_broker.kind == "tansu":
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=f"{topic}-0: delete records did not"):
            run(bootstrap, scenario)
        assert time.monotonic() - started < 10
        return
    assert run(bootstrap, scenario) == {tp0: 4, tp1: RECORDS}  # -1: up to the high watermark
    assert watermarks(bootstrap, topic, 0) == (4, RECORDS)
    assert watermarks(bootstrap, topic, 1) == (RECORDS, RECORDS)
