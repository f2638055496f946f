"""The broker under test: ``kayak broker`` (one process, or a ``--shards N`` supervisor and
its shards) on fixed ports, killed with SIGKILL and brought back on the same data directory;
the lines its log writes about recovery; ``kayak log verify`` over its data directory once it
is stopped; and :func:`retry` for calls that may meet it down."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.broker.conftest import BrokerProcess

_RECOVERY_LINE = re.compile(
    r"torn tail|corrupt|rebuilding|unclean start|Traceback|ERROR|CRITICAL", re.IGNORECASE
)


def free_ports(count: int) -> int:
    """A base port such that base .. base+count-1 are free now."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65_000:
            continue
        if all(_port_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def child_pids(pid: int) -> list[int]:
    """The live (not yet reaped) child processes of ``pid``."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    return [p for p in pids if not _is_zombie(p)]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


class BrokerUnderTest:
    """``kayak broker`` (one process, or a ``--shards N`` supervisor with N children) on fixed
    ports, so that a restart comes back where the clients look for it."""

    def __init__(self, data_dir: Path, shards: int, flush: str) -> None:
        self.shards = shards
        self.base_port = free_ports(shards)
        extra = ["--flush", flush, "--retention-check-interval-ms", "200"]
        if shards > 1:
            extra += ["--shards", str(shards)]
        self.process = BrokerProcess(data_dir, extra_args=extra, port=self.base_port)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(self.shards))

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    def start(self) -> None:
        self.process.start(timeout=120)
        # The log names whichever shard listened last: the cluster's ports are fixed.
        self.process.port = self.base_port
        self._wait_listening(time.monotonic() + 120)

    def _wait_listening(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if all(_accepts(self.base_port + i) for i in range(self.shards)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker not listening: {self.process.log_text()[-3000:]}")

    def kill(self, rng: random.Random) -> str:
        """SIGKILL the broker, or one shard of the cluster; says which."""
        assert self.process.process is not None
        if self.shards == 1:
            pid = self.process.process.pid
            self.process.stop(signal.SIGKILL)  # and wait until it is gone
            return f"broker pid {pid}"
        shards = child_pids(self.process.process.pid)
        if not shards:
            raise RuntimeError("the supervisor has no shard processes")
        victim = rng.choice(shards)
        os.kill(victim, signal.SIGKILL)
        self._killed = victim
        return f"shard pid {victim} of {len(shards)}"

    def recover(self, timeout: float = 120.0) -> str:
        """Bring the broker back after :meth:`kill`; says how it came back."""
        deadline = time.monotonic() + timeout
        if self.shards == 1:
            self.start()
            return "restarted"
        supervisor = self.process.process
        assert supervisor is not None
        while time.monotonic() < deadline:
            if supervisor.poll() is not None:
                self.process.stop()
                self.start()
                return "supervisor stopped the cluster: restarted it"
            shards = child_pids(supervisor.pid)
            if len(shards) == self.shards and self._killed not in shards:
                self._wait_listening(deadline)
                return "supervisor restarted the shard"
            time.sleep(0.05)
        raise RuntimeError("the cluster neither came back nor stopped after a shard was killed")

    def stop(self) -> int:
        if self.process.process is None:
            return 0
        return self.process.stop(signal.SIGTERM, timeout=120)

    def log_offset(self) -> int:
        path = self.process.log_path
        return path.stat().st_size if path is not None and path.exists() else 0

    def log_since(self, offset: int) -> str:
        path = self.process.log_path
        if path is None or not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def recovery_lines_since(self, offset: int) -> list[str]:
        """The lines of the broker's log after ``offset`` that tell of recovery or failure."""
        return [
            line.strip()
            for line in self.log_since(offset).splitlines()
            if _RECOVERY_LINE.search(line)
        ]


@dataclass
class LogVerify:
    """The outcome of ``kayak log verify DATA_DIR`` (``available`` False: no such command)."""

    available: bool
    returncode: int = 0
    output: str = ""


def kayak_log_verify(data_dir: Path) -> LogVerify:
    kayak = [sys.executable, "-m", "kayak"]
    probe = subprocess.run([*kayak, "log", "--help"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return LogVerify(available=False, output=probe.stderr.strip()[-500:])
    done = subprocess.run(
        [*kayak, "log", "verify", str(data_dir)], capture_output=True, text=True, timeout=600
    )
    return LogVerify(True, done.returncode, (done.stdout + done.stderr).strip()[-3000:])


def retry(what: str, action: Callable[[], Any], stop: threading.Event, timeout: float) -> Any:
    """Run an admin call until it succeeds (the broker may be down for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except Exception as exc:  # any failure while the broker restarts
            if stop.is_set() or time.monotonic() > deadline:
                raise RuntimeError(f"{what} kept failing: {exc}") from exc
            time.sleep(0.2)
