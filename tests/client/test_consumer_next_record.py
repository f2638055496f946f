"""``async for`` through the C extension's ``RecordIterator`` (``_next_record.c``): it takes the
next record of the batch being handed out itself and hands every other case to the consumer's
``__anext__``. Checked against that Python reference record by record, on kayak's broker and
Apache Kafka: the same records in the same order, the same positions and processed positions,
the event loop's turns, errors, seeks, pauses, polls mixed in, closing, and group liveness."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kayak.client.consumer import Consumer, ConsumerRecord, TopicPartition
from kayak.client.consumer.native import next_record
from kayak.errors import KayakError, OffsetOutOfRangeError
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import create_topic, numbered_topic, produce, run, unique

pytestmark = pytest.mark.timeout(120)

RECORDS = 6_000
PARTITIONS = 3


def _consumer(bootstrap: str, **config: object) -> Consumer:
    settings: dict[str, object] = {"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 100}
    settings.update(config)
    return Consumer(settings)


def test_the_c_extension_is_built() -> None:
    """``make test`` installs kayak with its extensions: the C path is what the tests below
    exercise (each would also pass on the Python path, so this guards against testing it
    alone)."""
    assert next_record is not None
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1"})
    assert type(consumer.__aiter__()) is next_record.RecordIterator


Step = tuple[int, int, int | None, int | None]  # partition, offset, its position, processed


async def _read(
    consumer: Consumer, tps: list[TopicPartition], count: int, take: Callable[[], Awaitable[object]]
) -> list[Step]:
    steps: list[Step] = []
    while len(steps) < count:
        record = await take()
        assert isinstance(record, ConsumerRecord)
        state = consumer._subscriptions.state(TopicPartition(record.topic, record.partition))
        previous = [consumer._subscriptions.state(tp).processed for tp in tps]
        steps.append(
            (record.partition, record.offset, state.position, max(p or 0 for p in previous))
        )
    return steps


def test_async_for_hands_out_what_anext_does_with_the_same_positions(
    kafka_cluster: RunningBroker,
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    tps = numbered_topic(bootstrap, "next-record", RECORDS, partitions=PARTITIONS)

    async def read(use_iterator: bool) -> tuple[list[Step], int]:
        async with _consumer(bootstrap) as consumer:
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            delegated = 0
            python_anext = consumer.__anext__

            def counted() -> Awaitable[ConsumerRecord]:
                nonlocal delegated
                delegated += 1
                return python_anext()

            # The C iterator calls the instance's __anext__ for what it leaves to Python.
            consumer.__anext__ = counted  # type: ignore[method-assign]
            if use_iterator:
                iterator = consumer.__aiter__()
                steps = await _read(consumer, tps, RECORDS, iterator.__anext__)
            else:
                steps = await _read(consumer, tps, RECORDS, python_anext)
            return steps, delegated

    through_c, delegated = run(read(True), timeout=100)
    through_python, _ = run(read(False), timeout=100)
    assert [step[:2] for step in through_c] == [step[:2] for step in through_python]
    for tp in tps:
        offsets = [offset for partition, offset, _, _ in through_c if partition == tp.partition]
        assert offsets == list(range(RECORDS // PARTITIONS))
    # Each record moves its partition's position just past it.
    assert all(position == offset + 1 for _, offset, position, _ in through_c)
    # What was processed (the previous record) is the same on both paths, step by step.
    assert [step[3] for step in through_c] == [step[3] for step in through_python]
    # The usual case is the C path's own: Python sees batch ends and the loop's turns only.
    assert delegated < RECORDS // 10, delegated


def test_the_event_loop_gets_a_turn_every_few_hundred_records(kayak_broker: RunningBroker) -> None:
    """Within one large batch, all of it buffered, the C path gives the loop its turn (through
    the consumer's ``__anext__``) every 500 records, as ``getone`` does."""
    bootstrap = kayak_broker.bootstrap_servers
    topic = unique("next-record-turns")
    create_topic(bootstrap, topic)
    big_batches = {"batch.size": 1_000_000, "linger.ms": 500}
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(20_000)], **big_batches)
    tp = TopicPartition(topic, 0)

    async def main() -> list[int]:
        seen = 0
        at_turns: list[int] = []

        async def watch() -> None:
            while True:
                at_turns.append(seen)
                await asyncio.sleep(0)

        async with _consumer(bootstrap) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            iterator = consumer.__aiter__()
            await iterator.__anext__()
            await asyncio.sleep(1)  # the rest arrives meanwhile
            seen = 1
            watcher = asyncio.create_task(watch())
            await asyncio.sleep(0)
            async for _record in iterator:
                seen += 1
                if seen == 20_000:
                    break
            watcher.cancel()
        return at_turns

    at_turns = run(main())
    gaps = [later - earlier for earlier, later in itertools.pairwise(at_turns)]
    assert max(gaps) <= 1_001, max(gaps)  # the C path's 500, and at most 500 more from Python's


