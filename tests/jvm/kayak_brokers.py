"""kayak brokers for the JVM peers' tests: a plain one, and one secured as README's Security
section sets it up (SASL_SSL with SCRAM users, ACLs, a super user), with the Java client's
properties files for each user (the truststore is the CA's PEM file, which Java 17's client
reads with ``ssl.truststore.type=PEM``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.certs import TlsFiles
from tests.fixtures.jvm import write_properties

_LISTENER = re.compile(r"listener (\w+) on ([\d.]+):(\d+)")
PASSWORDS = {"admin": "admin-secret", "app": "app-secret"}


def kayak_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "kayak", *args], input=stdin, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def java_client_properties(
    path: Path, tls: TlsFiles, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> Path:
    """A Java client's properties file for SASL_SSL with SCRAM as ``user``."""
    login = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return write_properties(
        path,
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{login} required username="{user}" password="{password}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": tls.ca,
        },
    )


@dataclass
class SecuredKayak:
    """``kayak broker`` with a PLAINTEXT and a SASL_SSL listener, users admin (super user)
    and app (SCRAM-SHA-512, no ACLs yet), ACLs enforced."""

    directory: Path
    tls: TlsFiles
    process: subprocess.Popen[bytes] | None = None
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def sasl_ssl(self) -> str:
        return self.addresses["SASL_SSL"]

    def properties(self, user: str, password: str | None = None) -> Path:
        """The Java client's properties file for ``user`` (its password unless given)."""
        name = f"{user}.properties" if password is None else f"{user}-{len(password)}.properties"
        secret = PASSWORDS.get(user, "") if password is None else password
        return java_client_properties(self.directory / name, self.tls, user, secret)

    def start(self, timeout: float = 30.0) -> SecuredKayak:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data = str(self.data_dir)
        kayak_cli("users", "add", "admin", "--password-stdin", "--data-dir", data,
                  stdin=PASSWORDS["admin"] + "\n")  # fmt: skip
        kayak_cli("users", "add", "app", "--password-stdin", "--mechanism", "SCRAM-SHA-512",
                  "--data-dir", data, stdin=PASSWORDS["app"] + "\n")  # fmt: skip
        log_path = self.directory / "broker.log"
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kayak", "-v", "broker", "--data-dir", data,
                 "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                 "--ssl-certificate-location", str(self.tls.server_cert),
                 "--ssl-key-location", str(self.tls.server_key),
                 "--super-users", "User:admin", "--schema-registry-port", "0",
                 "--group-initial-rebalance-delay-ms", "0"],
                stdout=log, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.addresses) < 2:
            if self.process.poll() is not None:
                raise RuntimeError(f"kayak broker exited: {log_path.read_text()[-2000:]}")
            text = log_path.read_text()
            self.addresses = {name: f"{h}:{p}" for name, h, p in _LISTENER.findall(text)}
            time.sleep(0.05)
        if len(self.addresses) < 2:
            self.stop()
            raise RuntimeError(f"kayak broker did not start: {log_path.read_text()[-2000:]}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.process = None


def json_lines(text: str) -> list[dict[str, object]]:
    """The JSON objects of a tool's output, one a line; other lines (warnings) are skipped."""
    found: list[dict[str, object]] = []
    for line in text.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found
