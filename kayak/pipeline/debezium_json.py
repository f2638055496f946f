"""Reading Debezium's own change topics: Kafka Connect's JsonConverter envelope.

A team already running Debezium (Kafka Connect, JsonConverter) can point ``kayak pipeline
run --from-topics PATTERN --format debezium-json`` at its change topics; this module turns
their records into the :class:`~kayak.pipeline.decode.DecodedChange` values the apply path
takes from kayak's own Avro events.

Both JsonConverter forms are read:

* ``schemas.enable=true`` (Connect's default): ``{"schema": …, "payload": …}``. Columns get
  their kind from the Connect schema, Debezium's logical types included: ``Decimal`` and
  ``VariableScaleDecimal`` become exact decimal text, ``io.debezium.time.*`` dates, times and
  timestamps the text PostgreSQL prints for them, ``bytes`` the bytes base64 carried.
* ``schemas.enable=false``: the payload alone. Nothing says a column's type, so every column
  keeps each value's own JSON kind (:attr:`~kayak.cdc.change.ColumnType.ANY`); values that are
  JSON objects (a ``VariableScaleDecimal``) are refused: run Debezium with
  ``decimal.handling.mode=string`` for that form.

The primary key is the record key's fields (Debezium keys every record by it). Per-key order
is the topic's (Debezium writes a key's changes to one partition, in order), so a change's
source position is its offset: replays of a micro-batch, and repeats after a Connect restart
(at-least-once), never move a row back once the later records are applied.

An event the pipeline cannot apply is refused, not skipped: :class:`RefusedRecord` with one
line naming the topic and the problem (a Confluent Avro record, an unknown ``op``, an event
without a record key, a delete without a key or ``before`` image, a TRUNCATE, …).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kayak.cdc.change import Column, ColumnType, Row, TableSchema, format_position
from kayak.pipeline.decode import DecodedChange, RefusedRecord
from kayak.pipeline.targets.base import key_text

__all__ = ["CONNECTOR", "DebeziumJsonDecoder"]

# What the target is told the source was: no declared source types, a fixed type per kind.
CONNECTOR = "debezium-json"
_OPS = frozenset({"c", "u", "d", "r"})
_EPOCH = dt.datetime(1970, 1, 1)
Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class _Shape:
    """A table as one envelope form describes it, and how to convert its values."""

    table: TableSchema
    convert: Mapping[str, Convert]


class DebeziumJsonDecoder:
    """Decodes Debezium JsonConverter records; the same interface as
    :class:`~kayak.pipeline.decode.ChangeDecoder`. Schema ids are this decoder's own numbers
    for each table shape it met (a schema change in the source makes a new one)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}
        self._shapes: list[_Shape] = []
        self._last_shape: dict[str, _Shape] = {}

    def table(self, schema_id: int) -> TableSchema:
        return self._shapes[schema_id].table

    def schema(self, schema_id: int) -> dict[str, Any]:
        return {"connector": CONNECTOR}

    def decode_record(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes
    ) -> DecodedChange:
        """One record as a change; :class:`RefusedRecord` (one line) if it cannot be one."""
        try:
            return self._decode(topic, offset, key, value)
        except RefusedRecord:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise RefusedRecord(
                f"topic {topic} [{partition}]@{offset}: not a Debezium change event: "
                f"{type(e).__name__}: {e}"
            ) from e

    def _decode(self, topic: str, offset: int, key: bytes | None, value: bytes) -> DecodedChange:
        envelope, value_schema = _json_form(topic, value, "value")
        op = envelope.get("op")
        if op == "t":
            raise RefusedRecord(
                f"topic {topic}: a TRUNCATE event (op 't') cannot be ordered against the "
                "changes in the topic's other partitions; run Debezium with "
                "skipped.operations=t (its default)"
            )
        if op not in _OPS:
            raise RefusedRecord(f"topic {topic}: unknown Debezium op {op!r} (expected c, u, d, r)")
        if key is None:
            raise RefusedRecord(
                f"topic {topic}: a change event without a record key; kayak applies by primary "
                "key (a table without one needs Debezium's message.key.columns)"
            )
        key_payload, key_schema = _json_form(topic, key, "key")
        if not isinstance(key_payload, dict) or not key_payload:
            raise RefusedRecord(f"topic {topic}: the record key is not an object of key columns")
        source = envelope.get("source") or {}
        image = envelope.get("after") if op != "d" else envelope.get("before")
        if op != "d" and image is None:
            raise RefusedRecord(f"topic {topic}: op {op!r} without an 'after' image")
        shape = self._shape(topic, source, key_schema, value_schema, key_payload, image)
        table = shape.table
        key_row = {name: shape.convert[name](key_payload.get(name)) for name in table.key}
        after = _convert_row(shape, envelope["after"]) if op != "d" else None
        snapshot = str(source.get("snapshot", "false"))
        return DecodedChange(
            topic=topic,
            schema_id=self._ids[_shape_key(topic, table)],
            key=key_text(table, key_row),
            key_values=tuple(key_row[k] for k in table.key),
            op=op,
            position=format_position(offset),
            ts_ms=int(source.get("ts_ms") or envelope.get("ts_ms") or 0),
            after=after,
            # Snapshot rows are applied like any change; the snapshot-end TRUNCATE of kayak's
            # own capture needs positions a Debezium snapshot does not carry.
            snapshot="true" if snapshot not in ("false", "") else "false",
        )

    def _shape(
        self, topic: str, source: Mapping[str, Any], key_schema: Mapping[str, Any] | None,
        value_schema: Mapping[str, Any] | None, key_payload: Row, image: Row | None,
    ) -> _Shape:  # fmt: skip
        schema_name = str(source.get("schema") or "public")
        table_name = str(source.get("table") or topic.rsplit(".", 1)[-1])
        if value_schema is not None and key_schema is not None:
            shape = _shape_from_schemas(topic, schema_name, table_name, key_schema, value_schema)
        elif value_schema is None and key_schema is None:
            known_shape = self._last_shape.get(topic)
            if image is None and known_shape is not None:
                return known_shape  # a delete with the key alone: the table as last seen
            shape = _shape_schemaless(topic, schema_name, table_name, key_payload, image)
        else:
            raise RefusedRecord(
                f"topic {topic}: the key and the value disagree on schemas.enable (set it "
                "the same for key.converter and value.converter)"
            )
        known = _shape_key(topic, shape.table)
        if known not in self._ids:
            self._ids[known] = len(self._shapes)
            self._shapes.append(shape)
        self._last_shape[topic] = shape
        return shape


