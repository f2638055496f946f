"""Admin config calls against kayak's broker, Tansu and Apache Kafka, cross-checked with
confluent-kafka.

Tansu has IncrementalAlterConfigs but not AlterConfigs, describes only the configs set on a
topic (all reported as DEFAULT_CONFIG), no broker configs, and an unknown topic without an
error: asserted below. Apache Kafka acknowledges a change once its controller has it and its
broker applies it a moment later, so a describe right after an alter may still show the old
value (the Java AdminClient sees the same): the tests describe until the change shows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ConfigResource as TheirResource
from confluent_kafka.admin import ResourceType as TheirType

from kayak.client.admin import Admin, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kayak.errors import (
    BrokerNotAvailableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")


def run(bootstrap: str, scenario: Callable[[Admin], Awaitable[T]]) -> T:
    async def main() -> T:
        config = {"request_timeout_ms": 5000, "default_api_timeout_ms": 10000}
        async with Admin(bootstrap_servers=bootstrap, **config) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 45))


async def describe_when(
    admin: Admin,
    resource: str | ConfigResource,
    keys: list[str],
    settled: Callable[[dict[str, ConfigEntry]], bool],
) -> dict[str, ConfigEntry]:
    """describe_configs until ``settled`` says the last change shows (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        entries = await admin.describe_configs(resource, keys)
        if settled(entries) or time.monotonic() > deadline:
            return entries
        await asyncio.sleep(0.05)


def confluent_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([TheirResource(TheirType.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(10).items()}


def test_describe_and_alter_topic_configs(any_broker: RunningBroker) -> None:
    """Set and delete overrides incrementally; confluent's AdminClient sees each change."""
    topic = f"cfg-{uuid.uuid4().hex[:6]}"
    bootstrap = any_broker.bootstrap_servers
    keys = ["retention.ms", "cleanup.policy"]

    async def create_and_alter(admin: Admin) -> tuple[dict[str, ConfigEntry], ...]:
        await admin.create_topics([NewTopic(topic, 1, 1, {"retention.ms": "100000"})])
        initial = await admin.describe_configs(topic, keys)
        await admin.alter_configs(topic, {"retention.ms": 5000, "cleanup.policy": "compact"})
        altered = await describe_when(
            admin, ConfigResource.topic(topic), keys, lambda e: e["retention.ms"].value == "5000"
        )
        return initial, altered

    initial, altered = run(bootstrap, create_and_alter)
    assert initial["retention.ms"].value == "100000"
    assert altered["retention.ms"].value == "5000"
    assert altered["cleanup.policy"].value == "compact"
    theirs = confluent_configs(bootstrap, topic)
    assert theirs["retention.ms"] == "5000" and theirs["cleanup.policy"] == "compact"

    if any_broker.kind == "tansu":
        assert set(initial) == {"retention.ms"}  # Tansu describes only what was set ...
        assert initial["retention.ms"].source is ConfigSource.DEFAULT_CONFIG  # ... as defaults
    else:
        assert initial["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert initial["cleanup.policy"].is_default and initial["cleanup.policy"].value == "delete"
        assert altered["cleanup.policy"].is_override

    # None deletes an override; the other one stays.
    after = run(
        bootstrap,
        lambda admin: _alter_then_describe(admin, topic, {"cleanup.policy": None}, keys),
    )
    assert after["retention.ms"].value == "5000"
    assert after.get("cleanup.policy") is None or after["cleanup.policy"].value == "delete"
    assert confluent_configs(bootstrap, topic).get("cleanup.policy", "delete") == "delete"


async def _alter_then_describe(
    admin: Admin, topic: str, changes: dict[str, Any], keys: list[str], **options: Any
) -> dict[str, ConfigEntry]:
    before = await admin.describe_configs(topic, keys)
    await admin.alter_configs(topic, changes, **options)
    return await describe_when(admin, topic, keys, lambda entries: entries != before)


def test_alter_configs_without_incremental_api(any_broker: RunningBroker) -> None:
    """AlterConfigs replaces every override: kayak reads them first and keeps the others."""
    topic = f"legacy-{uuid.uuid4().hex[:6]}"
    bootstrap = any_broker.bootstrap_servers
    configs = {"retention.ms": "100000", "segment.bytes": "1048576"}

    async def scenario(admin: Admin) -> dict[str, ConfigEntry]:
        await admin.create_topics([NewTopic(topic, 1, 1, configs)])
        return await _alter_then_describe(
            admin, topic, {"retention.ms": 7000}, list(configs), incremental=False
        )

    if any_broker.kind == "tansu":
        with pytest.raises(UnsupportedVersionError, match="does not support AlterConfigs"):
            run(bootstrap, scenario)
        return
    after = run(bootstrap, scenario)
    assert after["retention.ms"].value == "7000"
    assert after["segment.bytes"].value == "1048576"  # kept, though not in the request
    theirs = confluent_configs(bootstrap, topic)
    assert theirs["retention.ms"] == "7000" and theirs["segment.bytes"] == "1048576"


def test_config_errors_and_broker_configs(any_broker: RunningBroker) -> None:
    async def scenario(admin: Admin) -> dict[str, ConfigEntry]:
        if any_broker.kind == "tansu":
            assert await admin.describe_configs("nope-x") == {}  # Tansu: no error, no configs
        else:
            with pytest.raises(
                UnknownTopicOrPartitionError,
                match=r"^UNKNOWN_TOPIC_OR_PARTITION .*: topic nope-x: .*does not exist",
            ):
                await admin.describe_configs("nope-x")
        with pytest.raises(BrokerNotAvailableError, match="broker 4242: the cluster has no"):
            await admin.describe_configs(4242)  # fails at once: no such node to route to
        node = (await admin.describe_cluster()).brokers[0].node_id
        return await admin.describe_configs(node)

    broker_configs = run(any_broker.bootstrap_servers, scenario)
    if any_broker.kind == "tansu":
        assert broker_configs == {}  # Tansu describes no broker configs
    elif any_broker.kind == "apache-kafka":
        # Apache Kafka leaves log.retention.ms unset (null) and keeps its week in hours.
        assert broker_configs["log.retention.ms"].value is None
        assert broker_configs["log.retention.hours"].value == "168"
    else:
        assert broker_configs["log.retention.ms"].value == "604800000"
