"""Instructions per one-record acks=all Produce request, counted by valgrind's callgrind: kayak's
broker beside the empty server (bench/empty_server.py), the floor issue 28 measures a broker's
CPU per request against.

CPU time per request on this 2-core machine swings from one hour to the next (a plain Python
loop ran 3x slower one afternoon than the night before), so a few-percent change to the request
path drowns in it. Instruction counts do not swing: one tree measured twice gave the same count
within 0.001 %. Each server runs under callgrind with its instrumentation off until a warm-up
load is done; then exactly the measured requests are counted, and nothing of the client (which
runs in this process, outside valgrind).

Usage: ``.venv/bin/python bench/request_instructions.py [--requests 8000] [--flush never,group]
[--markdown]``; it needs valgrind (``callgrind_control`` beside it). Under valgrind a server runs
about 50x slower, so one run of the defaults takes two to four minutes.
"""

from __future__ import annotations

import argparse
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from peers import HOST, REPO, free_port
from result_tables import Table, times

from kayak.protocol import ClientConnection
from kayak.protocol.messages import CreateTopicsRequest, ProduceRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch

TOPIC = "instructions"
_FRAME_LENGTH = struct.Struct(">i")
_START_TIMEOUT = 600.0  # imports under valgrind are slow
_TOTALS = "totals:"


@dataclass(frozen=True)
class Load:
    """The measured load: ``connections`` x ``per_connection`` requests, ``window`` in flight
    on each connection, spread over ``partitions`` partitions, one ``value_size`` record each."""

    connections: int = 16
    window: int = 8
    per_connection: int = 500
    partitions: int = 4
    value_size: int = 2048

    @property
    def requests(self) -> int:
        return self.connections * self.per_connection


def produce_frames(load: Load) -> list[bytes]:
    """One encoded Produce request (v9, acks=all) per partition; resent as they are."""
    protocol = ClientConnection(client_id="request-instructions")
    frames = []
    for partition in range(load.partitions):
        records = build_record_batch([b"x" * load.value_size])
        data = TopicProduceData(TOPIC, [PartitionProduceData(partition, records)])
        request = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[data])
        frames.append(protocol.send_request(request, 9)[1])
    return frames


def create_topic(port: int, partitions: int) -> None:
    protocol = ClientConnection(client_id="request-instructions")
    topics = [CreatableTopic(name=TOPIC, num_partitions=partitions, replication_factor=1)]
    _, frame = protocol.send_request(CreateTopicsRequest(topics=topics, timeout_ms=30_000), 5)
    with socket.create_connection((HOST, port)) as sock:
        sock.sendall(frame)
        (length,) = _FRAME_LENGTH.unpack(_receive(sock, 4))
        _receive(sock, length)


def _receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def run_load(port: int, load: Load, per_connection: int | None = None) -> int:
    """Send the requests, ``window`` in flight per connection, until every one is answered;
    how many were answered."""
    count = load.per_connection if per_connection is None else per_connection
    frames = produce_frames(load)
    selector = selectors.DefaultSelector()
    sent, answered, pending = {}, {}, {}
    for i in range(load.connections):
        sock = socket.create_connection((HOST, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = min(load.window, count)
        sock.sendall(frames[i % load.partitions] * first)
        sent[sock], answered[sock], pending[sock] = first, 0, b""
        selector.register(sock, selectors.EVENT_READ, frames[i % load.partitions])
    finished = 0
    while finished < load.connections:
        for key, _ in selector.select(timeout=60):
            sock = cast(socket.socket, key.fileobj)
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the server closed a connection under load")
            buf, pos, got = pending[sock] + data, 0, 0
            while len(buf) - pos >= 4:
                (length,) = _FRAME_LENGTH.unpack_from(buf, pos)
                if len(buf) - pos - 4 < length:
                    break
                pos, got = pos + 4 + length, got + 1
            pending[sock], answered[sock] = buf[pos:], answered[sock] + got
            more = min(got, count - sent[sock])
            if more > 0:
                sock.sendall(key.data * more)
                sent[sock] += more
            if answered[sock] == count:
                selector.unregister(sock)
                sock.close()
                finished += 1
    return sum(answered.values())


def instructions(server: list[str], load: Load, *, creates_topic: bool, workdir: Path) -> int:
    """Instructions the server process ran for the measured load (warm-up excluded)."""
    out = workdir / "callgrind.out"
    log_path = workdir / "server.log"
    port = free_port()
    args = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            *[a.replace("{port}", str(port)) for a in server]]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    try:
        _wait_for_port(port, process, log_path)
        if creates_topic:
            create_topic(port, load.partitions)
        run_load(port, load, per_connection=min(200, load.per_connection))  # warm-up
        _callgrind_control("-i", "on", process.pid)
        run_load(port, load)
        _callgrind_control("-i", "off", process.pid)
        _callgrind_control("-d", process.pid)
    finally:
        process.terminate()
        process.wait(120)
    dumps = sorted(workdir.glob("callgrind.out.*"))
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump: {log_path.read_text()[-2000:]}")
    return dump_total(dumps[0].read_text())


def dump_total(dump: str) -> int:
    """The instruction total of a callgrind dump."""
    for line in dump.splitlines():
        if line.startswith(_TOTALS):
            return int(line.split()[1])
    raise RuntimeError(f"no {_TOTALS} line in the callgrind dump")


def _callgrind_control(*args: object) -> None:
    subprocess.run(["callgrind_control", *map(str, args)], check=True, capture_output=True)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text()[-2000:]}")
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the server did not listen on {port}: {log_path.read_text()[-2000:]}")


