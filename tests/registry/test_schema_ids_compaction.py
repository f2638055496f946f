"""``_schemas`` is compacted by the log cleaner, and no schema id is ever lost to it: a hard
delete's tombstone, once removed past ``delete.retention.ms``, leaves replay no record of the
id it deleted, so the store keeps the highest id handed out under a key it never tombstones.
Topics written before that record existed replay to the same ids and are made safe at start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kayak.broker import Broker
from kayak.broker.log.replay import replay_records
from kayak.protocol.records import build_record_batch
from tests.registry.conftest import (
    RegistryBroker,
    call,
    record_schema,
    registry_url,
    start_registry_broker,
)

TOPIC = "_schemas"
# Small segments, tombstones kept only briefly, and any dirt worth a cleaning.
FAST_CLEANING = {
    "segment.ms": "300",
    "delete.retention.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
}
Decoded = list[tuple[dict[str, Any], dict[str, Any] | None]]


def register(url: str, subject: str, schema: str) -> int:
    answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema})
    assert answer.status == 200, answer.document
    return int(answer.document["id"])


def hard_delete(url: str, subject: str, version: int) -> None:
    """As Confluent's API has it: a soft delete first, then the permanent one."""
    path = f"/subjects/{subject}/versions/{version}"
    assert call(url, "DELETE", path).status == 200
    assert call(url, "DELETE", f"{path}?permanent=true").status == 200


def decode(records: list[tuple[bytes | None, bytes | None]]) -> Decoded:
    return [(json.loads(k or b"null"), None if v is None else json.loads(v)) for k, v in records]


