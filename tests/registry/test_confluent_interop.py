"""confluent-kafka's own schema registry client and Avro serdes against kayak's registry, and
records crossing between Confluent's serdes and kayak's through a real broker."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentError
from confluent_kafka.serialization import MessageField, SerializationContext

from kayak.serde import AvroDeserializer, AvroSerializer, SchemaRegistryClient
from tests.registry.conftest import RegistryBroker

PAYMENT = json.dumps({
    "type": "record",
    "name": "Payment",
    "namespace": "kayak.interop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": {"type": "enum", "name": "Currency",
                                      "symbols": ["EUR", "USD"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
})  # fmt: skip


def payment(n: int) -> dict[str, object]:
    return {"id": f"p{n}", "amount": n * 1.5, "currency": "EUR" if n % 2 else "USD",
            "note": None if n % 3 else f"note {n}"}  # fmt: skip


def test_confluent_registry_client(url: str) -> None:
    subject = f"confluent-{uuid.uuid4().hex[:8]}"
    registry = ConfluentRegistry({"url": url})
    schema_id = registry.register_schema(subject, Schema(PAYMENT, "AVRO"))
    assert registry.register_schema(subject, Schema(PAYMENT, "AVRO")) == schema_id
    assert json.loads(registry.get_schema(schema_id).schema_str or "") == json.loads(PAYMENT)
    latest = registry.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (schema_id, 1, subject)
    assert registry.get_version(subject, 1).schema_id == schema_id
    assert registry.get_versions(subject) == [1]
    assert subject in registry.get_subjects()
    found = registry.lookup_schema(subject, Schema(PAYMENT, "AVRO"))
    assert (found.schema_id, found.version) == (schema_id, 1)
    evolved = json.loads(PAYMENT)
    evolved["fields"].append({"name": "paid", "type": "boolean"})  # no default: not BACKWARD
    assert registry.test_compatibility(subject, Schema(json.dumps(evolved), "AVRO")) is False
    try:
        registry.register_schema(subject, Schema(json.dumps(evolved), "AVRO"))
    except ConfluentError as exc:
        assert (exc.http_status_code, exc.error_code) == (409, 409)
    else:
        raise AssertionError("an incompatible schema was registered")
    registry.set_compatibility(subject, "NONE")
    assert registry.get_compatibility(subject) == "NONE"
    assert registry.register_schema(subject, Schema(json.dumps(evolved), "AVRO")) > schema_id
    assert registry.delete_version(subject, 2) == 2
    assert registry.delete_subject(subject) == [1]
    assert registry.delete_subject(subject, permanent=True) == [1, 2]
    try:  # a fresh client: Confluent's caches the latest version
        ConfluentRegistry({"url": url}).get_latest_version(subject)
    except ConfluentError as exc:
        assert exc.error_code == 40401
    else:
        raise AssertionError("a deleted subject was found")


def test_confluent_serdes_and_kayak_serdes_read_each_other(url: str) -> None:
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    context = SerializationContext(topic, MessageField.VALUE)
    registry = ConfluentRegistry({"url": url})
    confluent_out = ConfluentSerializer(registry, PAYMENT)
    confluent_in = ConfluentDeserializer(registry)
    kayak_out = AvroSerializer(SchemaRegistryClient(url))
    kayak_in = AvroDeserializer(url)
    for n in range(5):
        theirs = confluent_out(payment(n), context)
        assert theirs is not None
        ours = kayak_out.serialize(subject, PAYMENT, payment(n))
        assert theirs == ours  # same registration, same id, same bytes
        assert kayak_in.deserialize(theirs) == payment(n)
        assert confluent_in(ours, context) == payment(n)


def test_records_cross_the_broker_both_ways(shared_registry: RegistryBroker) -> None:
    url, bootstrap = shared_registry.url, shared_registry.broker.bootstrap_servers
    topic = f"crossing-{uuid.uuid4().hex[:8]}"
    context = SerializationContext(topic, MessageField.VALUE)
    registry = ConfluentRegistry({"url": url})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    confluent_out = ConfluentSerializer(registry, PAYMENT)
    kayak_out = AvroSerializer(url)
    for n in range(10):  # even records by Confluent's serializer, odd ones by kayak's
        if n % 2 == 0:
            value = confluent_out(payment(n), context)
        else:
            value = kayak_out.serialize(f"{topic}-value", PAYMENT, payment(n))
        producer.produce(topic, value=value, key=str(n).encode())
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    raw: list[bytes] = []
    try:
        for _ in range(300):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                raw.append(message.value() or b"")
            if len(raw) == 10:
                break
    finally:
        consumer.close()
    assert len(raw) == 10
    kayak_in = AvroDeserializer(SchemaRegistryClient(url))
    confluent_in = ConfluentDeserializer(registry)
    assert [kayak_in.deserialize(v) for v in raw] == [payment(n) for n in range(10)]
    assert [confluent_in(v, context) for v in raw] == [payment(n) for n in range(10)]
