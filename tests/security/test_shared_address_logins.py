"""One misconfigured client must not lock out the good clients that share its address (a NAT,
a Kubernetes node): a SASL_SSL broker process, a confluent-kafka AdminClient with a wrong
password left reconnecting, and from the same address ``kayak produce --command-config``,
``kayak consume -X``, confluent-kafka and kayak's own client logging in with the right one.
Then kayak's client against a broker that refuses a login for now and says when to retry:
it retries; a wrong password stays a final error naming the mechanism and the user."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kayak.broker.security.login_limiter import LoginLimiter
from kayak.client import Consumer as KayakConsumer
from kayak.client import Producer as KayakProducer
from kayak.client import TopicPartition as KayakTopicPartition
from kayak.client.security.sasl import SaslLoginThrottledError
from kayak.errors import SaslAuthenticationFailedError
from tests.fixtures.certs import TlsFiles
from tests.security.test_sasl_broker import PASSWORD, SASL, add_users, plain_login, sasl_settings
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(180)

MECHANISM = "SCRAM-SHA-512"
_LISTENER = re.compile(r"listener (\w+) on ([\d.]+):(\d+)")
_FAILED = "failed for user 'alice' from 127.0.0.1"


def _kayak(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", *args], input=stdin, capture_output=True, text=True,
        timeout=90, check=False,
    )  # fmt: skip


@pytest.fixture
def broker_process(tmp_path: Path, tls_files: TlsFiles) -> Iterator[tuple[str, Path]]:
    """A SASL_SSL broker started by ``kayak broker`` with its default login limiter; its
    bootstrap address and log file."""
    data = tmp_path / "data"
    data.mkdir()
    added = _kayak("users", "add", "alice", "--password-stdin", "--mechanism", MECHANISM,
                   "--data-dir", str(data), stdin=PASSWORD + "\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kayak", "-v", "broker", "--data-dir", str(data),
             "--listeners", "SASL_SSL://127.0.0.1:0",
             "--ssl-certificate-location", str(tls_files.server_cert),
             "--ssl-key-location", str(tls_files.server_key),
             "--super-users", "User:alice", "--group-initial-rebalance-delay-ms", "0",
             "--schema-registry-port", "0"],  # never the default 8081: others may hold it
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        found: list[tuple[str, str, str]] = []
        while not found and time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text()[-2000:]
            found = _LISTENER.findall(log_path.read_text())
            time.sleep(0.05)
        assert found, log_path.read_text()[-2000:]
        _, host, port = found[0]
        yield f"{host}:{port}", log_path
    finally:
        process.terminate()
        process.wait(30)


def client_config(bootstrap: str, files: TlsFiles, password: str = PASSWORD) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM, "sasl.username": "alice", "sasl.password": password,
        "ssl.ca.location": str(files.ca),
    }  # fmt: skip


class Hammering:
    """A confluent-kafka AdminClient with a wrong password, kept busy (librdkafka reconnects
    and logs in again after every failure) until the ``with`` block ends."""

    def __init__(self, config: dict[str, str]) -> None:
        # A service in a restart loop: librdkafka reconnects quickly after each failure.
        self._admin = AdminClient(
            {**config, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            # It is expected to fail, again and again.
            with contextlib.suppress(Exception):
                self._admin.list_topics(timeout=0.5)

    def __enter__(self) -> Hammering:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def failures(log_path: Path) -> int:
    return log_path.read_text(errors="replace").count(_FAILED)


def wait_for_failures(log_path: Path, at_least: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (count := failures(log_path)) < at_least:
        assert time.monotonic() < deadline, f"only {count} failed logins in {timeout}s"
        time.sleep(0.1)
    return count


def cli_security_args(config: dict[str, str]) -> list[str]:
    return [arg for key, value in config.items() if key != "bootstrap.servers"
            for arg in ("-X", f"{key}={value}")]  # fmt: skip


def confluent_round_trip(config: dict[str, str], topic: str) -> list[bytes]:
    producer = Producer({**config, "linger.ms": 0})
    for i in range(3):
        producer.produce(topic, b"cf-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            for message in consumer.consume(3, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


async def kayak_round_trip(config: dict[str, object], topic: str) -> list[bytes]:
    async with KayakProducer(config) as producer:
        for i in range(3):
            await producer.send_and_wait(topic, b"ky-%d" % i)
    async with KayakConsumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([KayakTopicPartition(topic, 0)])
        found: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(found) < 3 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1_000)
            found += [r.value for records in batches.values() for r in records if r.value]
    return found


def test_a_client_with_a_wrong_password_does_not_lock_out_good_ones_on_its_address(
    broker_process: tuple[str, Path], tls_files: TlsFiles, tmp_path: Path
) -> None:
    bootstrap, log_path = broker_process
    good = client_config(bootstrap, tls_files)
    with Hammering(client_config(bootstrap, tls_files, password="not-the-password")):
        # Well past the limiter's budget (10 failures): its failures are answered late now.
        before = wait_for_failures(log_path, 15)

        properties = tmp_path / "client.properties"
        properties.write_text(
            "".join(f"{k}={v}\n" for k, v in good.items() if k != "bootstrap.servers")
        )
        produced = _kayak("produce", "-b", bootstrap, "-t", "cli", "--command-config",
                          str(properties), stdin="one\ntwo\nthree\n")  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        consumed = _kayak("consume", "-b", bootstrap, "-t", "cli", "--from-beginning", "-c", "3",
                          *cli_security_args(good))  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.split() == ["one", "two", "three"]

        assert confluent_round_trip(good, "cf") == [b"cf-0", b"cf-1", b"cf-2"]
        assert asyncio.run(kayak_round_trip(dict(good), "ky")) == [b"ky-0", b"ky-1", b"ky-2"]

        # The bad client was refused all along: the good ones got in beside it.
        assert wait_for_failures(log_path, before + 2) > before
    assert "authentication as User:alice" in log_path.read_text()


# -- kayak's client and a login refused for now ---------------------------------------------


def test_kayak_retries_a_login_refused_for_now_and_not_a_wrong_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings()) as broker:
        assert broker.context is not None and broker.context.authenticator is not None
        # One slot, nobody may wait for it, and a second failure holds it for 4 s: a login
        # arriving meanwhile is refused unchecked, "retry in 4s".
        limiter = LoginLimiter(burst=1, per_second=0.25, max_in_flight=1, max_waiting=0)
        broker.context.authenticator.limiter = limiter
        bootstrap = broker.bootstrap_servers_for(SASL)
        client, answer = plain_login(bootstrap, "bob", "guess")
        client.close()
        assert answer.error_code == 58

        def second_guess() -> None:
            client, answer = plain_login(bootstrap, "bob", "guess again")
            client.close()
            assert answer.error_code == 58

        guessing = threading.Thread(target=second_guess)
        guessing.start()
        deadline = time.monotonic() + 10
        while limiter.in_flight("127.0.0.1") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap, "security.protocol": SASL,
            "sasl.mechanism": MECHANISM, "sasl.username": "alice", "sasl.password": PASSWORD,
        }  # fmt: skip
        with caplog.at_level("INFO"):
            assert asyncio.run(kayak_round_trip(config, "retried")) == [b"ky-0", b"ky-1", b"ky-2"]
        guessing.join(30)
        refusals = [r for r in caplog.records if "too many login attempts in progress" in r.message]
        assert refusals, "the broker never refused a login for now"
        assert any("retrying in" in r.message for r in caplog.records)

        # A wrong password is final: no retry, and the error says who and how.
        wrong = {**config, "sasl.password": "wrong"}

        async def log_in_wrongly() -> None:
            async with KayakProducer(wrong) as producer:
                await producer.send_and_wait("retried", b"never")

        with pytest.raises(SaslAuthenticationFailedError) as refused:
            asyncio.run(log_in_wrongly())
        assert not isinstance(refused.value, SaslLoginThrottledError)
        assert MECHANISM in str(refused.value) and "'alice'" in str(refused.value)
