"""``allow.auto.create.topics``: producers (and consumers) ask for a missing topic to be
created, as Kafka's Java clients do; off, a missing topic is refused; the admin never asks.
Against kayak's broker and Apache Kafka (both create topics on request by default)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.client import Admin, Consumer, Producer, TopicPartition
from kayak.errors import InvalidTopicError, UnknownTopicOrPartitionError
from tests.broker.conftest import BrokerProcess
from tests.client.consumer_support import unique
from tests.fixtures.jvm import ApacheKafka

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module", params=["kayak", "apache-kafka"])
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        yield kafka.bootstrap_servers
        return
    broker = BrokerProcess(Path(tmp_path_factory.mktemp("auto-create")) / "data").start()
    yield broker.bootstrap_servers
    broker.stop()


def test_a_producer_creates_a_missing_topic_and_can_be_told_not_to(bootstrap: str) -> None:
    made, looked_at, refused = unique("made-by-producer"), unique("admin-looked"), unique("not")

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap, "max.block.ms": 5_000}) as producer:
            metadata = await producer.send_and_wait(made, b"first", key=b"k")
            assert (metadata.topic, metadata.offset) == (made, 0)
            # An invalid name is refused at once by the broker, not waited for.
            with pytest.raises(InvalidTopicError):
                await producer.send("bad name!", b"x")
        async with Admin({"bootstrap.servers": bootstrap}) as admin:
            assert made in await admin.list_topics()
            # The admin client's metadata never creates a topic.
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_topics([looked_at])
            assert looked_at not in await admin.list_topics()
        refusing = {"bootstrap.servers": bootstrap, "max.block.ms": 600,
                    "allow.auto.create.topics": False}  # fmt: skip
        async with Producer(refusing) as producer:
            with pytest.raises(UnknownTopicOrPartitionError, match=r"max\.block\.ms"):
                await producer.send(refused, b"x")
        async with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
            c.assign([TopicPartition(made, 0)])
            batches = await c.getmany(timeout_ms=5_000)
            assert [r.value for rs in batches.values() for r in rs] == [b"first"]

    asyncio.run(main())
