"""Where admin requests go, and how failures are retried.

Against a two-shard kayak broker (two nodes: partitions and groups split between them) every
request is recorded with the node it went to; the retry engine is tested on its own with a
scripted broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TheirPartition

from kayak.client.admin import Admin, NewTopic, OffsetSpec, TopicPartition, _core, _routes
from kayak.client.admin._core import ANY, COORDINATOR_RETRY, AdminCore, settle
from kayak.client.backoff import Deadline
from kayak.client.cluster import BrokerInfo, ClusterMetadata
from kayak.client.config import AdminConfig
from kayak.errors import (
    GroupIdNotFoundError,
    InvalidTopicError,
    KafkaTimeoutError,
    KayakError,
    NetworkError,
    NotCoordinatorError,
    TopicExistsError,
)
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(60)


# -- a two-node cluster ------------------------------------------------------------------


@pytest.fixture
def two_shards(tmp_path: Path) -> Iterator[str]:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"]).start()
    yield broker.bootstrap_servers
    broker.stop()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every admin request as (node id, request name), in the order sent."""
    log: list[tuple[int, str]] = []
    original = AdminCore.request

    async def recording(self: AdminCore, connection: Any, message: Any, *args: Any) -> Any:
        log.append((connection.node_id, type(message).__name__))
        return await original(self, connection, message, *args)

    monkeypatch.setattr(AdminCore, "request", recording)
    return log


def commit_standalone(bootstrap: str, group: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Commit offsets for ``group`` without joining it (an Empty group with offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        commits = [TheirPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()]
        consumer.commit(offsets=commits, asynchronous=False)
    finally:
        consumer.close()


def test_two_node_routing(two_shards: str, sent: list[tuple[int, str]]) -> None:
    """Partition requests go to each leader, group requests to each coordinator, ListGroups
    to every broker: one request per node, none bounced."""
    topic, groups = "routed", [f"group-{i}" for i in range(6)]

    async def setup(admin: Admin) -> dict[TopicPartition, int]:
        await admin.create_topics([NewTopic(topic, 4, 1)])
        described = (await admin.describe_topics([topic]))[topic]
        return {TopicPartition(topic, p.partition): p.leader for p in described.partitions}

    leaders = _run(two_shards, setup)
    assert set(leaders.values()) == {0, 1}
    producer = Producer({"bootstrap.servers": two_shards})
    for tp in leaders:
        for _ in range(tp.partition + 1):
            producer.produce(topic, b"x", partition=tp.partition)
    assert producer.flush(15) == 0
    for i, group in enumerate(groups):
        commit_standalone(two_shards, group, {TopicPartition(topic, i % 4): i})

    async def scenario(admin: Admin) -> dict[str, Any]:
        sent.clear()
        latest = await admin.list_offsets(dict.fromkeys(leaders, OffsetSpec.LATEST))
        offsets_sent = list(sent)
        sent.clear()
        described = await admin.describe_groups(groups)
        describe_sent = [s for s in sent if s[1] == "DescribeGroupsRequest"]
        sent.clear()
        listed = await admin.list_groups()
        list_sent = list(sent)
        lags = {g: await admin.group_lag(g) for g in groups}
        low = await admin.delete_records(dict.fromkeys(leaders, 1))
        return dict(
            latest=latest, offsets_sent=offsets_sent, described=described,
            describe_sent=describe_sent, listed=listed, list_sent=list_sent, lags=lags, low=low,
        )  # fmt: skip

    facts = _run(two_shards, scenario)
    assert {tp: found.offset for tp, found in facts["latest"].items()} == {
        tp: tp.partition + 1 for tp in leaders
    }
    assert sorted(facts["offsets_sent"]) == [(0, "ListOffsetsRequest"), (1, "ListOffsetsRequest")]

    coordinators = {g: d.coordinator for g, d in facts["described"].items()}
    assert set(coordinators.values()) == {0, 1}, "the groups should hash to both shards"
    assert sorted(facts["describe_sent"]) == [
        (0, "DescribeGroupsRequest"),
        (1, "DescribeGroupsRequest"),
    ]
    assert sorted(n for n, _ in facts["list_sent"]) == [0, 1]
    listed = {g.group_id: g.coordinator for g in facts["listed"]}
    assert listed == coordinators  # merged from both brokers, each naming its own groups
    for i, group in enumerate(groups):
        tp = TopicPartition(topic, i % 4)
        assert facts["lags"][group] == {tp: max(tp.partition + 1 - i, 0)}
    assert facts["low"] == dict.fromkeys(leaders, 1)


def test_unreachable_bootstrap_fails_fast_and_says_why() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"127\.0\.0\.1:1\b"):
        _run("127.0.0.1:1", lambda admin: admin.list_topics(), timeout_ms=1500)
    assert time.monotonic() - started < 5


def _run(bootstrap: str, scenario: Any, timeout_ms: int = 10_000) -> Any:
    async def main() -> Any:
        config = {"request_timeout_ms": timeout_ms, "default_api_timeout_ms": timeout_ms}
        async with Admin(bootstrap_servers=bootstrap, **config) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 45))


# -- the retry engine, with a scripted broker ------------------------------------------------


