"""Debezium's JsonConverter events (``--format debezium-json``) through kayak's apply path.

The envelopes are built the way Debezium 3.x's PostgreSQL connector writes them (field for
field; tests/jvm/test_pipeline_debezium.py runs the real connector end to end), applied with
:func:`~kayak.pipeline.apply.apply_partitions` to a real SQLite target, no Spark.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kayak.pipeline.apply import ApplySettings, apply_partitions
from kayak.pipeline.debezium_json import DebeziumJsonDecoder
from kayak.pipeline.decode import RefusedRecord

TOPIC = "dbz.public.items"
KEY_SCHEMA = {
    "type": "struct", "optional": False, "name": "dbz.public.items.Key",
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}  # fmt: skip
ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
     "field": "price"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
     "field": "day"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
     "version": 1, "field": "seen"},
    {"type": "double", "optional": True, "field": "ratio"},
    {"type": "bytes", "optional": True, "field": "blob"},
    {"type": "boolean", "optional": True, "field": "active"},
]  # fmt: skip


def value_schema() -> dict[str, Any]:
    row = {"type": "struct", "fields": ROW_FIELDS, "optional": True,
           "name": "dbz.public.items.Value"}  # fmt: skip
    return {
        "type": "struct", "optional": False, "name": "dbz.public.items.Envelope",
        "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                   {"type": "struct", "fields": [], "optional": False, "field": "source"},
                   {"type": "string", "optional": False, "field": "op"},
                   {"type": "int64", "optional": True, "field": "ts_ms"}],
    }  # fmt: skip


def source(snapshot: str = "false") -> dict[str, Any]:
    return {"version": "3.6.1.Final", "connector": "postgresql", "name": "dbz",
            "ts_ms": 1_700_000_000_000, "snapshot": snapshot, "db": "shop",
            "schema": "public", "table": "items", "txId": 1, "lsn": 1}  # fmt: skip


def row(item_id: int, name: str | None, price_cents: int | None = 1250) -> dict[str, Any]:
    price = None
    if price_cents is not None:
        price = base64.b64encode(price_cents.to_bytes(4, "big", signed=True)).decode()
    return {"id": item_id, "name": name, "price": price, "day": 19_723,
            "seen": 1_706_933_105_123_456, "ratio": 0.25,
            "blob": base64.b64encode(b"\x00\xff").decode(), "active": True}  # fmt: skip


def event(op: str, before: Any, after: Any, *, schemas: bool = True, snapshot: str = "false"
          ) -> bytes:  # fmt: skip
    payload = {"before": before, "after": after, "source": source(snapshot), "op": op,
               "ts_ms": 1_700_000_000_001}  # fmt: skip
    if schemas:
        return json.dumps({"schema": value_schema(), "payload": payload}).encode()
    return json.dumps(payload).encode()


def key(item_id: int, *, schemas: bool = True) -> bytes:
    if schemas:
        return json.dumps({"schema": KEY_SCHEMA, "payload": {"id": item_id}}).encode()
    return json.dumps({"id": item_id}).encode()


def apply(target: Path, records: list[tuple[bytes | None, bytes | None]]) -> None:
    batch = pa.RecordBatch.from_pylist(
        [{"key": k, "value": v, "topic": TOPIC, "partition": 0, "offset": offset}
         for offset, (k, v) in enumerate(records)],
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("offset", pa.int64())]),
    )  # fmt: skip
    settings = ApplySettings(
        target_url=f"sqlite:{target}", registry_url="", bootstrap_servers="127.0.0.1:1",
        dead_letter_topic="dlq", input_format="debezium-json",
    )  # fmt: skip
    (counts,) = list(apply_partitions(iter([batch]), settings))
    assert counts.column("dead_lettered").to_pylist() == [0]


def target_rows(target: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(target) as db:
        (name,) = db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%items'"
        ).fetchone()
        return db.execute(f'SELECT * FROM "{name}" ORDER BY 1').fetchall()


def test_schema_form_values_and_ops(tmp_path: Path) -> None:
    target = tmp_path / "t.db"
    apply(target, [
        (key(1), event("r", None, row(1, "one"), snapshot="first")),
        (key(2), event("r", None, row(2, "two"), snapshot="last")),
        (key(3), event("c", None, row(3, "three", -5))),
        (key(2), event("u", row(2, "two"), row(2, "TWO", None))),
        (key(1), event("d", row(1, None, None), None)),
        (key(1), None),  # the tombstone after a delete
    ])  # fmt: skip
    assert target_rows(target) == [
        (2, "TWO", None, "2024-01-01", "2024-02-03 04:05:05.123456", 0.25, b"\x00\xff", 1),
        (3, "three", -0.05, "2024-01-01", "2024-02-03 04:05:05.123456", 0.25, b"\x00\xff", 1),
    ]


def test_schemaless_form_keeps_json_kinds_and_deletes_by_key(tmp_path: Path) -> None:
    target = tmp_path / "t.db"
    plain = {"id": 1, "name": "one", "price": "12.50", "active": False}
    apply(target, [
        (key(1, schemas=False), event("c", None, plain, schemas=False)),
        (key(2, schemas=False), event("c", None, {**plain, "id": 2}, schemas=False)),
        (key(2, schemas=False), event("d", None, None, schemas=False)),  # no before image
    ])  # fmt: skip
    assert target_rows(target) == [(1, "one", "12.50", 0)]


def decode(key_bytes: bytes | None, value: bytes) -> None:
    DebeziumJsonDecoder().decode_record(TOPIC, 0, 7, key_bytes, value)


@pytest.mark.parametrize(
    ("record_key", "value", "says"),
    [
        (key(1), b"\x00\x00\x00\x00\x07avro", "is Confluent-framed Avro (schema id 7)"),
        (key(1), event("m", None, row(1, "x")), "unknown Debezium op 'm'"),
        (key(1), event("t", None, None), "TRUNCATE event"),
        (None, event("c", None, row(1, "x")), "without a record key"),
        (key(1), event("c", None, None), "op 'c' without an 'after' image"),
        (key(1), b"{not json", "is not JSON"),
        (key(1, schemas=False), event("c", None, row(1, "x")), "disagree on schemas.enable"),
        (key(1, schemas=False),
         event("c", None, {"id": 1, "price": {"scale": 2, "value": "BNI="}}, schemas=False),
         "column 'price' holds a JSON dict in the schema-less form"),
        (key(1), json.dumps({"schema": {**value_schema(), "fields": []},
                             "payload": {"op": "c", "after": {"id": 1}}}).encode(),
         "no 'before'/'after' struct"),
    ],
)  # fmt: skip
def test_what_it_cannot_apply_is_refused_naming_the_topic(
    record_key: bytes | None, value: bytes, says: str
) -> None:
    with pytest.raises(RefusedRecord) as refused:
        decode(record_key, value)
    message = str(refused.value)
    assert message.startswith(f"topic {TOPIC}") and says in message, message
    assert "\n" not in message


def test_refusal_stops_the_batch_instead_of_dead_lettering(tmp_path: Path) -> None:
    with pytest.raises(RefusedRecord, match="unknown Debezium op 'x'"):
        apply(tmp_path / "t.db", [(key(1), event("x", None, row(1, "x")))])


def test_schema_form_into_a_postgresql_target(postgres_dsn: str) -> None:
    """The same events into PostgreSQL: a fixed type per kind (numeric, text, bytea, ...)."""
    import psycopg

    batch = [(key(1), event("c", None, row(1, "one"))), (key(2), event("c", None, row(2, "b")))]
    records = pa.RecordBatch.from_pylist(
        [{"key": k, "value": v, "topic": TOPIC, "partition": 0, "offset": offset}
         for offset, (k, v) in enumerate([*batch, (key(2), event("d", row(2, "b"), None))])],
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("offset", pa.int64())]),
    )  # fmt: skip
    settings = ApplySettings(
        target_url=postgres_dsn, registry_url="", bootstrap_servers="127.0.0.1:1",
        dead_letter_topic="dlq", input_format="debezium-json",
    )  # fmt: skip
    list(apply_partitions(iter([records]), settings))
    with psycopg.connect(postgres_dsn) as db:
        rows = db.execute(
            "SELECT id, name, price::text, day, seen, ratio, blob, active FROM public.items"
        ).fetchall()
        types: dict[str, str] = dict(db.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = 'items'"
        ).fetchall())  # fmt: skip
    assert rows == [(1, "one", "12.50", "2024-01-01", "2024-02-03 04:05:05.123456", 0.25,
                     b"\x00\xff", True)]  # fmt: skip
    assert types["price"] == "numeric" and types["blob"] == "bytea" and types["id"] == "integer"


def test_logical_types_become_postgresql_text_forms() -> None:
    """Times, timestamps at each precision, zoned timestamps and variable-scale decimals."""
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "t"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Time", "field": "t_ms"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "ms"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
         "field": "ns"},
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
         "field": "z"},
        {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
         "fields": [], "field": "v"},
        {"type": "float", "optional": True, "field": "f"},
    ]  # fmt: skip
    schema = value_schema()
    for envelope_field in schema["fields"][:2]:
        envelope_field["fields"] = fields
    after = {
        "id": 1, "t": 3_723_000_001, "t_ms": 45_296_789, "ms": -1, "ns": 1_500_000_000,
        "z": "2024-03-01T08:00:00.5Z", "v": {"scale": 3, "value": "/z8="}, "f": 1.5,
    }  # fmt: skip
    payload = {"before": None, "after": after, "source": source(), "op": "c"}
    value = json.dumps({"schema": schema, "payload": payload}).encode()
    change = DebeziumJsonDecoder().decode_record(TOPIC, 0, 41, key(1), value)
    assert change.after == {
        "id": 1, "t": "01:02:03.000001", "t_ms": "12:34:56.789000",
        "ms": "1969-12-31 23:59:59.999000", "ns": "1970-01-01 00:00:01.500000",
        "z": "2024-03-01 08:00:00.5+00:00", "v": "-0.193", "f": 1.5,
    }  # fmt: skip
    assert change.op == "c" and change.key_values == (1,) and change.ts_ms == 1_700_000_000_000
