"""``Producer.produce``: per-record delivery callbacks without a future per record, against
kayak's broker and Apache Kafka (``kafka_cluster``); what is stored is read back by
confluent-kafka. The blocking facade's confluent-kafka-style ``produce``/``poll``/``flush``
is in ``test_producer_produce_sync.py``."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kayak.client.consumer import TopicPartition
from kayak.client.producer import Producer, RecordMetadata
from kayak.client.producer.batch import DeliveryCallback
from kayak.client.producer.errors import BufferFullError, ProducerClosedError
from kayak.errors import (
    KafkaTimeoutError,
    KayakError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from tests.client.conftest import RunningBroker
from tests.client.test_producer_support import (
    Stoppable,
    create_topic,
    read_back,
    run,
    stoppable_broker,
    unique,
)
from tests.client.test_transactions import read_all, values

pytestmark = pytest.mark.timeout(90)
__all__ = ["stoppable_broker"]  # the fixture, imported to be found

Report = tuple[BaseException | None, RecordMetadata]


class Reports:
    """Delivery callbacks by name: each records every call it gets."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Report]] = {}

    def callback(self, name: str) -> DeliveryCallback:
        calls = self.calls.setdefault(name, [])

        def on_delivery(error: BaseException | None, metadata: RecordMetadata) -> None:
            calls.append((error, metadata))

        return on_delivery

    def only(self, name: str) -> Report:
        calls = self.calls[name]
        assert len(calls) == 1, f"{name}: called {len(calls)} times"
        return calls[0]


def test_every_record_is_reported_once_in_order_per_partition(
    kafka_cluster: RunningBroker,
) -> None:
    """Keyless, keyed, headers, explicit partitions, records without a callback and send()
    futures in the same batches: every callback runs once, with the offset the record was
    stored at (confluent-kafka reads the same), in produce order per partition."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce"), 3)
    reports = Reports()
    futures: dict[str, asyncio.Future[RecordMetadata]] = {}
    order: list[str] = []

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap}, linger_ms=20) as producer:
            for i in range(600):
                name = f"r{i}"
                key = None if i % 3 == 0 else b"key-%d" % (i % 7)
                partition = 2 if i % 10 == 5 else None
                headers = [("n", b"%d" % i)] if i % 4 == 1 else None
                if i % 11 == 3:
                    futures[name] = await producer.send(
                        topic, name.encode(), key=key, partition=partition, headers=headers
                    )
                elif i % 13 == 4:
                    producer.produce(topic, name.encode(), key=key, partition=partition)
                else:
                    producer.produce(
                        topic, name.encode(), key=key, headers=headers, partition=partition,
                        timestamp=1_700_000_000_000 + i, on_delivery=reports.callback(name),
                    )  # fmt: skip
                order.append(name)
                if i % 150 == 149:
                    await asyncio.sleep(0.005)  # let batches leave in between
            await producer.flush()

    run(main(), 60)
    stored = read_back(bootstrap, topic, 3, len(order))
    assert len(stored) == len(order)
    where = {s.value.decode(): (s.partition, s.offset, s.timestamp) for s in stored if s.value}
    by_partition: dict[int, list[int]] = {}
    for i, name in enumerate(order):
        partition, offset, timestamp = where[name]
        by_partition.setdefault(partition, []).append(offset)
        if name in futures:
            metadata = futures[name].result()
        elif name in reports.calls:
            error, metadata = reports.only(name)
            assert error is None
            assert metadata.timestamp == timestamp == 1_700_000_000_000 + i
        else:
            continue
        assert (metadata.topic, metadata.partition, metadata.offset) == (topic, partition, offset)
    for offsets in by_partition.values():  # stored in produce order, per partition
        assert offsets == sorted(offsets)
    assert len(reports.calls) == sum(1 for i in range(600) if i % 11 != 3 and i % 13 != 4)


def test_refused_records_raise_and_broker_errors_reach_the_callback(
    kafka_cluster: RunningBroker,
) -> None:
    """What produce() can tell at once it raises (too large, no such partition, not bytes);
    what the broker refuses (MESSAGE_TOO_LARGE from the topic's max.message.bytes) reaches
    the record's callback with offset -1, and the records around it are stored."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("produce-refused")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"max.message.bytes": "2000"})])[
        topic
    ].result(15)
    reports = Reports()

    async def main() -> None:
        producer = Producer({"bootstrap.servers": bootstrap}, max_request_size=10_000)
        with pytest.raises(ProducerClosedError, match="not started"):
            producer.produce(topic, b"early")
        await producer.start()
        await producer.partitions_for(topic)
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
            producer.produce(topic, bytes(20_000), on_delivery=reports.callback("huge"))
        with pytest.raises(ValueError, match="2 partitions"):
            producer.produce(topic, b"v", partition=2, on_delivery=reports.callback("p2"))
        with pytest.raises(TypeError, match="encode"):
            producer.produce(topic, "text", on_delivery=reports.callback("text"))  # type: ignore[arg-type]
        assert producer._memory.used == 0  # nothing charged for what was refused
        producer.produce(topic, b"before", partition=0, on_delivery=reports.callback("before"))
        await producer.flush()
        producer.produce(topic, bytes(5000), partition=0, on_delivery=reports.callback("big"))
        await producer.flush()
        producer.produce(topic, b"after", partition=1, on_delivery=reports.callback("after"))
        await producer.close()
        with pytest.raises(ProducerClosedError):
            producer.produce(topic, b"late")

    run(main(), 60)
    assert set(reports.calls) == {"huge", "p2", "text", "before", "big", "after"}
    assert not reports.calls["huge"] and not reports.calls["p2"] and not reports.calls["text"]
    error, metadata = reports.only("big")
    assert isinstance(error, RecordTooLargeError)
    assert (metadata.topic, metadata.partition, metadata.offset) == (topic, 0, -1)
    assert reports.only("before")[0] is None and reports.only("before")[1].offset == 0
    assert reports.only("after")[0] is None and reports.only("after")[1].partition == 1


