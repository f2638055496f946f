"""Change events on a real broker: Debezium envelope, Avro via the registry, tombstones."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentAvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kayak.cdc.capture import CaptureLoop
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.cdc.sqlite import SqliteSource, enable
from kayak.client.sync import Admin, Consumer, Producer
from kayak.client.types import TopicPartition
from kayak.pipeline.decode import ChangeDecoder
from kayak.pipeline.topics import topic_ensurer
from kayak.serde import SchemaRegistryClient
from tests.pipeline.conftest import CdcBroker

TOPIC = "shop.main.items"


@contextlib.contextmanager
def capture(db: str, broker: CdcBroker, value_format: str = "avro") -> Iterator[CaptureLoop]:
    enable(db, "items")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    admin = Admin({"bootstrap.servers": broker.bootstrap_servers})
    encoder = EventEncoder(
        prefix="shop", connector="sqlite", value_format=value_format,  # type: ignore[arg-type]
        registry=SchemaRegistryClient(broker.registry_url),
    )  # fmt: skip
    loop = CaptureLoop(
        SqliteSource(db, ["items"]),
        ChangePublisher(producer, encoder, db="source", ensure_topic=topic_ensurer(admin)),
    )
    loop.drain()
    try:
        yield loop
    finally:
        producer.close()
        admin.close()


def read_topic(broker: CdcBroker, topic: str = TOPIC) -> list:
    with Consumer({"bootstrap.servers": broker.bootstrap_servers}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records: list = []
        while batch := consumer.getmany(timeout_ms=2000):
            for recs in batch.values():
                records.extend(recs)
        return records


def test_events_are_debezium_envelopes_readable_by_confluent_avro(
    items_db: str, cdc_broker: CdcBroker
) -> None:
    conn = sqlite3.connect(items_db)
    with capture(items_db, cdc_broker) as loop:
        with conn:
            conn.execute("UPDATE items SET id = 7 WHERE region = 'us' AND id = 1")  # key change
            conn.execute("DELETE FROM items WHERE region = 'eu' AND id = 2")
            conn.execute("UPDATE items SET price = '99.99' WHERE region = 'eu' AND id = 1")
        loop.drain()
    records = read_topic(cdc_broker)
    # 3 snapshot rows; key change = delete + tombstone + create; delete + tombstone; update
    assert len(records) == 3 + 3 + 2 + 1
    confluent = ConfluentAvroDeserializer(ConfluentRegistry({"url": cdc_broker.registry_url}))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    key_ctx = SerializationContext(TOPIC, MessageField.KEY)
    values = [None if r.value is None else confluent(r.value, ctx) for r in records]
    keys = [confluent(r.key, key_ctx) for r in records]
    ops = [None if v is None else v["op"] for v in values]
    assert ops == ["r", "r", "r", "d", None, "c", "d", None, "u"]
    assert keys[3] == keys[4] == {"region": "us", "id": 1}
    assert keys[5] == {"region": "us", "id": 7}
    first = values[0]
    assert first is not None
    assert first["after"] == {"region": "eu", "id": 1, "name": "Zoë ⚓ 李雷 🎁", "price": "12.5",
                              "weight": 0.1, "photo": b"\x00\xff", "note": None}  # fmt: skip
    assert first["source"]["connector"] == "sqlite" and first["source"]["table"] == "items"
    assert first["source"]["snapshot"] == "true" and first["source"]["db"] == "source"
    assert values[1] is not None and values[1]["after"]["note"] == "x" * 300_000
    assert values[3] is not None and values[3]["before"]["id"] == 1 and values[3]["after"] is None
    positions = [v["source"]["pos"] for v in values if v is not None]
    assert positions == sorted(positions)
    # kayak's own decoder reads the same events and rebuilds the table from the schema alone
    decoder = ChangeDecoder(cdc_broker.registry_url)
    change = decoder.decode(TOPIC, records[-1].value)
    assert (change.key, change.op) == ('["eu",1]', "u") and change.position == positions[-1]
    assert change.key_values == ("eu", 1)
    assert decoder.table(change.schema_id).key == ("region", "id")
    assert change.after is not None and change.after["price"] == "99.99"
    registry = SchemaRegistryClient(cdc_broker.registry_url)
    assert {f"{TOPIC}-key", f"{TOPIC}-value"} <= set(registry.subjects())


def test_json_events(items_db: str, cdc_broker: CdcBroker) -> None:
    import json

    with capture(items_db, cdc_broker, value_format="json"):
        records = read_topic(cdc_broker)
    event = json.loads(records[0].value)
    assert event["op"] == "r" and event["after"]["photo"] == "AP8="  # base64 of 00 ff
    assert json.loads(records[0].key) == {"region": "eu", "id": 1}