def kayak_server(flush: str) -> Callable[[Path], list[str]]:
    def argv(workdir: Path) -> list[str]:
        return [sys.executable, "-m", "kayak", "broker", "--data-dir", str(workdir / "data"),
                "--host", HOST, "--port", "{port}", "--flush", flush,
                "--no-schema-registry"]  # fmt: skip

    return argv


def empty_server(_workdir: Path) -> list[str]:
    return [sys.executable, str(REPO / "bench" / "empty_server.py"), "{port}", TOPIC]


def measure(flushes: list[str], load: Load) -> dict[str, int]:
    """Instructions per request, by server."""
    servers: list[tuple[str, Callable[[Path], list[str]], bool]]
    servers = [("empty server", empty_server, False)]
    servers += [(f"kayak --flush {flush}", kayak_server(flush), True) for flush in flushes]
    per_request: dict[str, int] = {}
    for name, server, creates_topic in servers:
        workdir = Path(tempfile.mkdtemp(prefix="request-instructions-"))
        try:
            argv = server(workdir)
            total = instructions(argv, load, creates_topic=creates_topic, workdir=workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        per_request[name] = round(total / load.requests)
        print(f"{name}: {per_request[name]:,} instructions per request", flush=True)
    return per_request


def report(per_request: dict[str, int], load: Load, markdown: bool) -> None:
    floor = per_request["empty server"]
    table = Table(["server", "instructions per request", "x empty server"])
    for name, count in per_request.items():
        table.add(name, f"{count:,}", times(count / floor))
    print()
    print(
        f"one-record ({load.value_size} B) acks=all Produce requests: {load.connections} "
        f"connections x {load.per_connection}, {load.window} in flight each, over "
        f"{load.partitions} partitions; counted by callgrind after a warm-up"
    )
    print(table.markdown() if markdown else table.text())


def parse_args(argv: list[str]) -> tuple[list[str], Load, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush", default="never,group", help="kayak's --flush modes, by comma")
    parser.add_argument("--requests", type=int, default=8000, help="measured requests")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--window", type=int, default=8, help="requests in flight per connection")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if args.requests < args.connections or args.connections < 1 or args.window < 1:
        parser.error("--requests must be at least --connections, both and --window positive")
    flushes = [f for f in args.flush.split(",") if f]
    if unknown := [f for f in flushes if f not in ("never", "group", "always")]:
        parser.error(f"unknown --flush mode {unknown[0]!r} (never, group or always)")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs valgrind and callgrind_control (Debian package valgrind)")
    per_connection = args.requests // args.connections
    load = Load(args.connections, args.window, per_connection)
    return flushes, load, args.markdown


def main(argv: list[str]) -> None:
    flushes, load, markdown = parse_args(argv)
    report(measure(flushes, load), load, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
