"""Spark data source fixtures: one real ``kayak broker`` process for the folder, and helpers
to create topics and produce known records into them."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from kayak.client.admin import NewTopic
from kayak.client.sync import Admin, Producer
from tests.broker.conftest import BrokerProcess
from tests.client.conftest import tansu  # noqa: F401 - a fixture, for the Tansu test


def _broker_args() -> list[str]:
    """``--schema-registry-port 0`` where the broker CLI has it (it is being added)."""
    help_text = subprocess.run(
        [sys.executable, "-m", "kayak", "broker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return ["--schema-registry-port", "0"] if "--schema-registry-port" in help_text else []


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A ``kayak broker`` subprocess shared by the Spark tests (topics are per test)."""
    data = tmp_path_factory.mktemp("spark-broker") / "data"
    broker = BrokerProcess(data, extra_args=_broker_args()).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def bootstrap(spark_broker: BrokerProcess) -> str:
    return spark_broker.bootstrap_servers


@pytest.fixture(scope="session")
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap_servers=bootstrap) as client:
        yield client


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test."""
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"


def create_topic(admin: Admin, name: str, partitions: int) -> str:
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    return name


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    count: int,
    *,
    start: int = 0,
    headers: bool = False,
    timestamp: int | None = None,
    one_per_batch: bool = False,
) -> None:
    """``count`` records into one partition: key ``k{n}``, value ``v{n}`` (n from ``start``),
    with headers ``("h", b"{n}")`` if asked, every record at ``timestamp`` if given; with
    ``one_per_batch`` each record is acknowledged before the next is sent."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=0 if one_per_batch else 5) as producer:
        futures = []
        for n in range(start, start + count):
            future = producer.send(
                topic,
                f"v{n}".encode(),
                key=f"k{n}".encode(),
                partition=partition,
                headers=[("h", str(n).encode()), ("empty", None)] if headers else None,
                timestamp=timestamp,
            )
            if one_per_batch:
                future.result()
            futures.append(future)
        producer.flush()
        for future in futures:
            future.result()


def read_options(bootstrap: str, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **options}


def produce_at(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    """One record per timestamp into one partition, value ``t{timestamp}``."""
    with Producer(bootstrap_servers=bootstrap) as producer:
        futures = [
            producer.send(topic, f"t{ts}".encode(), partition=partition, timestamp=ts)
            for ts in timestamps
        ]
        producer.flush()
        for future in futures:
            future.result()
