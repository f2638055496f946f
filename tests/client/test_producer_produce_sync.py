"""The blocking facade's confluent-kafka-style ``produce``/``poll``/``flush``: delivery
callbacks run in the caller's thread, against kayak's broker and Apache Kafka."""

from __future__ import annotations

import threading

import pytest

from kayak.client import sync
from kayak.client.consumer import TopicPartition
from kayak.client.producer import RecordMetadata
from kayak.client.producer.batch import DeliveryCallback
from kayak.client.producer.errors import ProducerClosedError
from kayak.client.producer.threaded import OUTBOX_LIMIT
from kayak.errors import RecordTooLargeError
from tests.client.conftest import RunningBroker
from tests.client.test_producer_support import create_topic, read_back, run, unique
from tests.client.test_transactions import read_all, values

pytestmark = pytest.mark.timeout(90)

Call = tuple[int, BaseException | None, RecordMetadata]


def recorder() -> tuple[list[Call], DeliveryCallback]:
    calls: list[Call] = []

    def on_delivery(error: BaseException | None, metadata: RecordMetadata) -> None:
        calls.append((threading.get_ident(), error, metadata))

    return calls, on_delivery


def test_callbacks_run_in_the_callers_thread_in_poll_and_flush(
    kafka_cluster: RunningBroker,
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("sync-produce"), 2)
    calls, on_delivery = recorder()
    me = threading.get_ident()
    with sync.Producer({"bootstrap.servers": bootstrap}, linger_ms=5) as producer:
        producer.produce(topic, b"first", partition=0, on_delivery=on_delivery)
        # Nothing runs a callback behind the caller's back: only poll() does.
        served = 0
        for _ in range(100):
            served += producer.poll(0.1)
            if served:
                break
        assert served == 1 and len(calls) == 1
        for i in range(5000):
            producer.produce(
                topic, b"%d" % i, key=b"k%d" % (i % 5), headers=[("i", b"%d" % i)],
                on_delivery=on_delivery,
            )  # fmt: skip
        producer.produce(topic, b"no callback")
        producer.flush()
        assert len(calls) == 5001  # flush served the rest
        assert producer.poll(0) == 0
        # Refused on the loop (too large, no such partition): the callback says so.
        producer.produce(topic, bytes(2_000_000), on_delivery=on_delivery)
        producer.produce(topic, b"v", partition=7, on_delivery=on_delivery)
        producer.flush()
    assert all(thread == me for thread, _, _ in calls)
    assert all(error is None for _, error, _ in calls[:5001])
    too_large, no_partition = calls[5001][1], calls[5002][1]
    assert isinstance(too_large, RecordTooLargeError)
    assert isinstance(no_partition, ValueError) and calls[5002][2].partition == 7
    stored = read_back(bootstrap, topic, 2, 5002)
    where = {(s.partition, s.offset): s.value for s in stored}
    for _, _, metadata in calls[:5001]:
        assert (metadata.partition, metadata.offset) in where
    by_partition: dict[int, list[int]] = {}
    for _, _, metadata in calls[1:5001]:
        by_partition.setdefault(metadata.partition, []).append(metadata.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_more_than_the_outbox_holds_and_close_serves_the_last_callbacks(
    kafka_cluster: RunningBroker,
) -> None:
    """Far more records than the outbox and buffer.memory hold, produced without a poll:
    produce() waits for room (it does not raise), and close() delivers everything and runs
    the callbacks still due."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("sync-many"), 1)
    count = OUTBOX_LIMIT + 50_000
    calls, on_delivery = recorder()
    producer = sync.Producer({"bootstrap.servers": bootstrap}, buffer_memory=1_000_000)
    for i in range(count):
        producer.produce(topic, b"%d" % i, on_delivery=on_delivery)
    producer.close()
    assert len(calls) == count
    with pytest.raises(ProducerClosedError):
        producer.produce(topic, b"late")
    assert [m.offset for _, _, m in calls] == list(range(count))


def test_transactions_commit_produced_records(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("sync-txn")
    create_topic(bootstrap, topic, 1)
    calls, on_delivery = recorder()
    with sync.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("sync-tx")}, linger_ms=5_000
    ) as producer:
        producer.init_transactions()
        with producer.transaction():
            for i in range(10):
                producer.produce(topic, b"c%d" % i, on_delivery=on_delivery)
        assert [(e, m.offset) for _, e, m in calls] == [(None, i) for i in range(10)]
        producer.begin_transaction()
        producer.produce(topic, b"aborted", on_delivery=on_delivery)
        producer.abort_transaction()
        assert len(calls) == 11 and calls[10][1] is not None
    tp = TopicPartition(topic, 0)
    got, _ = run(read_all(bootstrap, "read_committed", [tp], 13))
    assert values(got) == [b"c%d" % i for i in range(10)]