def test_an_error_between_two_records_comes_first_in_async_for(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    tp0, tp1 = numbered_topic(bootstrap, "next-record-error", 2_000, partitions=2)

    async def main() -> None:
        async with _consumer(bootstrap, **{"auto.offset.reset": "none"}) as consumer:
            consumer.assign([tp0, tp1])
            consumer.seek(tp0, 0)
            consumer.seek(tp1, 0)
            iterator = consumer.__aiter__()
            first = await iterator.__anext__()
            second = await iterator.__anext__()
            assert (second.partition, second.offset) == (first.partition, first.offset + 1)
            mine = TopicPartition(first.topic, first.partition)
            other = tp1 if mine == tp0 else tp0
            consumer.seek(other, 10_000)
            await asyncio.sleep(0.5)  # the fetch from 10,000 is answered meanwhile
            with pytest.raises(OffsetOutOfRangeError):
                await iterator.__anext__()
            consumer.seek(other, 0)
            after = await iterator.__anext__()
            assert (after.partition, after.offset) == (first.partition, first.offset + 2)

    run(main())


@pytest.mark.parametrize("where", ["fetch errors, appended", "position lookup", "group"])
def test_an_error_set_after_records_were_taken_is_seen_by_the_next_record(
    kayak_broker: RunningBroker, where: str
) -> None:
    """The C path reads the error attributes again only when their object's dict changed, so
    an error set in place (appended to the fetcher's list) or assigned after several records
    went through it must still stop the next one."""
    bootstrap = kayak_broker.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "next-record-late-error", 1_000)

    async def main() -> None:
        config: dict[str, object] = {}
        if where == "group":
            config = {"group.id": unique("late-error"), "auto.offset.reset": "earliest"}
        async with _consumer(bootstrap, **config) as consumer:
            if where == "group":
                consumer.subscribe([tp.topic])
            else:
                consumer.assign([tp])
                consumer.seek(tp, 0)
            iterator = consumer.__aiter__()
            taken = [await iterator.__anext__() for _ in range(5)]
            assert [r.offset for r in taken[1:]] == [taken[0].offset + i for i in range(1, 5)]
            failure = KayakError(f"injected: {where}")
            if where == "fetch errors, appended":
                consumer._fetcher._errors.append(failure)  # the same list object
            elif where == "position lookup":
                consumer._positions._error = failure
            else:
                consumer._group.error = failure
            with pytest.raises(KayakError, match="injected"):
                await iterator.__anext__()

    run(main())


