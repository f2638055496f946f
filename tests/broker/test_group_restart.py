"""A consumer group outlives a broker restart, as on Kafka: the coordinator stores each
settled generation in ``__consumer_offsets`` and reloads it, so the members go on
heartbeating, fetching and committing with no rebalance (librdkafka's consumers here, the
broker killed with SIGKILL)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.conftest import BrokerProcess

TOPIC = "orders"
PARTITIONS = 4


class Member:
    """A librdkafka consumer in the group, counting its rebalance callbacks."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.assigned: list[list[int]] = []
        self.revoked: list[list[int]] = []
        self.values: list[bytes] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "billing", "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "partition.assignment.strategy": "range", "session.timeout.ms": 30_000,
        })  # fmt: skip
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _: Any, partitions: list[TopicPartition]) -> None:
        self.assigned.append(sorted(p.partition for p in partitions))

    def _on_revoke(self, _: Any, partitions: list[TopicPartition]) -> None:
        self.revoked.append(sorted(p.partition for p in partitions))

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is not None and message.error() is None:
            self.values.append(message.value())
            self.consumer.commit(message, asynchronous=True)


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def poll_until(members: list[Member], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, what
        for member in members:
            member.poll()


def test_members_consume_on_through_a_broker_kill_without_a_rebalance(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    members: list[Member] = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        members = [Member(broker.bootstrap_servers, name) for name in ("c1", "c2")]
        first = [f"before-{i}".encode() for i in range(400)]
        produce(broker.bootstrap_servers, first)
        poll_until(members, lambda: sum(len(m.values) for m in members) >= len(first),
                   "the group did not consume the first records")  # fmt: skip
        callbacks = [(list(m.assigned), list(m.revoked)) for m in members]
        assert sorted(p for m in members for p in m.assigned[-1]) == list(range(PARTITIONS))
        time.sleep(0.5)  # the last asynchronous commits land

        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
        broker.restart()
        second = [f"after-{i}".encode() for i in range(400)]
        produce(broker.bootstrap_servers, second)
        poll_until(members, lambda: set(second) <= {v for m in members for v in m.values},
                   "the group did not consume the records produced after the restart")  # fmt: skip

        # No member was told to rejoin: no revocation, no new assignment.
        assert [(m.assigned, m.revoked) for m in members] == callbacks
        restarted_log = broker.log_text().rsplit("listening on", 1)[1]
        assert "Preparing to rebalance" not in restarted_log, restarted_log[-2000:]
        assert "groups' members" in broker.log_text()
    finally:
        for member in members:
            member.consumer.close()
        if broker.process is not None:
            broker.stop()
