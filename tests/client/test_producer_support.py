"""Helpers for the producer tests (no tests here): brokers shared by a module, topics, and a
third-party reader (confluent-kafka) to check what the producer stored."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.conftest import BrokerProcess
from tests.client.conftest import RunningBroker, _free_port, _wait_for_port, tansu_binary
from tests.fixtures.jvm import ApacheKafka

T = TypeVar("T")
_names = itertools.count()


def run(main: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``main`` on uvloop, failing if it takes longer than ``timeout`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(main, timeout)

    return uvloop.run(bounded())


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{time.monotonic_ns() % 1_000_000}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # some brokers make partitions a moment later
        topics = admin.list_topics(name, timeout=5).topics
        if name in topics and len(topics[name].partitions) == partitions:
            break
        time.sleep(0.05)
    return name


@dataclass(frozen=True)
class Stored:
    """A record as confluent-kafka read it back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


def read_back(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0
) -> list[Stored]:
    """Every record of ``topic`` (at least ``expected`` of them), by partition then offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    stored: list[Stored] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                        continue
                    raise AssertionError(f"reading {topic}: {error}")
                at_end.discard(message.partition())
                stored.append(
                    Stored(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        list(message.headers() or []),
                        message.timestamp()[1],
                    )
                )
            if len(stored) >= expected and len(at_end) == partitions:
                break
    finally:
        consumer.close()
    return sorted(stored, key=lambda s: (s.partition, s.offset))


class Stoppable:
    """A broker process a test may pause (SIGSTOP), resume or kill."""

    def __init__(self, kind: str, bootstrap: str, process: subprocess.Popen[bytes]) -> None:
        self.kind = kind
        self.bootstrap_servers = bootstrap
        self.process = process

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)


@pytest.fixture(params=["kayak", "tansu"])
def stoppable_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stoppable]:
    """kayak's broker (no fsync, so a kill is immediate) and Tansu in turn, for tests that
    stall or kill the broker under the producer."""
    if request.param == "kayak":
        broker = BrokerProcess(tmp_path / "data", extra_args=["--flush", "never"]).start()
        assert broker.process is not None
        stoppable = Stoppable("kayak", broker.bootstrap_servers, broker.process)
    else:
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        with open(tmp_path / "tansu.log", "wb") as log:
            process = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url,
                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=log,
            )  # fmt: skip
        _wait_for_port(port, process)
        stoppable = Stoppable("tansu", f"127.0.0.1:{port}", process)
    try:
        yield stoppable
    finally:
        stoppable.kill()


@pytest.fixture(scope="module", params=["kayak", "tansu", "apache-kafka"])
def shared_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningBroker]:
    """One broker for a whole test module (each test makes its own topics): kayak's, Tansu
    and the run's shared Apache Kafka in turn."""
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        yield RunningBroker("apache-kafka", kafka.bootstrap_servers)
        return
    tmp: Path = tmp_path_factory.mktemp(f"producer-{request.param}")
    if request.param == "kayak":
        broker = BrokerProcess(tmp / "data").start()
        yield RunningBroker("kayak", broker.bootstrap_servers)
        broker.stop()
        return
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    with open(tmp / "tansu.log", "wb") as log:
        process = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        _wait_for_port(port, process)
        yield RunningBroker("tansu", f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(10)