def test_polls_seeks_and_pauses_between_records_keep_the_order(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    tp0, tp1 = numbered_topic(bootstrap, "next-record-mixed", 4_000, partitions=2)

    async def main() -> None:
        async with _consumer(bootstrap) as consumer:
            consumer.assign([tp0, tp1])
            consumer.seek(tp0, 0)
            consumer.seek(tp1, 0)
            offsets: dict[int, list[int]] = {0: [], 1: []}
            count = 0
            sought = False
            async for record in consumer:
                offsets[record.partition].append(record.offset)
                count += 1
                if count % 7 == 0:  # a poll in between takes the next records of any partition
                    for tp, batch in (await consumer.getmany(max_records=3)).items():
                        offsets[tp.partition] += [r.offset for r in batch]
                if record.partition == 1 and record.offset >= 500 and not sought:
                    consumer.seek(tp1, 100)  # read 100.. again
                    offsets[1] = [o for o in offsets[1] if o < 100]
                    sought = True
                if sum(map(len, offsets.values())) >= 4_000 - 2:
                    break
            # Every partition's records in order, none skipped, none twice.
            for partition, seen in offsets.items():
                assert seen == list(range(len(seen))), partition
            consumer.pause(tp0)
            paused_at = await consumer.position(tp0)
            async for record in consumer:
                assert record.partition == 1
                if record.offset == 1_999:
                    break
            assert await consumer.position(tp0) == paused_at

    run(main(), timeout=60)


def test_closing_in_the_loop_ends_it(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "next-record-close", 2_000)

    async def main() -> int:
        consumer = _consumer(bootstrap)
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen = 0
        async for _record in consumer:
            seen += 1
            if seen == 10:
                await consumer.close()
        return seen

    assert run(main()) == 10


def test_iterating_an_unstarted_consumer_raises() -> None:
    async def main() -> None:
        consumer = Consumer({"bootstrap.servers": "127.0.0.1:1"})
        with pytest.raises(KayakError, match="not started"):
            async for _record in consumer:
                pass

    run(main())


def test_a_ready_record_is_awaited_once(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    (tp,) = numbered_topic(bootstrap, "next-record-once", 100)

    async def main() -> None:
        async with _consumer(bootstrap) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            iterator = consumer.__aiter__()
            await iterator.__anext__()  # the first comes through Python (nothing handed out)
            pending = iterator.__anext__()
            held = iterator.__anext__()  # taken while the first is not awaited yet
            assert (await pending).offset == 1
            assert (await held).offset == 2
            with pytest.raises(RuntimeError, match="already awaited"):
                await pending

    run(main())


def test_group_liveness_holds_while_async_for_runs_longer_than_max_poll_interval(
    kayak_broker: RunningBroker,
) -> None:
    """``max.poll.interval.ms`` counts from the last record handed out: a loop that takes
    longer in all than the interval, but never that long between records, keeps its member."""
    bootstrap = kayak_broker.bootstrap_servers
    topic = unique("next-record-live")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"v")] * 400, **{"batch.size": 1_000_000})
    config = {
        "group.id": unique("next-record-g"),
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": 1_000,
        "session.timeout.ms": 6_000,
        "heartbeat.interval.ms": 200,
    }

    async def main() -> None:
        async with _consumer(bootstrap, **config) as consumer:
            consumer.subscribe([topic])
            seen = 0
            async for _record in consumer:
                seen += 1
                if seen == 1:
                    generation = consumer._group.generation  # type: ignore[union-attr]
                await asyncio.sleep(0.01)  # 300 records: 3 s, three intervals
                if seen == 300:
                    break
            group = consumer._group
            assert group is not None and group.error is None
            assert group.generation == generation

    run(main(), timeout=60)


def test_without_the_extension_the_consumer_iterates_itself() -> None:
    code = (
        "from kayak.client.consumer import Consumer\n"
        "from kayak.client.consumer.native import next_record\n"
        "c = Consumer({'bootstrap.servers': '127.0.0.1:1'})\n"
        "assert next_record is None and c.__aiter__() is c\n"
    )
    env = {**os.environ, "KAYAK_PURE_PYTHON": "1"}
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root, timeout=60)


def test_a_record_iterator_refuses_what_it_cannot_run() -> None:
    assert next_record is not None
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ValueError, match="yield_every"):
        next_record.RecordIterator(consumer, 0)
    with pytest.raises(TypeError):
        next_record.RecordIterator(consumer, "500")  # type: ignore[arg-type]
    bare = next_record.RecordIterator.__new__(next_record.RecordIterator)
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        bare.__anext__()
