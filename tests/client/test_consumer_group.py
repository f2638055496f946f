"""Consumer groups against real brokers: joining, rebalancing, heartbeats, commits.

Every test runs against kayak's broker and Apache Kafka (``kafka_cluster``); the first also
against Tansu. Topic and group names are unique per test: Apache Kafka is shared by the run.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kayak.client.consumer import Consumer, RebalanceListener, TopicPartition
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import create_topic, produce, read_until, run, unique

pytestmark = pytest.mark.timeout(60)


def every_partition(topic: str) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(4)}


class Recorder(RebalanceListener):
    """Remembers every callback, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))


def member(bootstrap: str, group: str, **config: object) -> Consumer:
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6_000,
        "heartbeat.interval.ms": 200,
        "fetch.max.wait.ms": 100,
    }
    settings.update({name.replace("_", "."): value for name, value in config.items()})
    return Consumer(settings)


async def poll_until(
    consumers: list[Consumer], done: object, timeout: float = 20
) -> dict[int, list[bytes | None]]:
    """Poll every consumer in turn until ``done()``; the values each one got."""
    got: dict[int, list[bytes | None]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            for batch in (await consumer.getmany(timeout_ms=50)).values():
                got[i] += [r.value for r in batch]
        if done(got):
            break
    return got


async def read_to_end(consumers: list[Consumer], end: int, timeout: float = 20) -> None:
    """Poll until each consumer's position on every partition it owns is ``end``.

    Reading all the records between them is not enough: a member that joined late may not
    have fetched its share yet, and committing then would commit where it starts.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for consumer in consumers:
            await consumer.getmany(timeout_ms=50)
        positions = [await c.position(tp) for c in consumers for tp in c.assignment()]
        if positions and all(position == end for position in positions):
            return
    raise AssertionError(f"positions short of {end} after {timeout} s")


def test_two_members_share_rebalance_and_a_new_member_resumes_from_commits(
    any_broker: RunningBroker,
) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic, group = unique("grouped"), unique("group")
    every = every_partition(topic)
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [(i % 4, None, b"old-%d" % i) for i in range(400)])

    async def main() -> None:
        a, b = member(bootstrap, group), member(bootstrap, group)
        await a.start()
        await b.start()
        a.subscribe([topic])
        b.subscribe([topic])
        got = await poll_until(
            [a, b],
            lambda got: bool(
                a.assignment() | b.assignment() == every
                and not a.assignment() & b.assignment()
                and a.assignment()
                and b.assignment()
                and len(set(got[0] + got[1])) >= 400
            ),
        )
        assert a.assignment() and b.assignment()
        assert a.assignment() | b.assignment() == every
        assert not a.assignment() & b.assignment()
        # Every record at least once. Nothing is committed yet, so a member that read before
        # the second one joined (Apache Kafka lets the first join a generation of its own)
        # hands its partitions over from the start: repeats here are at-least-once, not loss.
        assert set(got[0] + got[1]) == {b"old-%d" % i for i in range(400)}
        await read_to_end([a, b], 100)
        assert a.assignment() | b.assignment() == every
        await a.commit()
        await b.commit()
        await b.close()
        await poll_until([a], lambda _: a.assignment() == every)
        assert a.assignment() == every
        for tp in every:
            assert await a.committed(tp) == 100
        produce(bootstrap, topic, [(i % 4, None, b"new-%d" % i) for i in range(40)])
        await a.close()

        async with member(bootstrap, group) as c:
            c.subscribe([topic])
            records = await read_until(c, lambda rs: len(rs) >= 40, 20)
            assert sorted(r.value for r in records) == sorted(b"new-%d" % i for i in range(40))
            assert c.assignment() == every

    run(main(), timeout=50)


def test_heartbeats_keep_a_slow_member_in_the_group(kafka_cluster: RunningBroker) -> None:
    """Processing pauses longer than heartbeat.interval.ms (but below session.timeout.ms)
    cause no rebalance: heartbeats run on their own task."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = unique("grouped"), unique("group")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [(i % 4, None, b"%d" % i) for i in range(40)])
    config = {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 100}

    async def main() -> None:
        async with (
            member(bootstrap, group, **config) as a,
            member(bootstrap, group, **config) as b,
        ):
            a.subscribe([topic])
            b.subscribe([topic])
            await poll_until([a, b], lambda _: len(a.assignment()) == len(b.assignment()) == 2)
            assert a.group_member is not None and b.group_member is not None
            before = (a.assignment(), b.assignment())
            generation = a.group_member.generation
            rounds = (a.group_member.rebalances, b.group_member.rebalances)
            for _ in range(3):  # each round: 1.2 s of "processing" between polls
                await a.getmany(timeout_ms=10)
                await b.getmany(timeout_ms=10)
                await asyncio.sleep(1.2)
            assert (a.assignment(), b.assignment()) == before
            assert a.group_member.generation == b.group_member.generation == generation
            assert (a.group_member.rebalances, b.group_member.rebalances) == rounds

    run(main(), timeout=50)


def test_eager_rebalance_revokes_everything_then_assigns(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = unique("grouped"), unique("group")
    every = every_partition(topic)
    create_topic(bootstrap, topic, 4)
    listener = Recorder()

    async def main() -> None:
        async with member(bootstrap, group, partition_assignment_strategy="range") as a:
            a.subscribe([topic], listener=listener)
            await poll_until([a], lambda _: a.assignment() == every)
            async with member(bootstrap, group) as b:
                b.subscribe([topic])
                await poll_until([a, b], lambda _: len(a.assignment()) == len(b.assignment()) == 2)
                mine = a.assignment()
            await poll_until([a], lambda _: a.assignment() == every)
        assert listener.calls[:3] == [("assigned", every), ("revoked", every), ("assigned", mine)]
        assert listener.calls[3:5] == [("revoked", mine), ("assigned", every)]

    run(main(), timeout=50)


def test_cooperative_sticky_revokes_only_what_moves(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = unique("grouped"), unique("group")
    every = every_partition(topic)
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [(i % 4, None, b"%d" % i) for i in range(400)])
    listener = Recorder()
    config = {"partition.assignment.strategy": "cooperative-sticky"}

    async def main() -> None:
        async with member(bootstrap, group, **config) as a:
            a.subscribe([topic], listener=listener)
            await poll_until([a], lambda _: a.assignment() == every)
            async with member(bootstrap, group, **config) as b:
                b.subscribe([topic])
                await poll_until([a, b], lambda _: len(a.assignment()) == len(b.assignment()) == 2)
                kept, moved = a.assignment(), b.assignment()
                assert kept | moved == every
        revocations = [p for kind, p in listener.calls if kind == "revoked"]
        assert revocations[0] == moved  # never all four: only what b was to get
        assert listener.calls[0] == ("assigned", every)
        assert all(p <= every - kept for p in revocations[:1])

    run(main(), timeout=50)


def test_auto_commit_commits_what_the_application_finished(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = unique("auto"), unique("auto-g")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(30)])
    tp = TopicPartition(topic, 0)
    config = {"enable.auto.commit": True, "auto.commit.interval.ms": 100}

    async def main() -> None:
        async with member(bootstrap, group, **config) as c:
            c.subscribe([topic])
            first = await read_until(c, lambda rs: len(rs) >= 10, 20)
            await asyncio.sleep(0.4)
            # the records of the last poll are not known to be processed until the next poll
            committed = await c.committed(tp)
            assert committed is None or committed <= first[-1].offset + 1
            await c.getmany(timeout_ms=10)
            await asyncio.sleep(0.4)
            assert await c.committed(tp) == await c.position(tp)
            final = await c.position(tp)
        async with member(bootstrap, group) as check:
            assert await check.committed(tp) == final  # close() committed everything returned

    run(main(), timeout=50)


def test_a_pattern_subscription_follows_new_topics(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    prefix, group = unique("logs"), unique("pattern")
    logs_a, logs_b = f"{prefix}-a", f"{prefix}-b"
    create_topic(bootstrap, logs_a)
    create_topic(bootstrap, unique("other"))
    produce(bootstrap, logs_a, [(0, None, b"a")])

    async def main() -> None:
        async with member(bootstrap, group, metadata_max_age_ms=300) as c:
            c.subscribe(pattern=rf"{prefix}-.*")
            got = await read_until(c, lambda rs: len(rs) >= 1, 20)
            assert [(r.topic, r.value) for r in got] == [(logs_a, b"a")]
            assert c.subscription() == {logs_a}
            await c.commit()  # the rebalance for logs-b starts logs-a over from its commit
            create_topic(bootstrap, logs_b)
            produce(bootstrap, logs_b, [(0, None, b"b")])
            got = await read_until(c, lambda rs: len(rs) >= 1, 20)
            assert [(r.topic, r.value) for r in got] == [(logs_b, b"b")]
            assert c.assignment() == {TopicPartition(logs_a, 0), TopicPartition(logs_b, 0)}

    run(main(), timeout=50)


def test_a_member_that_stops_polling_leaves_and_rejoins_on_its_next_poll(
    kafka_cluster: RunningBroker,
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = unique("grouped"), unique("group")
    every = every_partition(topic)
    create_topic(bootstrap, topic, 4)
    config = {"max.poll.interval.ms": 1_000, "heartbeat.interval.ms": 100}

    async def main() -> None:
        async with member(bootstrap, group, **config) as c:
            c.subscribe([topic])
            await poll_until([c], lambda _: c.assignment() == every)
            membership = c.group_member
            assert membership is not None
            first = membership.rebalances
            await asyncio.sleep(1.6)  # no poll for longer than max.poll.interval.ms
            assert membership.member_id == ""  # it left the group
            await poll_until([c], lambda _: membership.rebalances > first)
            assert c.assignment() == every

    run(main(), timeout=50)
