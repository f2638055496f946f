"""``async for record in consumer``: one record at a time, served from the buffered fetch
without a suspension, with the positions, pauses, seeks and auto-commits of ``getone``."""

from __future__ import annotations

import asyncio

import pytest

from kayak.client.consumer import Consumer, ConsumerRecord, TopicPartition
from kayak.errors import OffsetOutOfRangeError
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import numbered_topic, run, unique

pytestmark = pytest.mark.timeout(60)


def _consumer(bootstrap: str, **config: object) -> Consumer:
    settings: dict[str, object] = {"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 100}
    settings.update({name.replace("_", "."): value for name, value in config.items()})
    return Consumer(settings)


def test_each_record_advances_the_position_by_one_and_the_loop_gets_turns(
    kayak_broker: RunningBroker,
) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "iterate", 2000)

    async def main() -> None:
        turns = 0

        async def count_turns() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        async with _consumer(bootstrap) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            offsets: list[int] = []
            counter = asyncio.create_task(count_turns())
            async for record in consumer:
                assert consumer._subscriptions.state(tp).position == record.offset + 1
                offsets.append(record.offset)
                if len(offsets) == 2000:
                    break
            counter.cancel()
            assert offsets == list(range(2000))
            assert await consumer.position(tp) == 2000
            # A record served from the buffer does not suspend, so the loop's other tasks run
            # only at the turns the consumer gives every few hundred records (and fetch waits).
            assert turns >= 2000 // 500

    run(main())


def test_a_seek_or_pause_between_records_takes_effect_on_the_next_one(
    kayak_broker: RunningBroker,
) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    tp0, tp1 = numbered_topic(bootstrap, "iterate-seek", 1000, partitions=2)

    async def main() -> None:
        async with _consumer(bootstrap) as consumer:
            consumer.assign([tp0, tp1])
            consumer.seek(tp0, 0)
            consumer.seek(tp1, 0)
            seen: list[ConsumerRecord] = []
            sought = paused = False
            async for record in consumer:
                seen.append(record)
                if record.partition == 0 and record.offset == 300 and not sought:
                    consumer.seek(tp0, 10)  # buffered records of tp0 are void now
                    sought = True
                    after_seek = len(seen)
                elif sought and not paused and record.partition == 0 and record.offset == 11:
                    consumer.pause(tp0)
                    paused = True
                    after_pause = len(seen)
                if paused and sum(r.partition == 1 for r in seen) == 500:
                    break
            tp0_after_seek = [r.offset for r in seen[after_seek:] if r.partition == 0]
            assert tp0_after_seek[:2] == [10, 11]
            assert all(r.partition == 1 for r in seen[after_pause:])
            assert await consumer.position(tp0) == 12
            assert [r.offset for r in seen if r.partition == 1] == list(range(500))

    run(main())


def test_auto_commit_covers_only_the_records_the_iteration_moved_past(
    kayak_broker: RunningBroker,
) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "iterate-commit", 1000)
    topic, group = tp.topic, unique("iterate-g")
    config = {
        "group.id": group,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 50,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6_000,
        "heartbeat.interval.ms": 200,
    }

    async def main() -> None:
        async with _consumer(bootstrap, **config) as consumer:
            consumer.subscribe([topic])
            async for record in consumer:
                if record.offset == 700:
                    break
            await asyncio.sleep(0.5)
            # offset 700 is handed out but not known to be processed until the next record
            assert await consumer.committed(tp) == 700
            nxt = await consumer.__anext__()
            assert nxt.offset == 701
            await asyncio.sleep(0.5)
            assert await consumer.committed(tp) == 701

    run(main(), timeout=50)


def test_an_error_met_between_two_records_of_one_batch_is_raised_at_the_next(
    kayak_broker: RunningBroker,
) -> None:
    """The next record of a batch being handed out is served on a short path; an error the
    fetcher met meanwhile (here: partition 1 sought past its end, with no reset policy)
    still comes first, and the record it held back is the next one after it."""
    bootstrap = kayak_broker.bootstrap_servers
    tp0, tp1 = numbered_topic(bootstrap, "iterate-error", 400, partitions=2)

    async def main() -> None:
        async with _consumer(bootstrap, auto_offset_reset="none") as consumer:
            consumer.assign([tp0, tp1])
            consumer.seek(tp0, 0)
            consumer.seek(tp1, 0)
            first = await consumer.__anext__()
            assert consumer._poll_state.fetch is not None  # the short path is what is tested
            mine = TopicPartition(first.topic, first.partition)
            other = tp1 if mine == tp0 else tp0
            consumer.seek(other, 10_000)
            await asyncio.sleep(0.5)  # the fetch from 10,000 is answered meanwhile
            with pytest.raises(OffsetOutOfRangeError):
                await consumer.__anext__()
            consumer.seek(other, 0)
            after = await consumer.__anext__()
            assert (after.partition, after.offset) == (first.partition, first.offset + 1)

    run(main())
