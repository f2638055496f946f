"""max.connections and max.connections.per.ip count TLS connections from accept, before the
handshake: sockets that connect and never say a word use up the limit (a real client is then
refused), give it back when they close, and are dropped after the handshake timeout. A real
``kayak broker`` process with an SSL listener, raw sockets and confluent-kafka."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.fixtures.certs import TlsFiles

pytestmark = pytest.mark.timeout(120)

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")


@dataclass
class TlsBrokerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def start_tls_broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[object]:
    started: list[TlsBrokerProcess] = []

    def start(*options: str) -> TlsBrokerProcess:
        log_path = tmp_path / f"broker{len(started)}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "kayak", "-v", "broker",
                 "--data-dir", str(tmp_path / f"data{len(started)}"),
                 "--listeners", "SSL://127.0.0.1:0", "--no-schema-registry",
                 "--ssl-certificate-location", str(tls_files.server_cert),
                 "--ssl-key-location", str(tls_files.server_key),
                 "--allow-everyone-if-no-acl-found", *options],
                stdout=log, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (found := _LISTENING.findall(log_path.read_text(errors="replace"))):
            assert process.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.05)
        running = TlsBrokerProcess(process, log_path, int(found[-1][1]))
        started.append(running)
        return running

    yield start
    for running in started:
        running.process.terminate()
        running.process.wait(30)


def silent_sockets(stack: ExitStack, port: int, count: int) -> list[socket.socket]:
    """``count`` TCP connections that never send a byte (no ClientHello)."""
    return [
        stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        for _ in range(count)
    ]


def admin(broker: TlsBrokerProcess, tls_files: TlsFiles) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
         "ssl.ca.location": str(tls_files.ca), "reconnect.backoff.max.ms": 200}
    )  # fmt: skip


def wait_for(condition: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("limit", ["--max-connections-per-ip", "--max-connections"])
def test_silent_tls_sockets_count_against_the_limit(
    start_tls_broker: object, tls_files: TlsFiles, limit: str
) -> None:
    # A long handshake timeout: the silent sockets hold their slots for the whole test.
    broker: TlsBrokerProcess = start_tls_broker(  # type: ignore[operator]
        limit, "2", "--request-receive-timeout-ms", "120000"
    )
    name = limit.removeprefix("--").replace("-", ".")
    with ExitStack() as stack:
        silent = silent_sockets(stack, broker.port, 2)
        client = admin(broker, tls_files)
        with pytest.raises(KafkaException):
            client.list_topics(timeout=4)  # every connection it opens is closed at accept
        assert f"({name}=2)" in broker.log_text() or f"{name}=2" in broker.log_text()
        for sock in silent:  # accepted, not refused: they are still open
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    # Closed: their slots come back, and the same client gets through.
    metadata = client.list_topics(timeout=30)
    assert metadata.brokers


def test_a_tls_socket_that_never_shakes_hands_is_dropped(
    start_tls_broker: object, tls_files: TlsFiles
) -> None:
    broker: TlsBrokerProcess = start_tls_broker(  # type: ignore[operator]
        "--max-connections-per-ip", "1", "--request-receive-timeout-ms", "1000"
    )
    with ExitStack() as stack:
        (silent,) = silent_sockets(stack, broker.port, 1)
        assert silent.recv(1) == b""  # the broker closed it (the socket timeout is 30 s)
        wait_for(lambda: "no TLS handshake within 1000 ms" in broker.log_text(),
                 "the dropped handshake was not logged")  # fmt: skip
        # Its slot is free again: the only one this address has.
        assert admin(broker, tls_files).list_topics(timeout=30).brokers
