"""ListOffsets by timestamp after DeleteRecords: the first record at or after the log start
offset whose timestamp is at or after the one asked, as Apache Kafka answers.

Timestamps need not rise with offsets (CreateTime is the producer's clock). When the first
batch holding a late enough timestamp lies below the log start, its matching records are
deleted: the answer is further on (Spark's Kafka source found this with
``startingOffsetsByTimestamp``; tests/jvm/test_spark_kafka.py runs it against both brokers).
A real broker in-process, kayak's admin and producer over a socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kayak.broker import Broker
from kayak.client import Admin, NewTopic, OffsetSpec, Producer, TopicPartition
from kayak.client.admin import OffsetAndTimestamp

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000_000
# Offset 3 is stamped far ahead of its neighbours; 10 and 11 come later still.
STAMPS = [T0 + i * 1000 for i in range(10)]
STAMPS[3] = T0 + 50_000
STAMPS += [T0 + 60_000, T0 + 61_000]


def run(tmp_path: Path, scenario: Callable[[str], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            await scenario(f"127.0.0.1:{broker.port}")

    asyncio.run(asyncio.wait_for(main(), 45))


async def fill(bootstrap: str, topic: str, *, one_batch_until: int) -> None:
    """The records of STAMPS: offsets below ``one_batch_until`` in one batch, the rest one
    batch each."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=50) as producer:
        together = [
            await producer.send(topic, b"v%d" % n, partition=0, timestamp=STAMPS[n])
            for n in range(one_batch_until)
        ]
        await producer.flush()
        for future in together:
            await future
        for n in range(one_batch_until, len(STAMPS)):
            await producer.send_and_wait(topic, b"v%d" % n, partition=0, timestamp=STAMPS[n])


async def lookups(bootstrap: str, one_batch_until: int) -> dict[int, OffsetAndTimestamp]:
    tp = TopicPartition("times", 0)
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic("times", 1, 1)])
        await fill(bootstrap, "times", one_batch_until=one_batch_until)
        assert await admin.delete_records({tp: 5}) == {tp: 5}
        found = {}
        for target in (T0, T0 + 7000, T0 + 40_000, T0 + 61_000, T0 + 62_000):
            answer = await admin.list_offsets({tp: OffsetSpec.timestamp(target)})
            found[target] = answer[tp]
        return found


EXPECTED = {
    T0: OffsetAndTimestamp(5, T0 + 5000),  # the log start, not deleted offset 0
    T0 + 7000: OffsetAndTimestamp(7, T0 + 7000),
    T0 + 40_000: OffsetAndTimestamp(10, T0 + 60_000),  # not 5: offset 3 is deleted
    T0 + 61_000: OffsetAndTimestamp(11, T0 + 61_000),
    T0 + 62_000: OffsetAndTimestamp(-1, -1),
}


@pytest.mark.parametrize("one_batch_until", [0, 10], ids=["batch-each", "log-start-mid-batch"])
def test_lookup_by_time_skips_records_below_the_log_start(
    tmp_path: Path, one_batch_until: int
) -> None:
    found: dict[int, OffsetAndTimestamp] = {}

    async def scenario(bootstrap: str) -> None:
        found.update(await lookups(bootstrap, one_batch_until))

    run(tmp_path, scenario)
    assert found == EXPECTED
