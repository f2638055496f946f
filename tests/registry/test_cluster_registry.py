"""``kayak registry``: the standalone registry, its schemas in a topic of a real cluster.

Every test runs against Apache Kafka (``_schemas``, as Confluent's registry keeps it) and a
``kayak broker`` process (which keeps ``_schemas`` for its own registry, so the standalone
one is given another topic, as Confluent's ``kafkastore.topic`` allows).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kayak.client import Admin
from kayak.client.admin.models import ConfigResource
from kayak.serde import AvroDeserializer, AvroSerializer
from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import ApacheKafka
from tests.registry.conftest import call, record_schema

_READY = re.compile(r"schema registry on (http://[\d.]+:\d+) \(schemas in (\S+) on (\S+)\)")


@dataclass
class Cluster:
    bootstrap: str
    topic: str  # where the standalone registry keeps its schemas


@dataclass
class RegistryProcess:
    """A ``kayak registry`` subprocess."""

    cluster: Cluster
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    extra: list[str] = field(default_factory=list)

    def start(self, timeout: float = 60.0) -> RegistryProcess:
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = [sys.executable, "-m", "kayak", "registry", "-b", self.cluster.bootstrap,
                "--port", "0", "--topic", self.cluster.topic, *self.extra]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[start:].decode(errors="replace")
            found = _READY.search(text)
            if found:
                assert found.group(2) == self.cluster.topic
                assert found.group(3) == self.cluster.bootstrap
                self.url = found.group(1)
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"registry exited: {text[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"registry did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(30)
        self.process = None
        return code


@pytest.fixture(params=["apache-kafka", "kayak"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        yield Cluster(kafka.bootstrap_servers, "_schemas")
        return
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        yield Cluster(broker.bootstrap_servers, "_schemas_standalone")
    finally:
        broker.stop()


@pytest.fixture
def registries(cluster: Cluster, tmp_path: Path) -> Iterator[list[RegistryProcess]]:
    """Registries the test starts (``start_registry``); stopped at the end."""
    started: list[RegistryProcess] = []
    yield started
    for registry in started:
        if registry.process is not None:
            registry.stop(signal.SIGKILL)


def start_registry(cluster: Cluster, started: list[RegistryProcess], tmp_path: Path) -> str:
    registry = RegistryProcess(cluster, tmp_path / f"registry-{len(started)}.log").start()
    started.append(registry)
    return registry.url


def subject_name() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def register(url: str, subject: str, schema: str) -> int:
    answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema})
    assert answer.status == 200, answer.document
    return int(answer.document["id"])


@pytest.mark.timeout(180)
def test_register_look_up_and_check_compatibility(
    cluster: Cluster, registries: list[RegistryProcess], tmp_path: Path
) -> None:
    url = start_registry(cluster, registries, tmp_path)
    subject = subject_name()
    v1 = record_schema("Order", ("id", "long"))
    v2 = record_schema("Order", ("id", "long"), ("note", "string", ""))
    breaking = record_schema("Order", ("id", "string"))

    first = register(url, subject, v1)
    assert register(url, subject, v1) == first  # the same schema: the same version and id
    assert call(url, "GET", f"/schemas/ids/{first}").document == {"schema": json.dumps(
        json.loads(v1), separators=(",", ":"))}  # fmt: skip
    found = call(url, "POST", f"/subjects/{subject}", {"schema": v1})
    assert (found.status, found.document["version"], found.document["id"]) == (200, 1, first)

    refused = call(url, "POST", f"/subjects/{subject}/versions", {"schema": breaking})
    assert (refused.status, refused.document["error_code"]) == (409, 409)
    check = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest",
                 {"schema": breaking})  # fmt: skip
    assert check.document == {"is_compatible": False}
    second = register(url, subject, v2)
    assert second > first
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1, 2]

    put = call(url, "PUT", f"/config/{subject}", {"compatibility": "NONE"})
    assert put.document == {"compatibility": "NONE"}
    assert register(url, subject, breaking) > second
    not_json = call(url, "POST", f"/subjects/{subject}/versions", raw=b"x",
                    headers={"Content-Type": "text/plain"})  # fmt: skip
    assert not_json.status == 415

    # The topic is the registry's: compacted, one partition.
    async def described() -> tuple[int, str]:
        async with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            topic = (await admin.describe_topics([cluster.topic]))[cluster.topic]
            configs = await admin.describe_configs(ConfigResource.topic(cluster.topic))
            return topic.partition_count, configs["cleanup.policy"].value or ""

    assert asyncio.run(described()) == (1, "compact")
    assert registries[0].stop(signal.SIGINT) == 0


@pytest.mark.timeout(180)
def test_a_restarted_registry_keeps_every_id(
    cluster: Cluster, registries: list[RegistryProcess], tmp_path: Path
) -> None:
    url = start_registry(cluster, registries, tmp_path)
    subject = subject_name()
    schemas = [record_schema("R", *[(f"f{j}", "int", 0) for j in range(i)]) for i in range(4)]
    ids = [register(url, subject, schema) for schema in schemas]
    call(url, "PUT", f"/config/{subject}", {"compatibility": "FULL"})
    gone = subject_name()
    gone_id = register(url, gone, record_schema("Gone", ("x", "int")))
    assert call(url, "DELETE", f"/subjects/{gone}").document == [1]
    assert call(url, "DELETE", f"/subjects/{gone}?permanent=true").document == [1]
    assert call(url, "DELETE", f"/subjects/{subject}/versions/1").document == 1
    assert registries[0].stop() == 0

    url = start_registry(cluster, registries, tmp_path)
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [2, 3, 4]
    assert call(url, "GET", f"/subjects/{gone}/versions").status == 404
    assert call(url, "GET", f"/schemas/ids/{gone_id}").status == 404
    assert [register(url, subject, schema) for schema in schemas[1:]] == ids[1:]
    for schema_id, schema in zip(ids, schemas, strict=True):
        shown = call(url, "GET", f"/schemas/ids/{schema_id}").document["schema"]
        assert json.loads(shown) == json.loads(schema)
    assert call(url, "GET", f"/config/{subject}").document == {"compatibilityLevel": "FULL"}
    newer = register(url, subject_name(), record_schema("Fresh", ("x", "int")))
    assert newer > max(*ids, gone_id), "an id handed out before the restart was handed out again"


@pytest.mark.timeout(240)
def test_two_registries_never_hand_out_one_id_for_two_schemas(
    cluster: Cluster, registries: list[RegistryProcess], tmp_path: Path
) -> None:
    urls = [start_registry(cluster, registries, tmp_path) for _ in range(2)]
    shared = subject_name()  # both register versions of this one subject too
    for subject in [shared, *(f"{shared}-{index}" for index in range(4))]:
        call(urls[0], "PUT", f"/config/{subject}", {"compatibility": "NONE"})

    def work(index: int) -> list[tuple[int, str]]:
        url = urls[index % 2]
        answers = []
        for n in range(6):
            schema = record_schema(f"W{index}x{n}", ("v", "int"))
            subject = shared if n % 2 else f"{shared}-{index}"
            answers.append((register(url, subject, schema), schema))
        return answers

    with ThreadPoolExecutor(4) as pool:
        answers = [pair for batch in pool.map(work, range(4)) for pair in batch]
    by_id: dict[int, set[str]] = {}
    for schema_id, schema in answers:
        by_id.setdefault(schema_id, set()).add(schema)
    assert all(len(schemas) == 1 for schemas in by_id.values()), by_id
    assert len(by_id) == len(answers)
    # Each registry follows the other's writes as they come (a read does not wait for them).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        shown = [call(url, "GET", f"/subjects/{shared}/versions").document for url in urls]
        if shown[0] == shown[1]:
            break
        time.sleep(0.1)
    for url in urls:
        for schema_id, schema in answers:
            shown = call(url, "GET", f"/schemas/ids/{schema_id}").document["schema"]
            assert json.loads(shown) == json.loads(schema), (url, schema_id)
    versions = [call(url, "GET", f"/subjects/{shared}/versions").document for url in urls]
    assert versions[0] == versions[1] == list(range(1, 13))


@pytest.mark.timeout(180)
def test_the_avro_serde_works_against_it(
    cluster: Cluster, registries: list[RegistryProcess], tmp_path: Path
) -> None:
    url = start_registry(cluster, registries, tmp_path)
    subject = subject_name()
    schema = {"type": "record", "name": "User", "fields": [
        {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}  # fmt: skip
    data = AvroSerializer(url).serialize(subject, schema, {"name": "ada", "age": 36})
    schema_id, value = AvroDeserializer(url).deserialize_with_id(data)
    assert value == {"name": "ada", "age": 36}
    found = call(url, "POST", f"/subjects/{subject}", {"schema": json.dumps(schema)})
    assert found.document["id"] == schema_id


def test_an_unreachable_cluster_is_a_one_line_error(tmp_path: Path) -> None:
    with socket_bound() as port:  # bound, never listening: connections are refused
        done = subprocess.run(
            [sys.executable, "-m", "kayak", "registry", "-b", f"127.0.0.1:{port}", "--port", "0"],
            capture_output=True, timeout=60,
        )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "connection refused" in lines[0], lines


class socket_bound:
    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        return int(self._socket.getsockname()[1])

    def __exit__(self, *_: object) -> None:
        self._socket.close()


@pytest.mark.timeout(120)
def test_a_kayak_broker_keeps_schemas_for_its_own_registry(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kayak", "registry", "-b", broker.bootstrap_servers,
             "--port", "0"],
            capture_output=True, timeout=60,
        )  # fmt: skip
    finally:
        broker.stop()
    assert done.returncode != 0
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "cannot create _schemas" in lines[0], lines
    assert "choose another topic" in lines[0]
