"""Registry TLS and credentials reach every client of the registry: ``kayak cdc run`` and
``kayak pipeline run`` (``-X`` with Confluent's property names), kayak.serde's Avro
serializer and deserializer (Confluent's settings dict), all against the broker's HTTPS
registry with a private CA and basic authentication, credentials never in the URL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.errors import ConfigError, SchemaRegistryError
from kayak.pipeline.spec import PipelineSpec
from kayak.serde import AvroDeserializer, AvroSerializer, SchemaRegistryClient
from kayak.serde.registry import split_registry_properties
from tests.fixtures.certs import TlsFiles
from tests.registry.conftest import RegistryBroker, start_registry_broker
from tests.registry.test_registry_security import ADMIN, WRITER, add_users

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
) -> Iterator[RegistryBroker]:
    """A broker (plaintext Kafka) whose registry is HTTPS, signed by the test's private CA,
    with basic authentication; ``writer`` may register schemas."""
    data_dir = tmp_path_factory.mktemp("registry-settings") / "data"
    add_users(data_dir)
    running = start_registry_broker(
        data_dir,
        "--schema-registry-tls", "--schema-registry-auth",
        "--schema-registry-writers", WRITER[0],
        "--super-users", f"User:{ADMIN[0]}",
        "--ssl-certificate-location", str(tls_files.server_cert),
        "--ssl-key-location", str(tls_files.server_key),
    )  # fmt: skip
    assert running.url.startswith("https://")
    yield running
    running.broker.stop()


def admin_client(url: str, tls_files: TlsFiles) -> SchemaRegistryClient:
    return SchemaRegistryClient(
        url, config={"basic.auth.user.info": ":".join(ADMIN), "ssl.ca.location": str(tls_files.ca)}
    )


def test_cdc_run_registers_schemas_with_x_registry_properties(
    secured: RegistryBroker, tls_files: TlsFiles, tmp_path: Path
) -> None:
    database = tmp_path / "shop.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(1, "kayak"), (2, "paddle")])
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    kayak = [sys.executable, "-m", "kayak"]
    subprocess.run([*kayak, "cdc", "enable", str(database), "orders"], check=True, timeout=60)
    log_path = tmp_path / "cdc.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*kayak, "cdc", "run", str(database), "orders",
             "-b", secured.broker.bootstrap_servers, "--prefix", prefix,
             # the URL, the CA and the credentials, none of them in the URL itself
             "-X", f"schema.registry.url={secured.url}",
             "-X", f"schema.registry.ssl.ca.location={tls_files.ca}",
             "-X", "basic.auth.credentials.source=USER_INFO",
             "-X", f"basic.auth.user.info={':'.join(WRITER)}",
             "-X", "linger.ms=5"],  # a Kafka property next to them still reaches the producer
            stdout=log, stderr=log,
        )  # fmt: skip
    registry = admin_client(secured.url, tls_files)
    expected = {f"{prefix}.main.orders-key", f"{prefix}.main.orders-value"}
    try:
        deadline = time.monotonic() + 60
        while not expected <= set(registry.subjects()):
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert registry.latest_version(f"{prefix}.main.orders-value").schema["type"] == "record"
    assert "401" not in log_path.read_text()


def test_cdc_run_without_the_ca_fails_with_one_line(
    secured: RegistryBroker, tmp_path: Path
) -> None:
    """The control: without the CA (the system store does not trust it) the same run stops,
    naming the registry."""
    database = tmp_path / "shop.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (1)")
    kayak = [sys.executable, "-m", "kayak"]
    subprocess.run([*kayak, "cdc", "enable", str(database), "orders"], check=True, timeout=60)
    done = subprocess.run(
        [*kayak, "cdc", "run", str(database), "orders", "-b", secured.broker.bootstrap_servers,
         "--registry-url", secured.url, "-X", f"basic.auth.user.info={':'.join(WRITER)}"],
        capture_output=True, timeout=90,
    )  # fmt: skip
    assert done.returncode != 0
    assert "schema registry" in done.stderr.decode()


def test_avro_serde_takes_confluents_settings_dict(
    secured: RegistryBroker, tls_files: TlsFiles
) -> None:
    settings = {
        "url": secured.url,
        "basic.auth.credentials.source": "USER_INFO",
        "basic.auth.user.info": ":".join(WRITER),
        "ssl.ca.location": str(tls_files.ca),
    }
    schema = {"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]}
    subject = f"ping-{uuid.uuid4().hex[:8]}-value"
    data = AvroSerializer(settings).serialize(subject, schema, {"n": 7})
    # The prefixed spelling (as in a Kafka client config) works too.
    reader = AvroDeserializer({f"schema.registry.{k}": v for k, v in settings.items()})
    assert reader.deserialize(data) == {"n": 7}
    # Without credentials the same registry refuses (so the settings above did the work).
    with pytest.raises(SchemaRegistryError) as refused:
        AvroSerializer({"url": secured.url, "ssl.ca.location": str(tls_files.ca)}).serialize(
            f"other-{subject}", schema, {"n": 1}
        )
    assert refused.value.http_status == 401


def test_pipeline_spec_moves_registry_properties_out_of_the_kafka_ones(tmp_path: Path) -> None:
    spec = PipelineSpec(
        source=f"sqlite:{tmp_path / 's.db'}", tables=["t"], target=f"sqlite:{tmp_path / 't.db'}",
        work_dir=tmp_path / "work", bootstrap_servers="127.0.0.1:9092",
        client_options={
            "schema.registry.url": "https://registry.example:8081",
            "schema.registry.ssl.ca.location": "/ca.pem",
            "basic.auth.user.info": "u:p",
            "ssl.ca.location": "/kafka-ca.pem",  # the brokers' CA: stays a Kafka property
            "security.protocol": "SSL",
        },
    )  # fmt: skip
    assert spec.registry_url == "https://registry.example:8081"
    assert spec.registry_config == {"ssl.ca.location": "/ca.pem", "basic.auth.user.info": "u:p"}
    assert spec.client_options == {"ssl.ca.location": "/kafka-ca.pem", "security.protocol": "SSL"}


def test_pipeline_run_takes_the_registry_url_from_x(tmp_path: Path) -> None:
    """-b without --registry-url is a usage error unless -X schema.registry.url names it."""
    kayak = [sys.executable, "-m", "kayak", "pipeline", "run", "--source",
             f"sqlite:{tmp_path / 'missing.db'}", "--table", "t",
             "--target", f"sqlite:{tmp_path / 't.db'}", "--work-dir", str(tmp_path / "w"),
             "-b", "127.0.0.1:1", "--metrics-port", "0"]  # fmt: skip
    without = subprocess.run(kayak, capture_output=True, timeout=60)
    assert without.returncode == 2 and b"--registry-url is required" in without.stderr
    given = subprocess.run(
        [*kayak, "-X", "schema.registry.url=https://127.0.0.1:1"], capture_output=True, timeout=60
    )
    assert b"--registry-url is required" not in given.stderr + given.stdout
    assert given.returncode == 1  # it went on, to the missing source


def test_registry_properties_are_checked() -> None:
    registry, rest = split_registry_properties(
        {"schema.registry.basic.auth.user.info": "u:p", "acks": "all"}
    )
    assert (registry, rest) == ({"basic.auth.user.info": "u:p"}, {"acks": "all"})
    with pytest.raises(ConfigError, match="not a schema registry client property"):
        SchemaRegistryClient({"url": "https://r.example", "schema.registry.sll.ca.location": "x"})
    with pytest.raises(ConfigError, match="no url"):
        SchemaRegistryClient({"basic.auth.user.info": "u:p"})
    with pytest.raises(ConfigError, match=r"ssl\.certificate\.location"):
        SchemaRegistryClient("https://r.example", config={"ssl.key.location": "k.pem"})
