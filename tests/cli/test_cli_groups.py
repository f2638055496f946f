"""``kayak groups``: list and describe (members, assignment, committed offsets, lag) against
kayak's broker with a live confluent-kafka member, and against Tansu with committed offsets
only (Tansu describes members without client ids or assignments; see tests/client)."""

from __future__ import annotations

import asyncio
import time

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TheirPartition

from kayak.cli.groups import groups
from kayak.cli.topics import topics
from kayak.client.admin import Admin, TopicPartition
from tests.cli.conftest import table_rows
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(60)

RECORDS = 10  # per partition
COMMITTED = {0: 2, 1: 5}  # partition 2 is assigned but never committed


def invoke(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(groups, ["-b", bootstrap, "--timeout", "5", *args])


def prepare(bootstrap: str, topic: str) -> None:
    created = CliRunner().invoke(topics, ["-b", bootstrap, "create", topic, "-p", "3"])
    assert created.exit_code == 0, created.output
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(3):
        for i in range(RECORDS):
            producer.produce(topic, f"{i}".encode(), partition=p)
    assert producer.flush(15) == 0


def commits(topic: str) -> list[TheirPartition]:
    return [TheirPartition(topic, p, o) for p, o in COMMITTED.items()]


def test_describe_a_live_group(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    prepare(bootstrap, "clicks")
    member = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "dashboards", "client.id": "dash-1",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    })  # fmt: skip
    member.subscribe(["clicks"])
    deadline = time.monotonic() + 20
    while len(member.assignment()) < 3:
        assert time.monotonic() < deadline, "never assigned"
        member.poll(0.2)
    member.commit(offsets=commits("clicks"), asynchronous=False)
    try:
        listed = invoke(bootstrap, "list")
        described = invoke(bootstrap, "describe", "dashboards")
        lag = asyncio.run(_lag(bootstrap, "dashboards"))
    finally:
        member.close()

    assert listed.exit_code == 0
    assert table_rows(listed.output) == [["dashboards", "Stable", "consumer", "0"]]
    assert described.exit_code == 0, described.output
    # the summary line may wrap where the terminal is narrow: compare words, not layout
    words = " ".join(described.output.split())
    assert "dashboards state Stable protocol range (consumer)" in words
    assert "members 1 total lag 13" in words
    members, partitions = _split(table_rows(described.output))
    (row,) = members
    assert row[1:] == ["dash-1", "127.0.0.1", "clicks[0,1,2]"]
    assert partitions == [
        ["clicks", "0", "2", "10", "8", "dash-1", "127.0.0.1"],
        ["clicks", "1", "5", "10", "5", "dash-1", "127.0.0.1"],
        ["clicks", "2", "-", "10", "-", "dash-1", "127.0.0.1"],
    ]
    # The CLI's lag is the admin client's group_lag.
    assert lag == {TopicPartition("clicks", 0): 8, TopicPartition("clicks", 1): 5}

    after = invoke(bootstrap, "describe", "dashboards")
    assert "state Empty" in after.output and "members 0" in after.output
    assert [r[:5] for r in table_rows(after.output)] == [
        ["clicks", "0", "2", "10", "8"],
        ["clicks", "1", "5", "10", "5"],
    ]

    missing = invoke(bootstrap, "describe", "ghost")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == "Error: group 'ghost' does not exist"
    deleted = invoke(bootstrap, "delete", "dashboards")
    assert deleted.exit_code == 0 and deleted.output.strip() == "deleted group dashboards"
    assert invoke(bootstrap, "list").output.strip() == "no groups"


def test_committed_offsets_on_tansu(tansu: RunningBroker) -> None:
    bootstrap = tansu.bootstrap_servers
    prepare(bootstrap, "views")
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reports"})
    committer.commit(offsets=commits("views"), asynchronous=False)
    committer.close()
    listed = invoke(bootstrap, "list")
    assert listed.exit_code == 0 and table_rows(listed.output)[0][0] == "reports"
    described = invoke(bootstrap, "describe", "reports")
    assert described.exit_code == 0, described.output
    # Tansu's high watermark counts batches (one per produce here), so the latest offset
    # and lag columns are whatever it reports; the committed ones are exact.
    assert [r[:3] for r in table_rows(described.output)] == [
        ["views", "0", "2"],
        ["views", "1", "5"],
    ]


async def _lag(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return await admin.group_lag(group)


def _split(rows: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
    """Members table rows (4 cells) and partition table rows (7 cells)."""
    return [r for r in rows if len(r) == 4], [r for r in rows if len(r) == 7]