def _shape_key(topic: str, table: TableSchema) -> tuple[Any, ...]:
    return (topic, table)


def _json_form(topic: str, raw: bytes, part: str) -> tuple[Any, dict[str, Any] | None]:
    """(payload, Connect schema or None) of a JsonConverter record key or value."""
    if raw[:1] == b"\x00" and len(raw) >= 5:
        schema_id = int.from_bytes(raw[1:5], "big")
        raise RefusedRecord(
            f"topic {topic}: the record {part} is Confluent-framed Avro (schema id {schema_id}); "
            "--format debezium-json reads Kafka Connect's JsonConverter only"
        )
    try:
        decoded = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RefusedRecord(f"topic {topic}: the record {part} is not JSON ({e})") from e
    if isinstance(decoded, dict) and set(decoded) == {"schema", "payload"}:
        schema = decoded["schema"]
        return decoded["payload"], schema if isinstance(schema, dict) else None
    return decoded, None


# -- schemas.enable=true: kinds from the Connect schema -------------------------------------


def _shape_from_schemas(
    topic: str, schema_name: str, table_name: str,
    key_schema: Mapping[str, Any], value_schema: Mapping[str, Any],
) -> _Shape:  # fmt: skip
    fields = {f.get("field"): f for f in value_schema.get("fields", [])}
    row = fields.get("after") or fields.get("before")
    if row is None or row.get("type") != "struct":
        raise RefusedRecord(f"topic {topic}: the value schema has no 'before'/'after' struct")
    columns: list[Column] = []
    convert: dict[str, Convert] = {}
    for field in row.get("fields", []):
        name = str(field["field"])
        kind, converter = _connect_kind(topic, name, field)
        columns.append(Column(name, kind, nullable=bool(field.get("optional", True))))
        convert[name] = converter
    key = tuple(str(f["field"]) for f in key_schema.get("fields", []))
    missing = [k for k in key if k not in convert]
    if not key or missing:
        raise RefusedRecord(f"topic {topic}: key columns {list(key)} are not all in the row")
    return _Shape(TableSchema(schema_name, table_name, tuple(columns), key), convert)