def test_a_topic_not_known_yet_queues_its_records_until_its_metadata_comes(
    kafka_cluster: RunningBroker,
) -> None:
    """produce() to a topic the producer has no metadata for does not fail: the records wait
    (in order, ahead of later ones) and are delivered; a topic that does not exist fails each
    record's callback after max.block.ms. A callback that raises is logged; the rest run."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce-later"), 1)
    reports = Reports()

    def raising(error: BaseException | None, metadata: RecordMetadata) -> None:
        raise RuntimeError("a callback that raises")

    async def main() -> float:
        async with Producer(
            {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False}, max_block_ms=800
        ) as producer:
            for i in range(50):
                callback = raising if i == 7 else reports.callback(f"r{i}")
                producer.produce(topic, b"%d" % i, on_delivery=callback)  # type: ignore[arg-type]
            missing = unique("no-such-topic")
            start = time.monotonic()
            producer.produce(missing, b"lost", on_delivery=reports.callback("missing"))
            producer.produce(missing, b"lost too", on_delivery=reports.callback("missing2"))
            await producer.flush()
            assert producer._memory.used == 0
            return time.monotonic() - start

    waited = run(main(), 60)
    assert 0.7 < waited < 5
    offsets = [reports.only(f"r{i}")[1].offset for i in range(50) if i != 7]
    assert offsets == [i for i in range(50) if i != 7]
    for name in ("missing", "missing2"):
        error, metadata = reports.only(name)
        assert isinstance(error, UnknownTopicOrPartitionError)
        assert metadata.offset == -1
    stored = read_back(bootstrap, topic, 1, 50)
    assert [s.value for s in stored] == [b"%d" % i for i in range(50)]


def test_a_callback_that_raises_is_logged_and_the_others_still_run(
    kafka_cluster: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce-raise"), 1)
    seen: list[int] = []

    def on_delivery(error: BaseException | None, metadata: RecordMetadata) -> None:
        seen.append(metadata.offset)
        if metadata.offset % 10 == 3:
            raise RuntimeError(f"callback failed at {metadata.offset}")

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap}) as producer:
            await producer.partitions_for(topic)
            for i in range(40):
                producer.produce(topic, b"%d" % i, on_delivery=on_delivery)
            await producer.flush()

    with caplog.at_level(logging.ERROR, logger="kayak.client.producer.batch"):
        run(main(), 60)
    assert seen == list(range(40))
    assert sum("a delivery callback raised" in r.message for r in caplog.records) == 4


def test_buffer_full_raises_at_once_and_clears_once_the_loop_runs(
    kafka_cluster: RunningBroker,
) -> None:
    """produce() never waits: with buffer.memory full it raises BufferFullError (a
    BufferError, as confluent-kafka's); after a flush there is room again. Nothing accepted
    is lost."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce-full"), 1)
    limit = 32 * 1024
    reports = Reports()

    async def main() -> int:
        async with Producer(
            {"bootstrap.servers": bootstrap}, buffer_memory=limit, linger_ms=1000
        ) as producer:
            await producer.partitions_for(topic)
            accepted = 0
            start = time.monotonic()
            with pytest.raises(BufferError, match=r"buffer\.memory"):
                for i in range(10_000):
                    producer.produce(
                        topic, b"%06d" % i + bytes(100), on_delivery=reports.callback("r")
                    )
                    accepted += 1
            assert time.monotonic() - start < 0.5  # raised, not waited
            assert producer._memory.used <= limit
            with pytest.raises(BufferFullError):
                producer.produce(topic, b"still full")
            await producer.flush()
            for i in range(accepted, accepted + 10):
                producer.produce(topic, b"%06d" % i + bytes(100), on_delivery=reports.callback("r"))
            await producer.flush()
            assert producer._memory.used == 0
            return accepted + 10

    accepted = run(main(), 60)
    assert 100 < accepted < limit // 100
    calls = reports.calls["r"]
    assert [m.offset for e, m in calls] == list(range(accepted))
    assert all(e is None for e, _ in calls)