@dataclass
class FakeCluster:
    metadata: ClusterMetadata = field(default_factory=ClusterMetadata)
    refreshes: int = 0

    async def refresh_metadata(self, *args: Any, **kwargs: Any) -> ClusterMetadata:
        self.refreshes += 1
        return self.metadata

    async def connection(self, node_id: int) -> Any:
        return FakeConnection(node_id)

    async def any_connection(self) -> Any:
        return FakeConnection(-1)


@dataclass
class FakeConnection:
    node_id: int


def make_core(**settings: Any) -> tuple[AdminCore, FakeCluster]:
    config = AdminConfig.from_user(
        bootstrap_servers="localhost:9092", retry_backoff_ms=1, retry_backoff_max_ms=5, **settings
    )
    cluster = FakeCluster()
    return AdminCore(config, cluster), cluster  # type: ignore[arg-type]


def test_retriable_item_errors_are_retried_after_fresh_metadata() -> None:
    core, cluster = make_core()
    answers = iter([
        {"a": NotCoordinatorError("a: moved"), "b": 2},
        {"a": 1},
    ])  # fmt: skip
    routed: list[list[str]] = []

    async def route(items: list[str]) -> dict[str, int | None]:
        routed.append(items)
        return dict.fromkeys(items, 7)

    async def send(connection: Any, items: list[str], deadline: Deadline) -> Any:
        assert connection.node_id == 7
        return next(answers)

    async def scenario() -> Any:
        core.coordinators["a"] = 7
        return await core.run(
            ["a", "b"], route=route, send=send, retry=COORDINATOR_RETRY,
            deadline=Deadline(5), what="test",
        )  # fmt: skip

    assert asyncio.run(scenario()) == {"a": 1, "b": 2}
    assert routed == [["a", "b"], ["a"]]  # only the failed item is sent again
    assert cluster.refreshes == 1 and core.coordinators == {}


def test_final_errors_are_not_retried_and_transport_failures_stay_per_target() -> None:
    core, _ = make_core()
    calls: list[int] = []

    async def route(items: list[str]) -> dict[str, int | None]:
        return {"x": 1, "y": 2, "z": 1}

    async def send(connection: Any, items: list[str], deadline: Deadline) -> Any:
        calls.append(connection.node_id)
        if connection.node_id == 2:
            raise NetworkError("connection reset")
        return {"x": GroupIdNotFoundError("x: gone"), "z": "ok"}

    outcome = asyncio.run(
        core.run(["x", "y", "z"], route=route, send=send, retry=COORDINATOR_RETRY,
                 deadline=Deadline(0.3), what="test")
    )  # fmt: skip
    assert outcome["z"] == "ok"
    assert isinstance(outcome["x"], GroupIdNotFoundError)
    assert calls.count(1) == 1  # x's error is final: node 1 was asked once
    assert calls.count(2) > 1  # y's node kept failing: retried until the deadline ...
    error = outcome["y"]
    assert isinstance(error, KafkaTimeoutError)  # ... then given up, naming it
    assert str(error).startswith("y: test did not succeed in time after")
    assert isinstance(error.__cause__, NetworkError)


def test_retries_setting_bounds_attempts() -> None:
    core, _ = make_core(retries=0)
    sends = 0

    async def route(items: list[str]) -> dict[str, int | None]:
        return dict.fromkeys(items, ANY)

    async def send(connection: Any, items: list[str], deadline: Deadline) -> Any:
        nonlocal sends
        sends += 1
        raise NetworkError("down")

    outcome = asyncio.run(
        core.run(["a"], route=route, send=send, retry=COORDINATOR_RETRY, deadline=Deadline(5),
                 what="test")
    )  # fmt: skip
    assert sends == 1 and isinstance(outcome["a"], NetworkError)  # the error as it was


def test_settle_raises_the_first_failure_or_collects() -> None:
    outcome: dict[str, Any] = {
        "a": 1,
        "b": TopicExistsError("b: exists"),
        "c": InvalidTopicError("bad"),
    }
    with pytest.raises(TopicExistsError) as raised:
        settle(outcome, None)
    assert raised.value.message == (
        "b: exists (also failed: c; pass errors={} to collect every item's error)"
    )
    errors: dict[str, KayakError] = {}
    assert settle(outcome, errors) == {"a": 1}
    assert str(errors["c"]) == "INVALID_TOPIC_EXCEPTION (17): c: bad"  # labelled with the item


def test_unreachable_controller_falls_back_to_any_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    core, cluster = make_core()
    cluster.metadata.brokers = {5: BrokerInfo(5, "h", 1), 6: BrokerInfo(6, "h", 2)}
    core.controller_id = 5

    async def connect(target: Any, deadline: Deadline) -> Any:
        if target == 5:
            raise NetworkError("controller down")
        return FakeConnection(-1 if target is ANY else target)

    monkeypatch.setattr(core, "connect", connect)
    assert asyncio.run(_routes.controller(core, Deadline(5))) is ANY
    core.controller_id = 6
    assert asyncio.run(_routes.controller(core, Deadline(5))) == 6
    core.controller_id = -1  # unknown controller (a broker that does not say)
    assert asyncio.run(_routes.controller(core, Deadline(5))) is ANY


def test_item_error_drops_a_repeated_code_prefix() -> None:
    error = _core.item_error(36, "orders", "TOPIC_ALREADY_EXISTS (36): topic 'orders' exists")
    assert str(error) == "TOPIC_ALREADY_EXISTS (36): orders: topic 'orders' exists"
