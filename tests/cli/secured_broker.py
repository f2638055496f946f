"""A ``kayak broker`` process whose only listener is SASL_SSL (SCRAM-SHA-512), started as a
user would: ``kayak users add``, then ``kayak broker --listeners SASL_SSL://...``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.certs import TlsFiles

_LISTENER = re.compile(r"listener SASL_SSL on ([\d.]+):(\d+)")
USER, PASSWORD = "admin", "admin-secret"


@dataclass(frozen=True)
class SecuredBroker:
    bootstrap_servers: str
    ca: Path
    log_path: Path

    def client_config(self) -> dict[str, str]:
        """What a client needs to reach it, as Kafka properties."""
        return {
            "bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD,
            "ssl.ca.location": str(self.ca),
        }  # fmt: skip

    def x_options(self) -> list[str]:
        """The same as ``-X`` options, without bootstrap.servers (that is ``-b``)."""
        return [
            arg
            for name, value in self.client_config().items()
            if name != "bootstrap.servers"
            for arg in ("-X", f"{name}={value}")
        ]


def _kayak(*args: str, stdin: str | None = None) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kayak", *args], input=stdin, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@contextmanager
def secured_broker(
    tmp_path: Path, tls_files: TlsFiles, *extra_args: str, listeners_expected: int = 1
) -> Iterator[SecuredBroker]:
    """Start the broker; ``listeners_expected`` SASL_SSL listener lines (one per shard with
    ``--shards``) are waited for; the first one's address is the bootstrap server."""
    data = tmp_path / "secured-data"
    data.mkdir()
    _kayak("users", "add", USER, "--password-stdin", "--mechanism", "SCRAM-SHA-512",
           "--data-dir", str(data), stdin=PASSWORD + "\n")  # fmt: skip
    log_path = tmp_path / "secured-broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kayak", "-v", "broker", "--data-dir", str(data),
             "--listeners", "SASL_SSL://127.0.0.1:0",
             "--ssl-certificate-location", str(tls_files.server_cert),
             "--ssl-key-location", str(tls_files.server_key),
             "--super-users", f"User:{USER}", "--schema-registry-port", "0",
             "--group-initial-rebalance-delay-ms", "0", *extra_args],
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        found: list[tuple[str, str]] = []
        deadline = time.monotonic() + 60
        while len(found) < listeners_expected:
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
            found = _LISTENER.findall(log_path.read_text())
        host, port = found[0]
        yield SecuredBroker(f"{host}:{port}", tls_files.ca, log_path)
    finally:
        process.terminate()
        process.wait(30)
