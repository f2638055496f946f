"""README's "SASL_SSL broker with ACLs" setup, run as a user would: the same CLI commands,
then confluent-kafka as the application, an unknown user, a wrong password and an anonymous
plaintext client, and the registry over HTTPS with basic auth."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.schema_registry_client import Schema

from tests.fixtures.certs import TlsFiles

pytestmark = pytest.mark.timeout(120)

_LISTENER = re.compile(r"listener (\w+) on ([\d.]+):(\d+)")
_REGISTRY = re.compile(r"schema registry on (https?://\S+)")
PASSWORDS = {"admin": "admin-secret", "app": "app-secret", "eve": "eve-secret"}


def _kayak(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", *args], input=stdin, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def _check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def secured_broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[tuple[dict[str, str], str]]:
    (tmp_path / "data").mkdir()  # README: mkdir -p data
    data = str(tmp_path / "data")
    _check(_kayak("users", "add", "admin", "--password-stdin", "--data-dir", data,
                  stdin=PASSWORDS["admin"] + "\n"))  # fmt: skip
    for user in ("app", "eve"):
        _check(_kayak("users", "add", user, "--password-stdin", "--mechanism", "SCRAM-SHA-512",
                      "--data-dir", data, stdin=PASSWORDS[user] + "\n"))  # fmt: skip
    _check(_kayak("acls", "add", "--allow-principal", "User:app", "--producer", "--consumer",
                  "--topic", "orders", "--group", "billing", "--data-dir", data))  # fmt: skip
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kayak", "-v", "broker", "--data-dir", data,
             "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
             "--ssl-certificate-location", str(tls_files.server_cert),
             "--ssl-key-location", str(tls_files.server_key),
             "--super-users", "User:admin", "--schema-registry-port", "0",
             "--schema-registry-tls", "--schema-registry-writers", "admin",
             "--group-initial-rebalance-delay-ms", "0"],
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        addresses: dict[str, str] = {}
        registry = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(addresses) < 2 or not registry):
            assert process.poll() is None, log_path.read_text()[-2000:]
            text = log_path.read_text()
            addresses = {name: f"{host}:{port}" for name, host, port in _LISTENER.findall(text)}
            found = _REGISTRY.findall(text)
            registry = found[-1] if found else ""
            time.sleep(0.05)
        assert len(addresses) == 2 and registry, log_path.read_text()[-2000:]
        yield addresses, registry
    finally:
        process.terminate()
        process.wait(30)


def _client(bootstrap: str, tls_files: TlsFiles, user: str, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
        "ssl.ca.location": str(tls_files.ca),
    }  # fmt: skip


def _produce(config: dict[str, object], count: int) -> list[KafkaError | None]:
    producer = Producer({**config, "message.timeout.ms": 15000})
    outcomes: list[KafkaError | None] = []
    for i in range(count):
        producer.produce("orders", b"order-%d" % i, on_delivery=lambda e, _m: outcomes.append(e))
    producer.flush(20)
    return outcomes


def test_the_readme_setup_admits_the_app_and_nobody_else(
    secured_broker: tuple[dict[str, str], str], tls_files: TlsFiles
) -> None:
    addresses, registry_url = secured_broker
    app = _client(addresses["SASL_SSL"], tls_files, "app", PASSWORDS["app"])
    assert _produce(app, 100) == [None] * 100

    consumer = Consumer({**app, "group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(b"order-%d" % i for i in range(100))

    eve = _client(addresses["SASL_SSL"], tls_files, "eve", PASSWORDS["eve"])
    assert {e.code() for e in _produce(eve, 1) if e} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    wrong = _client(addresses["SASL_SSL"], tls_files, "app", "not-the-password")
    errors = _produce({**wrong, "message.timeout.ms": 5000}, 1)
    assert errors and all(e is not None for e in errors)
    anonymous = {"bootstrap.servers": addresses["PLAINTEXT"]}
    codes = {e.code() for e in _produce(anonymous, 1) if e}
    assert codes == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    def registry(user: str) -> SchemaRegistryClient:
        return SchemaRegistryClient({
            "url": registry_url, "ssl.ca.location": str(tls_files.ca),
            "basic.auth.user.info": f"{user}:{PASSWORDS[user]}",
        })  # fmt: skip

    schema = Schema('"string"', "AVRO")
    schema_id = registry("admin").register_schema("orders-value", schema)
    assert registry("app").get_schema(schema_id).schema_str == '"string"'
    with pytest.raises(SchemaRegistryError) as refused:
        registry("app").register_schema("orders-key", schema)
    assert refused.value.http_status_code == 403