def _connect_kind(topic: str, column: str, field: Mapping[str, Any]) -> tuple[ColumnType, Convert]:
    """A Connect field's kayak kind and its value converter (logical types first)."""
    logical = field.get("name")
    converter = _LOGICAL.get(str(logical)) if logical else None
    if logical == "org.apache.kafka.connect.data.Decimal":
        scale = int((field.get("parameters") or {}).get("scale", 0))
        return ColumnType.DECIMAL, _null_safe(lambda v: _decimal(v, scale))
    if logical == "io.debezium.data.VariableScaleDecimal":
        return ColumnType.DECIMAL, _null_safe(_variable_scale_decimal)
    if converter is not None:
        return ColumnType.STRING, _null_safe(converter)
    kind = _CONNECT_TYPES.get(str(field.get("type")))
    if kind is None:
        raise RefusedRecord(
            f"topic {topic}: column {column!r} has Connect type {field.get('type')!r}"
            f"{f' ({logical})' if logical else ''}, which kayak cannot apply to a column"
        )
    if kind is ColumnType.BYTES:
        return kind, _null_safe(base64.b64decode)
    if kind is ColumnType.DOUBLE:
        return kind, _null_safe(float)
    return kind, _same


# JsonConverter's names of Connect's schema types (FLOAT32 is "float", FLOAT64 "double").
_CONNECT_TYPES = {
    "int8": ColumnType.INT, "int16": ColumnType.INT, "int32": ColumnType.INT,
    "int64": ColumnType.LONG, "float": ColumnType.DOUBLE, "double": ColumnType.DOUBLE,
    "boolean": ColumnType.BOOLEAN, "string": ColumnType.STRING, "bytes": ColumnType.BYTES,
}  # fmt: skip


def _same(value: Any) -> Any:
    return value


def _null_safe(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def _decimal(value: str, scale: int) -> str:
    """Connect's Decimal: the unscaled value, big-endian two's complement, base64 in JSON."""
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    return str(decimal.Decimal(unscaled).scaleb(-scale))


def _variable_scale_decimal(value: Mapping[str, Any]) -> str:
    return _decimal(str(value["value"]), int(value["scale"]))


def _date(days: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=int(days))).isoformat()


def _timestamp(per_second: int) -> Convert:
    def convert(value: int) -> str:
        seconds, fraction = divmod(int(value), per_second)
        micros = fraction * 1_000_000 // per_second
        return (_EPOCH + dt.timedelta(seconds=seconds, microseconds=micros)).isoformat(sep=" ")

    return convert


def _time(per_second: int) -> Convert:
    def convert(value: int) -> str:
        micros = int(value) * 1_000_000 // per_second
        return (dt.datetime.min + dt.timedelta(microseconds=micros)).time().isoformat()

    return convert


def _zoned(text: str) -> str:
    """Debezium's ZonedTimestamp (ISO-8601, ``Z`` for UTC) as PostgreSQL prints it."""
    return str(text).replace("T", " ").replace("Z", "+00:00")


_LOGICAL: dict[str, Convert] = {
    "io.debezium.time.Date": _date,
    "org.apache.kafka.connect.data.Date": _date,
    "io.debezium.time.Timestamp": _timestamp(1000),
    "org.apache.kafka.connect.data.Timestamp": _timestamp(1000),
    "io.debezium.time.MicroTimestamp": _timestamp(1_000_000),
    "io.debezium.time.NanoTimestamp": _timestamp(1_000_000_000),
    "io.debezium.time.Time": _time(1000),
    "org.apache.kafka.connect.data.Time": _time(1000),
    "io.debezium.time.MicroTime": _time(1_000_000),
    "io.debezium.time.NanoTime": _time(1_000_000_000),
    "io.debezium.time.ZonedTimestamp": _zoned,
}


# -- schemas.enable=false: every value keeps its JSON kind ---------------------------------


def _shape_schemaless(
    topic: str, schema_name: str, table_name: str, key_payload: Row, image: Row | None
) -> _Shape:
    if image is None:
        names = list(key_payload)
    else:
        names = list(image)
        missing = [k for k in key_payload if k not in image]
        if missing:
            raise RefusedRecord(f"topic {topic}: key columns {missing} are not in the row image")
    columns = tuple(Column(name, ColumnType.ANY) for name in names)
    scalar = _schemaless_value(topic)
    return _Shape(
        TableSchema(schema_name, table_name, columns, tuple(key_payload)),
        {name: scalar(name) for name in names},
    )


def _schemaless_value(topic: str) -> Callable[[str], Convert]:
    def for_column(column: str) -> Convert:
        def convert(value: Any) -> Any:
            if isinstance(value, dict | list):
                raise RefusedRecord(
                    f"topic {topic}: column {column!r} holds a JSON {type(value).__name__} in "
                    "the schema-less form (schemas.enable=false), whose type kayak cannot know; "
                    "enable schemas, or run Debezium with decimal.handling.mode=string"
                )
            return value

        return convert

    return for_column


def _convert_row(shape: _Shape, image: Row | None) -> Row | None:
    if image is None:
        return None
    return {name: convert(image.get(name)) for name, convert in shape.convert.items()}
