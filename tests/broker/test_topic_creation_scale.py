"""Topic changes at scale: one durable catalog write per request, shared by concurrent
requests, done off the event loop, and answered only once durable.

The catalog's writes are counted (and, where a test needs a write to be in progress, held)
by wrapping the store's ``commit``: an injected delay, the real write still happens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kayak.broker import Broker
from kayak.broker.catalog import TopicCatalog
from kayak.broker.catalog_store import Edit, Written
from kayak.errors import ErrorCode
from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages.api_versions_request import ApiVersionsRequest
from kayak.protocol.messages.api_versions_response import ApiVersionsResponse
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.create_partitions_response import CreatePartitionsResponse
from kayak.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse
from kayak.protocol.messages.delete_topics_request import DeleteTopicsRequest
from kayak.protocol.messages.delete_topics_response import DeleteTopicsResponse
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.metadata_response import MetadataResponse
from tests.broker.conftest import BrokerProcess

TIMEOUT = 60.0


class AsyncClient:
    """Pipelined requests on one connection; responses arrive in request order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._protocol = ClientConnection(client_id="kayak-tests")
        self._waiting: dict[int, asyncio.Future[Message]] = {}
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, bootstrap: str) -> AsyncClient:
        host, port = bootstrap.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    def send(self, message: Message, version: int) -> asyncio.Future[Message]:
        correlation_id, frame = self._protocol.send_request(message, version)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        self._writer.write(frame)
        return future

    async def request(self, message: Message, version: int) -> Message:
        return await asyncio.wait_for(self.send(message, version), TIMEOUT)

    async def _read(self) -> None:
        while data := await self._reader.read(1 << 20):
            self._protocol.receive_data(data)
            while (event := self._protocol.next_event()) is not None:
                self._waiting.pop(event.correlation_id).set_result(event.response)
        for future in self._waiting.values():
            future.set_exception(ConnectionError("the broker closed the connection"))

    async def close(self) -> None:
        self._reading.cancel()
        self._writer.close()


class CommitSpy:
    """Counts the catalog's commits (edits per commit); can hold a commit until released."""

    def __init__(self, catalog: TopicCatalog) -> None:
        self.batches: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.holding = threading.Event()  # a commit is waiting on ``hold``
        store = catalog._store
        real: Callable[[Sequence[Edit]], Written] = store.commit

        def commit(edits: Sequence[Edit]) -> Written:
            if not self.hold.is_set():
                self.holding.set()
                assert self.hold.wait(TIMEOUT)
            self.batches.append(len(edits))
            return real(edits)

        store.commit = commit  # type: ignore[method-assign]


def create_request(names: Sequence[str], partitions: int = 1) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[
            CreatableTopic(name=n, num_partitions=partitions, replication_factor=1) for n in names
        ],
        timeout_ms=30_000,
    )


def errors_of(response: Message) -> dict[str, int]:
    assert isinstance(response, CreateTopicsResponse)
    return {t.name: t.error_code for t in response.topics}


async def topic_names(bootstrap: str) -> dict[str, int]:
    """Every topic the broker lists, with its partition count."""
    client = await AsyncClient.connect(bootstrap)
    response = await client.request(MetadataRequest(topics=None), 12)
    await client.close()
    assert isinstance(response, MetadataResponse)
    return {str(t.name): len(t.partitions) for t in response.topics}


def catalog_of(broker: Broker) -> TopicCatalog:
    assert broker.context is not None
    return broker.context.catalog


def test_a_big_request_and_many_concurrent_ones_are_durable_and_batched(tmp_path: Path) -> None:
    data = tmp_path / "data"
    big = [f"big-{i:04d}" for i in range(300)]
    singles = [f"single-{i:03d}" for i in range(100)]

    async def create() -> CommitSpy:
        async with Broker(data, port=0) as broker:
            spy = CommitSpy(catalog_of(broker))
            clients = [await AsyncClient.connect(broker.bootstrap_servers) for _ in range(8)]
            first = await clients[0].request(create_request(big), 5)
            assert set(errors_of(first).values()) == {0}
            assert spy.batches == [len(big)]  # one write for the whole request

            # Hold the next write: every request arriving meanwhile rides the one after it.
            spy.hold.clear()
            blocker = clients[0].send(create_request(["blocker"]), 5)
            await asyncio.to_thread(spy.holding.wait, TIMEOUT)
            pending = [
                clients[i % 8].send(create_request([name]), 5) for i, name in enumerate(singles)
            ]
            await asyncio.sleep(0.2)
            assert not blocker.done() and not any(p.done() for p in pending)
            spy.hold.set()
            answers = await asyncio.wait_for(asyncio.gather(blocker, *pending), TIMEOUT)
            assert all(set(errors_of(a).values()) == {0} for a in answers)
            assert spy.batches[1:] == [1, len(singles)]
            for client in clients:
                await client.close()
            return spy

    asyncio.run(create())
    document = json.loads((data / "topics.json").read_text())
    assert set(big + singles + ["blocker"]) <= set(document["topics"])

    async def restart() -> dict[str, int]:
        async with Broker(data, port=0) as broker:
            return await topic_names(broker.bootstrap_servers)

    listed = asyncio.run(restart())
    assert {name: listed.get(name) for name in big + singles} == dict.fromkeys(big + singles, 1)


