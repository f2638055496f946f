"""The registry lives in the ``_schemas`` topic: restarts, crashes, and Kafka clients reading it."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from kayak.client import Admin, Consumer, TopicPartition
from tests.registry.conftest import RegistryBroker, call, record_schema


def register(url: str, subject: str, schema: str) -> int:
    answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema})
    assert answer.status == 200, answer.document
    return int(answer.document["id"])


def snapshot(url: str) -> dict[str, object]:
    """Everything a client can see, for comparing before and after a restart."""
    subjects = call(url, "GET", "/subjects?deleted=true").document
    return {
        "subjects": call(url, "GET", "/subjects").document,
        "all": subjects,
        "versions": {
            s: [call(url, "GET", f"/subjects/{s}/versions/{v}?deleted=true").document
                for v in call(url, "GET", f"/subjects/{s}/versions?deleted=true").document]
            for s in subjects
        },
        "config": call(url, "GET", "/config").document,
        "config-a": call(url, "GET", "/config/a").document,
    }  # fmt: skip


def test_restart_keeps_ids_versions_deletes_and_configs(own_registry: RegistryBroker) -> None:
    url = own_registry.url
    a1 = register(url, "a", record_schema("A", ("x", "int")))
    a2 = register(url, "a", record_schema("A", ("x", "int"), ("y", "int", 0)))
    b1 = register(url, "b", record_schema("B", ("x", "string")))
    assert register(url, "c", record_schema("A", ("x", "int"))) == a1
    assert call(url, "DELETE", "/subjects/b").status == 200
    assert call(url, "DELETE", "/subjects/c").status == 200
    assert call(url, "DELETE", "/subjects/c?permanent=true").status == 200
    assert call(url, "PUT", "/config", {"compatibility": "FULL"}).status == 200
    assert call(url, "PUT", "/config/a", {"compatibility": "NONE"}).status == 200
    before = snapshot(url)

    own_registry.restart()  # SIGTERM: a clean shutdown
    url = own_registry.url
    assert snapshot(url) == before
    assert before["subjects"] == ["a"] and before["all"] == ["a", "b"]
    # New ids continue above every id ever handed out, and old ones keep their schemas.
    a3 = register(url, "a", record_schema("A", ("z", "boolean")))  # NONE allows it
    assert a3 > max(a1, a2, b1)
    assert json.loads(call(url, "GET", f"/schemas/ids/{b1}").document["schema"])["name"] == "B"
    assert register(url, "b", record_schema("B", ("x", "string"))) == b1

    # A crash (SIGKILL) right after the answers: the answered registrations survive.
    d1 = register(url, "d", record_schema("D", ("x", "int")))
    after_crash = snapshot(url)
    own_registry.broker.stop(signal.SIGKILL)
    own_registry.broker.start()
    own_registry.url = url = call_url(own_registry)
    assert snapshot(url) == after_crash
    assert call(url, "GET", "/subjects/d/versions/1").document["id"] == d1
    assert register(url, "e", record_schema("E", ("x", "int"))) == d1 + 1


def call_url(running: RegistryBroker) -> str:
    from tests.registry.conftest import registry_url

    return registry_url(running.broker)


def test_schemas_topic_is_visible_and_consumable(own_registry: RegistryBroker) -> None:
    url = own_registry.url
    first = register(url, "orders-value", record_schema("Order", ("id", "long")))
    assert call(url, "PUT", "/config/orders-value", {"compatibility": "FULL"}).status == 200
    assert call(url, "DELETE", "/subjects/orders-value").status == 200
    bootstrap = own_registry.broker.bootstrap_servers

    async def read() -> tuple[list[str], list[tuple[Any, Any]]]:
        async with Admin({"bootstrap.servers": bootstrap}) as admin:
            topics = list(await admin.list_topics())
        records: list[tuple[Any, Any]] = []
        async with Consumer({"bootstrap.servers": bootstrap,
                             "auto.offset.reset": "earliest"}) as consumer:  # fmt: skip
            consumer.assign([TopicPartition("_schemas", 0)])
            while len(records) < 4:
                batch = await consumer.getmany(timeout_ms=5000)
                assert batch, f"only {len(records)} records arrived"
                for found in batch.values():
                    records += [(r.key, r.value) for r in found]
        return topics, records

    topics, records = asyncio.run(read())
    assert "_schemas" in topics
    decoded: list[tuple[Any, Any]] = [
        (json.loads(bytes(k)), None if v is None else json.loads(bytes(v))) for k, v in records
    ]
    assert decoded[0] == (
        {"keytype": "SCHEMA", "subject": "orders-value", "version": 1, "magic": 1},
        {"subject": "orders-value", "version": 1, "id": first,
         "schema": json.dumps(json.loads(record_schema("Order", ("id", "long"))),
                              separators=(",", ":")),
         "deleted": False},
    )  # fmt: skip
    assert decoded[1] == (
        {"keytype": "CONFIG", "subject": "orders-value", "magic": 0},
        {"compatibilityLevel": "FULL"},
    )
    assert decoded[2][1]["deleted"] is True
    assert decoded[3][0]["keytype"] == "DELETE_SUBJECT"


def test_foreign_records_in_schemas_do_not_break_a_restart(tmp_path: Path) -> None:
    """Clients cannot produce to _schemas; junk that reached it anyway (a copied data
    directory, an older kayak that allowed it) is skipped on replay."""
    from kayak.broker import Broker
    from kayak.client import Producer
    from kayak.errors import KafkaError
    from kayak.protocol.records import build_record_batch

    junk = [
        (b"not json", b"{}"),
        (b'{"keytype":"SCHEMA","subject":"s","version":2,"magic":1}', b'{"id": "x"}'),
    ]

    async def scenario() -> None:
        async with Broker(tmp_path / "d", port=0, schema_registry_port=0) as broker:
            url = broker.schema_registry_url
            assert url is not None and broker.context is not None
            first = await asyncio.to_thread(register, url, "s", record_schema("S", ("x", "int")))
            async with Producer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
                try:
                    await (await producer.send("_schemas", b"{}", key=b"not json"))
                except KafkaError:
                    pass
                else:
                    raise AssertionError("a client produced to _schemas")
            reuse = json.dumps({"subject": "t", "version": 1, "id": first, "schema": '"string"'})
            keys = [k for k, _ in junk] + [b'{"keytype":"SCHEMA","subject":"t","version":1}']
            values = [v for _, v in junk] + [reuse.encode()]  # reuses an id: refused
            log = broker.context.catalog.partition("_schemas", 0).log
            log.append(build_record_batch(values, keys=keys))  # the log assigns offsets
        async with Broker(tmp_path / "d", port=0, schema_registry_port=0) as again:
            url = again.schema_registry_url
            assert url is not None
            assert (await asyncio.to_thread(call, url, "GET", "/subjects")).document == ["s"]
            versions = await asyncio.to_thread(call, url, "GET", "/subjects/s/versions")
            assert versions.document == [1]
            by_id = await asyncio.to_thread(call, url, "GET", f"/schemas/ids/{first}")
            assert by_id.document["schema"] != '"string"'

    asyncio.run(scenario())


def test_busy_port_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "kayak", "broker", "--data-dir", str(tmp_path / "d"),
             "--port", "0", "--schema-registry-port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.stderr
    assert "schema registry" in errors[0] and str(port) in errors[0]
    assert "Traceback" not in result.stderr


def test_no_schema_registry_flag(tmp_path: Path) -> None:
    from tests.broker.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path / "d", extra_args=["--no-schema-registry"]).start()
    try:
        assert "schema registry on" not in broker.log_text()
    finally:
        broker.stop()
