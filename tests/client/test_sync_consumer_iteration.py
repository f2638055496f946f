"""The sync facade's ``for record in consumer``: buffered records are handed out on the
application's thread (not one trip to the loop thread per record), and every other call sees
the positions and commits of one record at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kayak.client import sync
from kayak.client.consumer import TopicPartition
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import create_topic, produce, unique

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def loop_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the sync facades waited for the loop thread."""
    trips = [0]
    run = sync.LoopThread.run

    def counted(self: sync.LoopThread, coro: Any, timeout: float | None = None) -> Any:
        trips[0] += 1
        return run(self, coro, timeout)

    monkeypatch.setattr(sync.LoopThread, "run", counted)
    yield trips


def test_iterating_takes_buffered_records_without_a_loop_trip_each(
    kayak_broker: RunningBroker, loop_trips: list[int]
) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic = unique("sync-iter")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(3000)])
    tp = TopicPartition(topic, 0)
    with sync.Consumer({"bootstrap.servers": bootstrap}) as consumer:
        trips = _iterate_from_start(consumer, tp, 3000, loop_trips)
        assert trips < 3000 // 20, trips
        assert consumer.position(tp) == 3000


def test_each_batch_costs_one_loop_trip(kayak_broker: RunningBroker, loop_trips: list[int]) -> None:
    """The record that opens a batch comes back with the rest of its batch peeked: each trip
    to the loop thread is two thread switches, and a batch used to take three."""
    bootstrap = kayak_broker.bootstrap_servers
    topic = unique("sync-trips")
    create_topic(bootstrap, topic)
    batches, per_batch = 4, 1000
    for b in range(batches):  # one flush each, a long linger: one batch each
        records = [(0, None, b"%d" % (b * per_batch + i)) for i in range(per_batch)]
        produce(bootstrap, topic, records, **{"linger.ms": 1000})
    tp = TopicPartition(topic, 0)
    with sync.Consumer({"bootstrap.servers": bootstrap}) as consumer:
        trips = _iterate_from_start(consumer, tp, batches * per_batch, loop_trips)
        assert trips <= batches, trips
        assert consumer.position(tp) == batches * per_batch


def _iterate_from_start(
    consumer: sync.Consumer, tp: TopicPartition, count: int, loop_trips: list[int]
) -> int:
    """Read ``count`` records of ``tp`` from offset 0 with ``for record in consumer``, checking
    each is the next offset with its offset as its value; the trips to the loop it took."""
    consumer.assign([tp])
    consumer.seek(tp, 0)
    before = loop_trips[0]
    offsets = []
    for record in consumer:
        offsets.append(record.offset)
        assert record.value == b"%d" % record.offset
        if len(offsets) == count:
            break
    assert offsets == list(range(count))
    return loop_trips[0] - before


def test_calls_between_records_see_one_record_at_a_time(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic, group = unique("sync-iter-calls"), unique("sync-iter-g")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(1000)])
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    with sync.Consumer(config) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records = iter(consumer)
        for expected in range(5):
            assert next(records).offset == expected
            assert consumer.position(tp) == expected + 1
        consumer.commit()
        assert consumer.committed(tp) == 5
        assert next(records).offset == 5  # nothing peeked was lost by the calls between
        consumer.seek(tp, 2)
        assert [next(records).offset for _ in range(3)] == [2, 3, 4]
        consumer.pause(tp)
        assert consumer.getmany(timeout_ms=100) == {}
        consumer.resume(tp)
        assert next(records).offset == 5
        assert consumer.position(tp) == 6


def test_auto_commit_covers_the_records_iterated_past(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic, group = unique("sync-iter-auto"), unique("sync-iter-auto-g")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(1000)])
    tp = TopicPartition(topic, 0)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 50,
        "auto.offset.reset": "earliest",
    }
    with sync.Consumer(config) as consumer:
        consumer.subscribe([topic])
        records = iter(consumer)
        while next(records).offset != 700:
            pass
        # The call settles what was handed out: 0..699 are processed, 700 is in hand.
        assert consumer.position(tp) == 701
        time.sleep(0.5)
        assert consumer.committed(tp) == 700