def test_a_failing_topic_in_a_batch_does_not_stop_the_others(tmp_path: Path) -> None:
    async def run() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            client = await AsyncClient.connect(broker.bootstrap_servers)
            assert errors_of(await client.request(create_request(["taken"]), 5)) == {"taken": 0}
            request = create_request(["ok-1", "bad name!", "taken", "ok-2"])
            request.topics.append(
                CreatableTopic(name="bad-config", num_partitions=1, replication_factor=1,
                               configs=[CreatableTopicConfig("cleanup.policy", "sometimes")])
            )  # fmt: skip
            request.topics.append(
                CreatableTopic(name="no-parts", num_partitions=0, replication_factor=1)
            )
            assert errors_of(await client.request(request, 5)) == {
                "ok-1": 0,
                "bad name!": ErrorCode.INVALID_TOPIC_EXCEPTION,
                "taken": ErrorCode.TOPIC_ALREADY_EXISTS,
                "ok-2": 0,
                "bad-config": ErrorCode.INVALID_CONFIG,
                "no-parts": ErrorCode.INVALID_PARTITIONS,
            }
            # The same name from two connections at once: exactly one of them creates it.
            other = await AsyncClient.connect(broker.bootstrap_servers)
            racing = await asyncio.gather(
                client.request(create_request(["raced"]), 5),
                other.request(create_request(["raced"]), 5),
            )
            codes = sorted(errors_of(r)["raced"] for r in racing)
            assert codes == [0, ErrorCode.TOPIC_ALREADY_EXISTS]
            listed = await topic_names(broker.bootstrap_servers)
            assert {"taken", "ok-1", "ok-2", "raced"} <= set(listed)
            assert not {"bad name!", "bad-config", "no-parts"} & set(listed)
            await client.close()
            await other.close()

    asyncio.run(run())


def test_a_big_request_describes_each_topic_s_own_configs_and_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The topics of one request share their described configs where they have the same
    overrides, and only then; the broker's log names the request, not each of its topics."""
    names = [f"described-{i:02d}" for i in range(30)]
    request = create_request(names)
    for topic in request.topics[::2]:
        topic.configs = [CreatableTopicConfig("retention.ms", "1000")]

    async def create() -> CreateTopicsResponse:
        async with Broker(tmp_path / "data", port=0) as broker:
            client = await AsyncClient.connect(broker.bootstrap_servers)
            answer = await client.request(request, 5)
            await client.close()
            assert isinstance(answer, CreateTopicsResponse)
            return answer

    with caplog.at_level(logging.INFO, logger="kayak.broker.catalog"):
        answer = asyncio.run(create())
    for i, result in enumerate(answer.topics):
        retention = {c.name: c for c in result.configs}["retention.ms"]
        expected = ("1000", 1) if i % 2 == 0 else ("604800000", 5)  # override; Kafka default
        assert (retention.value, retention.config_source) == expected, result.name
    created = [r.getMessage() for r in caplog.records if "described-" in r.getMessage()]
    summary = "created 30 topics (described-00 ... described-29) with 30 partitions in all"
    assert created == [summary]


def test_other_connections_are_served_while_a_big_creation_is_written(tmp_path: Path) -> None:
    names = [f"t-{i:04d}" for i in range(2_000)]

    async def run() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            spy = CommitSpy(catalog_of(broker))
            spy.hold.clear()  # the write stays in progress until the other client was served
            creator = await AsyncClient.connect(broker.bootstrap_servers)
            other = await AsyncClient.connect(broker.bootstrap_servers)
            creation = creator.send(create_request(names), 5)
            await asyncio.to_thread(spy.holding.wait, TIMEOUT)
            for _ in range(20):
                answer = await other.request(ApiVersionsRequest(), 3)
                assert isinstance(answer, ApiVersionsResponse) and answer.error_code == 0
            metadata = await other.request(MetadataRequest(topics=None), 12)
            assert isinstance(metadata, MetadataResponse)
            assert not creation.done()
            # Not visible before it is durable.
            assert not {t.name for t in metadata.topics} & set(names)
            spy.hold.set()
            created = await asyncio.wait_for(creation, TIMEOUT)
            assert set(errors_of(created).values()) == {0} and len(errors_of(created)) == 2_000
            assert spy.batches == [2_000]
            assert set(names) <= set(await topic_names(broker.bootstrap_servers))
            await creator.close()
            await other.close()

    asyncio.run(run())


