"""Consumer group admin against kayak's broker, Tansu and Apache Kafka, with a live
confluent-kafka consumer as the group member: what kayak's Admin reports (members, decoded
assignments, committed offsets, lag) must match what the consumer itself says.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TheirPartition

from kayak.client.admin import Admin, NewTopic, TopicPartition
from kayak.errors import GroupNotEmptyError, KayakError
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(90)

T = TypeVar("T")
PARTITIONS, RECORDS = 3, 10
COMMITTED = {0: 2, 1: 5, 2: 10}  # what the member commits, per partition


def run(bootstrap: str, scenario: Callable[[Admin], Awaitable[T]]) -> T:
    async def main() -> T:
        config = {"request_timeout_ms": 5000, "default_api_timeout_ms": 10000}
        async with Admin(bootstrap_servers=bootstrap, **config) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 45))


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(15) == 0


def join(bootstrap: str, group: str, topic: str) -> Consumer:
    """A confluent consumer that has joined ``group``, been assigned every partition of
    ``topic`` and committed ``COMMITTED``."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": "lag-checker",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 6000,  # Tansu holds a join for the rebalance timeout
    })  # fmt: skip
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < PARTITIONS:
        assert time.monotonic() < deadline, "the consumer was never assigned its partitions"
        consumer.poll(0.2)
    offsets = [TheirPartition(topic, p, o) for p, o in COMMITTED.items()]
    consumer.commit(offsets=offsets, asynchronous=False)
    return consumer


def watermark(bootstrap: str, topic: str, partition: int) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return int(reader.get_watermark_offsets(TheirPartition(topic, partition), 10)[1])
    finally:
        reader.close()


def test_groups_match_a_live_confluent_member(any_broker: RunningBroker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic, group = f"gt-{uuid.uuid4().hex[:6]}", f"gg-{uuid.uuid4().hex[:6]}"
    run(bootstrap, lambda admin: admin.create_topics([NewTopic(topic, PARTITIONS, 1)]))
    produce(bootstrap, topic)
    consumer = join(bootstrap, group, topic)
    try:
        theirs = {
            TopicPartition(tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(consumer.assignment(), timeout=10)
        }
        assigned = {TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()}

        async def while_member(admin: Admin) -> dict[str, Any]:
            facts = {
                "listed": await admin.list_groups(),
                "described": (await admin.describe_groups([group]))[group],
                "offsets": await admin.list_group_offsets(group),
                "lag": await admin.group_lag(group),
            }
            errors: dict[str, KayakError] = {}
            facts["deleted"] = await admin.delete_groups([group], errors=errors)
            facts["delete_errors"] = errors
            return facts

        facts = run(bootstrap, while_member)
    finally:
        consumer.close()

    listed = {g.group_id: g for g in facts["listed"]}
    assert listed[group].protocol_type == "consumer"
    described = facts["described"]
    assert (described.state, described.protocol_type) == ("Stable", "consumer")
    (member,) = described.members
    assert member.member_id.startswith("lag-checker-")
    if any_broker.kind != "tansu":
        assert member.client_id == "lag-checker"
        assert set(member.assignment) == assigned == {TopicPartition(topic, p) for p in COMMITTED}
        assert member.subscription == (topic,)
        assert described.protocol in ("range", "roundrobin")
    else:
        # Tansu describes members without client id, host, metadata or assignment (nor the
        # group's assignor); confluent's AdminClient sees nothing more.
        assert (member.client_id, member.host, member.assignment) == ("", "", ())
        assert described.protocol == ""

    offsets = facts["offsets"]
    assert {tp: om.offset for tp, om in offsets.items()} == theirs
    assert theirs == {TopicPartition(topic, p): o for p, o in COMMITTED.items()}
    expected_lag = {
        tp: max(watermark(bootstrap, topic, tp.partition) - committed, 0)
        for tp, committed in theirs.items()
    }
    assert facts["lag"] == expected_lag
    if any_broker.kind != "tansu":
        assert expected_lag == {TopicPartition(topic, p): RECORDS - o for p, o in COMMITTED.items()}
        # A group with a member cannot be deleted ...
        assert facts["deleted"] == []
        assert isinstance(facts["delete_errors"][group], GroupNotEmptyError)
        assert str(facts["delete_errors"][group]).startswith(f"NON_EMPTY_GROUP (68): {group}: ")
    else:
        assert facts["deleted"] == [group]  # Tansu deletes groups that still have members
        return

    # ... once the member has left, it can; its offsets go with it.
    async def after_leaving(admin: Admin) -> tuple[list[str], Any, Any]:
        described = (await admin.describe_groups([group]))[group]
        deleted = await admin.delete_groups([group])
        return deleted, described, await admin.list_group_offsets(group)

    deleted, described, offsets = run(bootstrap, after_leaving)
    assert described.state == "Empty" and described.members == ()
    assert deleted == [group]
    assert offsets == {}
