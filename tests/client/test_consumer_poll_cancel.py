"""Cancelling a task blocked in a poll ends it at once and leaves the consumer usable.

Before Python 3.12 ``asyncio.wait_for`` swallows a cancel that arrives in the same loop turn
as the awaited event (python/cpython#86296); the poll's wait for data used it, so a cancel
that met an arriving Fetch response was lost and the polling task kept running.
"""

from __future__ import annotations

import asyncio
import time

from kayak.client.consumer import Consumer
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import numbered_topic, produce, read_count, run


def _data_arrives(consumer: Consumer) -> None:
    """What a Fetch response arriving does to a waiting poll (the fetcher's own signal)."""
    fetcher = consumer._fetcher
    assert fetcher is not None
    fetcher._data_ready.set()


def test_cancel_meeting_an_arriving_response_ends_the_poll(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "poll-cancel", 10)
    topic = tp.topic

    async def main() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 500})
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek_to_beginning()
            first = await read_count(consumer, 10)
            assert [r.offset for r in first] == list(range(10))
            for poll in (
                lambda: consumer.getmany(timeout_ms=10_000),
                consumer.getone,
            ):
                task = asyncio.ensure_future(poll())
                await asyncio.sleep(0.2)  # parked in the poll's wait for data
                assert not task.done()
                _data_arrives(consumer)
                task.cancel()
                cancelled_at = time.monotonic()
                await asyncio.wait({task}, timeout=1)
                assert task.done(), "the cancel was swallowed: the poll still runs"
                assert task.cancelled()
                assert time.monotonic() - cancelled_at < 0.05
            # usable: the next records arrive once, right after the ones read
            produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(10, 15)])
            rest = await read_count(consumer, 5)
            assert [r.offset for r in rest] == list(range(10, 15))
            assert await consumer.position(tp) == 15
        finally:
            await asyncio.wait_for(consumer.close(), 5)

    run(main())


def test_end_offsets_does_not_wait_behind_a_long_poll(kafka_cluster: RunningBroker) -> None:
    """A caught-up consumer has a Fetch parked at the broker for ``fetch.max.wait.ms``;
    brokers answer one connection's requests in order, so a ListOffsets must not share it."""
    bootstrap = kafka_cluster.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "poll-end-offsets", 3)

    async def main() -> list[float]:
        config = {"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 2000}
        async with Consumer(config) as consumer:
            consumer.assign([tp])
            consumer.seek_to_beginning()
            assert len(await read_count(consumer, 3)) == 3
            poller = asyncio.ensure_future(consumer.getmany(timeout_ms=30_000))
            took = []
            for _ in range(3):
                await asyncio.sleep(0.3)  # the long-poll Fetch is parked at the broker
                started = time.monotonic()
                assert await consumer.end_offsets([tp]) == {tp: 3}
                took.append(time.monotonic() - started)
            assert not poller.done()
            poller.cancel()
            await asyncio.wait({poller}, timeout=1)
            assert poller.cancelled()
            return took

    took = run(main())
    assert max(took) < 0.5, took
