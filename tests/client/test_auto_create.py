"""``allow.auto.create.topics``: producers (and consumers) ask for a missing topic to be
created, as Kafka's Java clients do; off, a missing topic is refused; the admin never asks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.client import Admin, Consumer, Producer, TopicPartition
from kayak.errors import InvalidTopicError, UnknownTopicOrPartitionError
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(Path(tmp_path_factory.mktemp("auto-create")) / "data").start()
    yield broker.bootstrap_servers
    broker.stop()


def test_a_producer_creates_a_missing_topic_and_can_be_told_not_to(bootstrap: str) -> None:
    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap, "max.block.ms": 5_000}) as producer:
            metadata = await producer.send_and_wait("made-by-producer", b"first", key=b"k")
            assert (metadata.topic, metadata.offset) == ("made-by-producer", 0)
            # An invalid name is refused at once by the broker, not waited for.
            with pytest.raises(InvalidTopicError):
                await producer.send("bad name!", b"x")
        async with Admin({"bootstrap.servers": bootstrap}) as admin:
            assert "made-by-producer" in await admin.list_topics()
            # The admin client's metadata never creates a topic.
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_topics(["admin-looked-here"])
            assert "admin-looked-here" not in await admin.list_topics()
        refusing = {"bootstrap.servers": bootstrap, "max.block.ms": 600,
                    "allow.auto.create.topics": False}  # fmt: skip
        async with Producer(refusing) as producer:
            with pytest.raises(UnknownTopicOrPartitionError, match=r"max\.block\.ms"):
                await producer.send("not-created", b"x")
        async with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
            c.assign([TopicPartition("made-by-producer", 0)])
            batches = await c.getmany(timeout_ms=5_000)
            assert [r.value for rs in batches.values() for r in rs] == [b"first"]

    asyncio.run(main())
