"""Broker fixtures: the real broker process, started and stopped by the tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")


@dataclass
class BrokerProcess:
    """A ``kayak broker`` subprocess on its own data directory."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the child's environment
    # The schema registry, /metrics and the console on a free port. Off unless asked for:
    # their web stack is more than half of a broker's start, and most tests speak only Kafka.
    web: bool = False
    fd_limit: int | None = None  # the child's soft RLIMIT_NOFILE, as ``ulimit -n`` sets it

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        # A restart appends to the same log: only lines written after this point count.
        start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it
        args = [
            sys.executable, "-m", "kayak", "-v", "broker",
            "--data-dir", str(self.data_dir),
            "--port", str(self.port),
            "--group-initial-rebalance-delay-ms", "0",
            *self._web_args(),
            *self.extra_args,
        ]  # fmt: skip
        if self.fd_limit is not None:
            # Lowered in the child only: this test process may hold more descriptors.
            args = ["sh", "-c", 'ulimit -n "$0" && exec "$@"', str(self.fd_limit), *args]
        env = {**os.environ, **self.env} if self.env else None
        self.process = subprocess.Popen(args, stdout=log, stderr=log, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited: {self.log_path.read_text()[-2000:]}")
            with open(self.log_path, "rb") as f:
                f.seek(start_offset)
                text = f.read().decode(errors="replace")
            found = _LISTENING.findall(text)
            if found:
                self.port = int(found[-1][1])
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not start: {self.log_path.read_text()[-2000:]}")

    def _web_args(self) -> list[str]:
        if any(arg.startswith("--schema-registry") for arg in self.extra_args):
            return []  # the test's own registry options
        # Port 0, never the default 8081: many brokers run at once.
        return ["--schema-registry-port", "0"] if self.web else ["--no-schema-registry"]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Stop the process (SIGTERM: clean; SIGKILL: a crash); returns its exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        code = self.process.wait(timeout)
        self.process = None
        return code

    def restart(self) -> BrokerProcess:
        """Start again on the same data directory and port."""
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path / "data")


def running_broker(data_dir: Path) -> Iterator[BrokerProcess]:
    """A broker on ``data_dir`` until the fixture ends. A test module whose tests keep to
    topics and groups of their own shares one, overriding ``broker_process`` with a
    module-scoped fixture over this; a test may restart it, and leaves it running."""
    broker = BrokerProcess(data_dir).start()
    yield broker
    if broker.process is not None:
        broker.stop()