def read_schemas(bootstrap: str) -> Decoded:
    """Every record of ``_schemas``, as librdkafka reads them: up to the high watermark, or
    until nothing more comes (compaction may have emptied the log's tail, as in Kafka, and
    then a consumer's position stays below the high watermark)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read: list[tuple[bytes | None, bytes | None]] = []
        position, quiet_since = 0, time.monotonic()
        while position < high and time.monotonic() - quiet_since < 3:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            read.append((msg.key(), msg.value()))
            offset = msg.offset()
            assert offset is not None
            position, quiet_since = offset + 1, time.monotonic()
        return decode(read)
    finally:
        consumer.close()


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def schema_keys(decoded: Decoded, subject: str) -> list[tuple[int, bool]]:
    """(version, is a tombstone) of every SCHEMA record of ``subject``."""
    return [(key["version"], value is None) for key, value in decoded
            if key.get("keytype") == "SCHEMA" and key.get("subject") == subject]  # fmt: skip


def recorded_max_ids(decoded: Decoded) -> list[int]:
    return [value["maxId"] for key, value in decoded
            if key.get("keytype") == "SCHEMA_ID" and value is not None]  # fmt: skip


def speed_up_cleaning(running: RegistryBroker) -> None:
    """Give ``_schemas`` FAST_CLEANING. No client may alter an internal topic's configs, so
    the broker is stopped and its cluster map edited, as an operator could."""
    running.broker.stop()
    catalog_file = running.broker.data_dir / "topics.json"
    cluster_map = json.loads(catalog_file.read_text())
    cluster_map["topics"][TOPIC]["configs"].update(FAST_CLEANING)
    catalog_file.write_text(json.dumps(cluster_map))
    running.broker.start()
    running.url = registry_url(running.broker)


def test_a_hard_deleted_id_is_never_handed_out_again_after_compaction(tmp_path: Path) -> None:
    running: RegistryBroker = start_registry_broker(
        tmp_path / "data", "--log-cleaner-backoff-ms", "200"
    )
    try:
        url, bootstrap = running.url, running.broker.bootstrap_servers
        first_schema = record_schema("Event", ("id", "long"))
        first = register(url, "events", first_schema)
        second = register(url, "events", record_schema("Event", ("id", "long"), ("n", "int", 0)))
        assert (first, second) == (1, 2)
        speed_up_cleaning(running)
        url, bootstrap = running.url, running.broker.bootstrap_servers
        hard_delete(url, "events", second)

        # The cleaner keeps the newest record per key, then drops the tombstone itself once
        # past delete.retention.ms: nothing of version 2 (the only carrier of id 2) is left.
        def only_version_1_left() -> bool:
            return schema_keys(read_schemas(bootstrap), "events") == [(1, False)]

        wait_for("the tombstone of events/2 cleaned away", only_version_1_left)
        assert recorded_max_ids(read_schemas(bootstrap)) == [second]

        running.restart()
        url = running.url
        third = register(url, "others", record_schema("Other", ("name", "string")))
        assert third == 3 and third > max(first, second)
        by_id = call(url, "GET", f"/schemas/ids/{first}")
        assert by_id.status == 200
        assert json.loads(by_id.document["schema"]) == json.loads(first_schema)
        assert call(url, "GET", f"/schemas/ids/{second}").status == 404
        assert call(url, "GET", "/subjects/events/versions").document == [1]
    finally:
        running.broker.stop()


# -- topics written before the SCHEMA_ID record ------------------------------------------


def _key(keytype: str, subject: str | None, version: int | None = None) -> bytes:
    """A key exactly as kayak wrote it before the SCHEMA_ID record (and writes it still)."""
    if keytype == "SCHEMA":
        document: dict[str, Any] = {"keytype": keytype, "subject": subject,
                                    "version": version, "magic": 1}  # fmt: skip
    else:
        document = {"keytype": keytype, "subject": subject, "magic": 0}
    return json.dumps(document, separators=(",", ":")).encode()


def _value(subject: str, version: int, schema_id: int, schema: str, deleted: bool) -> bytes:
    canonical = json.dumps(json.loads(schema), separators=(",", ":"))
    return json.dumps({"subject": subject, "version": version, "id": schema_id,
                       "schema": canonical, "deleted": deleted},
                      separators=(",", ":")).encode()  # fmt: skip


A1 = record_schema("A", ("x", "int"))
A2 = record_schema("A", ("x", "int"), ("y", "int", 0))
B1 = record_schema("B", ("x", "string"))
# What an older kayak wrote for: a/1, a/2, b/1 (ids 1, 2, 3), a level for a, then b soft
# deleted and hard deleted: id 3, the highest, is left only in b/1's value and tombstone.
OLD_BATCHES: list[list[tuple[bytes, bytes | None]]] = [
    [(_key("SCHEMA", "a", 1), _value("a", 1, 1, A1, False))],
    [(_key("SCHEMA", "a", 2), _value("a", 2, 2, A2, False))],
    [(_key("SCHEMA", "b", 1), _value("b", 1, 3, B1, False))],
    [(_key("CONFIG", "a"), b'{"compatibilityLevel":"NONE"}')],
    [(_key("SCHEMA", "b", 1), _value("b", 1, 3, B1, True)),
     (_key("DELETE_SUBJECT", "b"), b'{"subject":"b","version":1}')],
    [(_key("SCHEMA", "b", 1), None)],
]  # fmt: skip


def _write_old_topic(data_dir: Path) -> None:
    async def scenario() -> None:
        async with Broker(data_dir, port=0) as broker:  # no registry: nothing else writes
            assert broker.context is not None
            catalog = broker.context.catalog
            catalog.create(TOPIC, 1, {"cleanup.policy": "compact", **FAST_CLEANING}, owners=[0])
            plog = catalog.partition(TOPIC, 0).log
            for batch in OLD_BATCHES:
                keys = [k for k, _ in batch]
                plog.append(build_record_batch([v for _, v in batch], keys=keys))

    asyncio.run(scenario())


def _records(broker: Broker) -> Decoded:
    assert broker.context is not None
    plog = broker.context.catalog.partition(TOPIC, 0).log
    records = replay_records(plog)
    return decode([(None if r.key is None else bytes(r.key),
                    None if r.value is None else bytes(r.value)) for r in records])  # fmt: skip


def test_an_old_topic_replays_to_the_same_ids_and_keeps_them_through_compaction(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "d"
    _write_old_topic(data_dir)

    async def get(broker: Broker, path: str) -> Any:
        assert broker.schema_registry_url is not None
        return await asyncio.to_thread(call, broker.schema_registry_url, "GET", path)

    async def scenario() -> None:
        settings: dict[str, Any] = {"port": 0, "schema_registry_port": 0,
                                    "log_cleaner_backoff_ms": 200}  # fmt: skip
        async with Broker(data_dir, **settings) as broker:
            # The same ids the old topic always replayed to.
            assert (await get(broker, "/subjects")).document == ["a"]
            a1, a2 = [(await get(broker, f"/subjects/a/versions/{v}")).document["id"]
                      for v in (1, 2)]  # fmt: skip
            assert (a1, a2) == (1, 2)
            assert json.loads((await get(broker, "/schemas/ids/2")).document["schema"]) == (
                json.loads(A2)
            )
            assert (await get(broker, "/schemas/ids/3")).status == 404
            assert (await get(broker, "/config/a")).document == {"compatibilityLevel": "NONE"}
            # The start recorded id 3, which only b/1's value and tombstone showed ...
            assert recorded_max_ids(_records(broker)) == [3]
            # ... before the cleaner removed both.
            deadline = time.monotonic() + 60
            while schema_keys(_records(broker), "b") and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
            assert schema_keys(_records(broker), "b") == [], _records(broker)
        async with Broker(data_dir, **settings) as again:
            before = _records(again)
            assert again.schema_registry_url is not None
            new_id = await asyncio.to_thread(register, again.schema_registry_url, "c",
                                             record_schema("C", ("z", "boolean")))  # fmt: skip
            assert new_id == 4
            # A topic that already records its highest id gets no second SCHEMA_ID at start.
            assert recorded_max_ids(before) == [3]

    asyncio.run(scenario())
