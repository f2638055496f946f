"""Admin topic and cluster calls against kayak's broker and Tansu, cross-checked with
confluent-kafka's AdminClient.

Tansu refuses CreatePartitions (not in its ApiVersions): asserted below.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient

from kayak.client.admin import Admin, NewTopic, topic_name_problem
from kayak.errors import (
    InvalidTopicError,
    KayakError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")


def run(bootstrap: str, scenario: Callable[[Admin], Awaitable[T]], **config: Any) -> T:
    """Run ``scenario`` with a started Admin on ``bootstrap`` (short timeouts)."""

    async def main() -> T:
        settings = {"request_timeout_ms": 5000, "default_api_timeout_ms": 10000, **config}
        async with Admin(bootstrap_servers=bootstrap, **settings) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 45))


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def confluent_topics(bootstrap: str) -> dict[str, int]:
    """Topic -> partition count, as librdkafka's AdminClient sees them."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {t: len(m.partitions) for t, m in metadata.topics.items() if not t.startswith("__")}


def test_topic_lifecycle(any_broker: RunningBroker) -> None:
    """Create (with configs), list, describe, delete; confluent sees the same topics."""
    orders, plain = name("orders"), name("plain")

    async def create(admin: Admin) -> Any:
        created = await admin.create_topics(
            [NewTopic(orders, 3, 1, {"retention.ms": "3600000"}), NewTopic(plain, 2)]
        )
        listed = await admin.list_topics()
        described = await admin.describe_topics([orders])
        return created, listed, described

    created, listed, described = run(any_broker.bootstrap_servers, create)
    assert created[orders].num_partitions == 3
    assert created[orders].replication_factor == 1
    assert {orders, plain} <= set(listed)
    assert listed[orders].partition_count == 3
    seen = confluent_topics(any_broker.bootstrap_servers)
    assert seen[orders] == 3 and seen[plain] == 2

    topic = described[orders]
    assert topic.topic_id == created[orders].topic_id != uuid.UUID(int=0)
    assert [p.partition for p in topic.partitions] == [0, 1, 2]
    brokers = run(any_broker.bootstrap_servers, lambda admin: admin.describe_cluster()).brokers
    node_ids = {b.node_id for b in brokers}
    for p in topic.partitions:
        assert p.leader in node_ids
        assert p.replicas == (p.leader,) and p.isr == (p.leader,)

    deleted = run(any_broker.bootstrap_servers, lambda admin: admin.delete_topics([orders]))
    assert deleted == [orders]
    seen = confluent_topics(any_broker.bootstrap_servers)
    assert orders not in seen and plain in seen


def test_per_item_errors_raise_or_collect(any_broker: RunningBroker) -> None:
    """One bad item raises an error naming it after the others were done, or is collected."""
    good, taken = name("good"), name("taken")

    async def scenario(admin: Admin) -> dict[str, KayakError]:
        await admin.create_topics([NewTopic(taken, 1)])
        with pytest.raises(TopicExistsError, match=f"^TOPIC_ALREADY_EXISTS .*: {taken}: "):
            await admin.create_topics([NewTopic(good, 1), NewTopic(taken, 1)])
        assert good in await admin.list_topics()  # the good one was created anyway
        errors: dict[str, KayakError] = {}
        created = await admin.create_topics([taken, "bad name!", name("ok")], errors=errors)
        assert len(created) == 1
        with pytest.raises(UnknownTopicOrPartitionError, match="missing-x: topic does not exist"):
            await admin.describe_topics(["missing-x"])
        missing: dict[str, KayakError] = {}
        assert await admin.delete_topics(["missing-y", good], errors=missing) == [good]
        errors.update(missing)
        return errors

    errors = run(any_broker.bootstrap_servers, scenario)
    assert isinstance(errors[taken], TopicExistsError)
    assert isinstance(errors["bad name!"], InvalidTopicError)  # refused before sending
    assert "bad name!" in str(errors["bad name!"])
    assert isinstance(errors["missing-y"], UnknownTopicOrPartitionError)


def test_validate_only_creates_nothing(any_broker: RunningBroker) -> None:
    topic = name("dry")

    async def scenario(admin: Admin) -> bool:
        created = await admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True)
        assert created[topic].num_partitions in (2, -1)
        return topic in await admin.list_topics()

    exists = run(any_broker.bootstrap_servers, scenario)
    if any_broker.kind == "tansu":
        assert exists  # Tansu ignores validate_only and creates the topic
    else:
        assert not exists
        assert topic not in confluent_topics(any_broker.bootstrap_servers)


def test_create_partitions(any_broker: RunningBroker) -> None:
    topic = name("grow")

    async def scenario(admin: Admin) -> int:
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await admin.create_partitions({topic: 5})
        return (await admin.describe_topics([topic]))[topic].partition_count

    if any_broker.kind == "tansu":
        with pytest.raises(UnsupportedVersionError, match="does not support CreatePartitions"):
            run(any_broker.bootstrap_servers, scenario)
        return
    assert run(any_broker.bootstrap_servers, scenario) == 5
    assert confluent_topics(any_broker.bootstrap_servers)[topic] == 5


def test_describe_cluster_matches_confluent(any_broker: RunningBroker) -> None:
    cluster = run(any_broker.bootstrap_servers, lambda admin: admin.describe_cluster())
    theirs = AdminClient({"bootstrap.servers": any_broker.bootstrap_servers})
    described = theirs.describe_cluster().result(10)
    assert cluster.cluster_id == described.cluster_id
    assert {b.node_id for b in cluster.brokers} == {n.id for n in described.nodes}
    assert cluster.controller_id == described.controller.id
    host, port = any_broker.bootstrap_servers.split(":")
    assert any((b.host, b.port) == (host, int(port)) for b in cluster.brokers)


def test_topic_name_rules() -> None:
    assert topic_name_problem("orders.v1_x-y") is None
    for bad in ("", ".", "..", "a b", "x" * 250, "ü"):
        assert topic_name_problem(bad) is not None
