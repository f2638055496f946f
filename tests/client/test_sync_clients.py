"""The blocking Admin, Producer and Consumer against kayak's broker and Apache Kafka, as a
script would use them (no event loop in sight), cross-checked with confluent-kafka."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from kayak.client.admin import NewTopic, OffsetSpec, TopicPartition
from kayak.client.sync import Admin, Consumer, Producer
from kayak.errors import KafkaTimeoutError, TopicExistsError
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import unique

pytestmark = pytest.mark.timeout(60)

FAST = {"request_timeout_ms": 5000, "default_api_timeout_ms": 10000}


def test_blocking_admin(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    orders = unique("sync-orders")
    with Admin(bootstrap_servers=bootstrap, **FAST) as admin:
        created = admin.create_topics([NewTopic(orders, 2, 1)])
        assert created[orders].num_partitions == 2
        with pytest.raises(TopicExistsError, match=orders):
            admin.create_topics([orders])
        admin.alter_configs(orders, {"retention.ms": 60000})
        # Apache Kafka's broker shows a change a moment after its controller acknowledged it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            retention = admin.describe_configs(orders, ["retention.ms"])["retention.ms"].value
            if retention == "60000":
                break
            time.sleep(0.05)
        assert retention == "60000"
        tp = TopicPartition(orders, 1)
        assert admin.list_offsets({tp: OffsetSpec.LATEST})[tp].offset == 0

        # Many threads may share one facade: calls are serialized on the loop.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            listed = list(pool.map(lambda _: set(admin.list_topics()), range(8)))
        assert all(orders in topics for topics in listed)
    assert admin.closed
    theirs = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(theirs[orders].partitions) == 2


def test_blocking_admin_fails_fast_when_unreachable() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"127\.0\.0\.1:1\b"):
        Admin(bootstrap_servers="127.0.0.1:1", request_timeout_ms=1000, default_api_timeout_ms=1000)
    assert time.monotonic() - started < 5


def test_blocking_producer_and_consumer(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    events, group = unique("sync-events"), unique("sync-readers")
    with Admin(bootstrap_servers=bootstrap, **FAST) as admin:
        admin.create_topics([NewTopic(events, 2, 1)])

    with Producer(bootstrap_servers=bootstrap, linger_ms=1) as producer:
        futures = [producer.send(events, f"v{i}".encode(), partition=i % 2) for i in range(20)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        producer.flush()
        metadata = [f.result(10) for f in futures]
    assert [m.offset for m in metadata if m.partition == 0] == list(range(10))

    consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest")
    try:
        consumer.subscribe([events])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(values) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))
        consumer.commit()
        assert consumer.committed(TopicPartition(events, 0)) == 10
        assert threading.current_thread() is threading.main_thread()
    finally:
        consumer.close()

    with Admin(bootstrap_servers=bootstrap, **FAST) as admin:
        assert admin.group_lag(group) == {
            TopicPartition(events, 0): 0,
            TopicPartition(events, 1): 0,
        }