def test_close_reports_records_it_could_not_deliver(stoppable_broker: Stoppable) -> None:
    """close() delivers what produce() buffered (callbacks called before it returns); with the
    broker gone, records still buffered after the close timeout fail their callbacks."""
    broker = stoppable_broker
    topic = create_topic(broker.bootstrap_servers, unique("produce-close"), 1)
    reports = Reports()

    async def main() -> None:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers},
            linger_ms=10_000,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=200,
        )
        await producer.start()
        await producer.partitions_for(topic)
        producer.produce(topic, b"delivered", on_delivery=reports.callback("delivered"))
        await producer.flush()
        for i in range(20):
            producer.produce(topic, b"stranded-%d" % i, on_delivery=reports.callback("stranded"))
        broker.kill()
        await producer.close(timeout=1.5)

    run(main(), 30)
    assert reports.only("delivered")[0] is None
    stranded = reports.calls["stranded"]
    assert len(stranded) == 20
    assert all(
        isinstance(e, KafkaTimeoutError) and "producer closed" in str(e) for e, _ in stranded
    )
    assert all(m.offset == -1 and m.partition == 0 for _, m in stranded)


def test_close_delivers_what_was_produced(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce-closing"), 1)
    reports = Reports()

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap}, linger_ms=10_000) as producer:
            for i in range(100):  # the first records wait for the topic's metadata
                producer.produce(topic, b"%d" % i, on_delivery=reports.callback("r"))

    run(main(), 30)
    assert [(e, m.offset) for e, m in reports.calls["r"]] == [(None, i) for i in range(100)]


def test_records_of_a_deleted_topic_fail_their_callbacks(kafka_cluster: RunningBroker) -> None:
    """A topic deleted under the producer: its records fail (the broker's error, or the
    delivery timeout while the metadata says the topic is gone), each callback once."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("produce-deleted"), 1)
    reports = Reports()

    async def main() -> None:
        async with Producer(
            {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False},
            linger_ms=0,
            request_timeout_ms=1000,
            delivery_timeout_ms=3000,
            metadata_max_age_ms=500,
        ) as producer:
            producer.produce(topic, b"before", on_delivery=reports.callback("before"))
            await producer.flush()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.delete_topics([topic])[topic].result(15)
            await asyncio.sleep(1.0)
            for i in range(10):
                producer.produce(topic, b"after-%d" % i, on_delivery=reports.callback("after"))
            await producer.flush(timeout=20)

    run(main(), 40)
    error, metadata = reports.only("before")
    assert error is None and (metadata.partition, metadata.offset) == (0, 0)
    after = reports.calls["after"]
    assert len(after) == 10
    assert all(isinstance(e, KayakError) and m.offset == -1 for e, m in after), after[0]


def test_idempotent_and_transactional_produce(kafka_cluster: RunningBroker) -> None:
    """produce() with idempotence (sequences), and in transactions: commit delivers the
    produce()d records first (those waiting for metadata too) and makes them visible; an
    abort fails the records not sent yet."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("produce-txn")
    create_topic(bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    reports = Reports()

    async def main() -> None:
        async with Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": unique("tx")}, linger_ms=5_000
        ) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            for i in range(30):  # long linger: the commit itself must send them
                producer.produce(topic, b"c%d" % i, on_delivery=reports.callback("committed"))
            await producer.commit_transaction()
            assert [m.offset for _, m in reports.calls["committed"]] == list(range(30))
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, b"a%d" % i, on_delivery=reports.callback("aborted"))
            await producer.abort_transaction()
        async with Producer({"bootstrap.servers": bootstrap}, enable_idempotence=True) as plain:
            assert plain._idempotence is not None
            for i in range(20):
                plain.produce(topic, b"i%d" % i, on_delivery=reports.callback("idempotent"))
            await plain.flush()
        got, _ = await read_all(bootstrap, "read_committed", [tp], 57)
        assert values(got) == [b"c%d" % i for i in range(30)] + [b"i%d" % i for i in range(20)]

    run(main(), 60)
    aborted = reports.calls["aborted"]
    assert len(aborted) == 5 and all(e is not None and m.offset == -1 for e, m in aborted)
    idempotent = reports.calls["idempotent"]
    assert [e for e, _ in idempotent] == [None] * 20
    offsets = [m.offset for _, m in idempotent]
    assert offsets == list(range(offsets[0], offsets[0] + 20))


def test_close_fails_records_still_waiting_for_metadata(kafka_cluster: RunningBroker) -> None:
    """Records for a topic whose metadata never comes, closed with a short timeout: each
    callback hears of it (ProducerClosedError), none is left unanswered, memory is returned."""
    bootstrap = kafka_cluster.bootstrap_servers
    reports = Reports()

    async def main() -> None:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False}, max_block_ms=30_000
        )
        await producer.start()
        missing = unique("never-created")
        for i in range(5):
            producer.produce(missing, b"%d" % i, on_delivery=reports.callback("waiting"))
        start = time.monotonic()
        await producer.close(timeout=0.5)
        assert time.monotonic() - start < 5
        assert producer._memory.used == 0

    run(main(), 30)
    waiting = reports.calls["waiting"]
    assert len(waiting) == 5
    assert all(isinstance(e, ProducerClosedError) and m.offset == -1 for e, m in waiting)