def test_deletions_and_new_partitions_are_batched_and_durable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    names = [f"d-{i:03d}" for i in range(50)]

    async def change() -> None:
        async with Broker(data, port=0) as broker:
            client = await AsyncClient.connect(broker.bootstrap_servers)
            created = await client.request(create_request(names, partitions=2), 5)
            assert set(errors_of(created).values()) == {0}
            # A partition that was written to: its directory goes with the topic.
            catalog_of(broker).partition(names[0], 1)
            spy = CommitSpy(catalog_of(broker))
            deleted = await client.request(DeleteTopicsRequest(topic_names=names[:25]), 4)
            assert isinstance(deleted, DeleteTopicsResponse)
            assert {r.name: r.error_code for r in deleted.responses} == dict.fromkeys(names[:25], 0)
            grow = [CreatePartitionsTopic(name=n, count=4) for n in names[25:]]
            grow.append(CreatePartitionsTopic(name=names[0], count=4))  # deleted: refused
            grown = await client.request(CreatePartitionsRequest(topics=grow), 1)
            assert isinstance(grown, CreatePartitionsResponse)
            codes = {r.name: r.error_code for r in grown.results}
            assert codes == {**dict.fromkeys(names[25:], 0),
                             names[0]: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}  # fmt: skip
            assert spy.batches == [25, 26]
            listed = await topic_names(broker.bootstrap_servers)
            assert {n: listed.get(n) for n in names} == {
                **dict.fromkeys(names[:25]),
                **dict.fromkeys(names[25:], 4),
            }
            await client.close()

    asyncio.run(change())
    assert not [p for p in data.iterdir() if p.name.startswith(tuple(n + "-" for n in names[:25]))]

    async def restart() -> dict[str, int]:
        async with Broker(data, port=0) as broker:
            return await topic_names(broker.bootstrap_servers)

    listed = asyncio.run(restart())
    assert {n: listed.get(n) for n in names} == {
        **dict.fromkeys(names[:25]),
        **dict.fromkeys(names[25:], 4),
    }


def test_a_topic_answered_as_created_survives_a_kill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    names = [f"k-{i:03d}" for i in range(100)]

    async def create() -> list[Any]:
        clients = [await AsyncClient.connect(broker.bootstrap_servers) for _ in range(4)]
        answers = await asyncio.gather(
            *(clients[i % 4].request(create_request([n]), 5) for i, n in enumerate(names))
        )
        return [errors_of(a) for a in answers]

    try:
        answers = asyncio.run(create())
        broker.stop(signal.SIGKILL)  # at once after the last answer
        assert all(a == {n: 0} for a, n in zip(answers, names, strict=True))
        broker.restart()
        listed = asyncio.run(topic_names(broker.bootstrap_servers))
        assert {n: listed.get(n) for n in names} == dict.fromkeys(names, 1)
    finally:
        if broker.process is not None:
            broker.stop()


def test_a_deletion_whose_catalog_write_fails_keeps_the_topic_and_its_data(
    tmp_path: Path,
) -> None:
    """The partition directories are renamed for deletion before topics.json is written; if
    that write fails they are renamed back, so the topic the map still lists keeps its data."""
    from kayak.broker.log import LogConfig
    from kayak.errors import KafkaError
    from kayak.protocol.records import build_record_batch

    data = tmp_path / "data"
    data.mkdir()
    catalog = TopicCatalog(data, LogConfig(), 0, 1, False)
    catalog.open(clean_shutdown=True)
    catalog.create("kept", 2)
    catalog.partition("kept", 1).log.append(build_record_batch([b"precious"]))
    # The fault: the catalog's temp file cannot be created (a directory is in its place).
    blocker = data / f"topics.json.{os.getpid()}.tmp"
    blocker.mkdir()
    with pytest.raises((KafkaError, OSError)):
        catalog.delete("kept")
    blocker.rmdir()
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("kept")) == [
        "kept-0",
        "kept-1",
    ]
    catalog.close()
    reopened = TopicCatalog(data, LogConfig(), 0, 1, False)
    reopened.open(clean_shutdown=False)
    stored = reopened.partition("kept", 1).log.read(0, 1 << 20)
    assert stored is not None and b"precious" in stored.read()
    reopened.close()
