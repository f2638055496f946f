"""Decoding change events inside Spark: Avro (via the registry) to one generic row shape.

Runs in Spark's Python workers through ``mapInArrow``: Arrow batches of raw records in, Arrow
batches of decoded changes out, so tables of any shape share one Spark schema. A record that
cannot be decoded is not dropped: it comes out with ``error`` set and its raw key and value, for
the dead-letter topic.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from kayak.cdc.change import Row, TableSchema
from kayak.cdc.envelope import table_schema_from_avro
from kayak.pipeline.targets.base import key_text
from kayak.pipeline.transient import RetryPolicy, call_with_retries, is_transient
from kayak.serde import AvroDeserializer, SchemaRegistryClient

__all__ = ["DECODED_SCHEMA", "decode_batches", "key_from_json", "row_from_json", "row_to_json"]

log = logging.getLogger(__name__)

DECODED_SCHEMA = (
    "topic string, partition int, offset long, key string, op string, pos string, "
    "ts_ms long, schema_id int, row string, error string, raw_key binary, raw_value binary"
)

_ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("op", pa.string()),
        ("pos", pa.string()),
        ("ts_ms", pa.int64()),
        ("schema_id", pa.int32()),
        ("row", pa.string()),
        ("error", pa.string()),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
    ]
)


def _tag(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b": bytes(value).hex()}
    raise TypeError(f"cannot carry {type(value).__name__}")


def _untag(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$b" in obj:
        return bytes.fromhex(obj["$b"])
    return obj


def row_to_json(row: Row) -> str:
    """A row image as JSON text (bytes as ``{"$b": hex}``), exact for every column type."""
    return json.dumps(row, default=_tag, separators=(",", ":"), ensure_ascii=False)


def key_from_json(text: str) -> list[Any]:
    """A key's values from its canonical text (:func:`~kayak.pipeline.targets.key_text`)."""
    values: list[Any] = json.loads(text, object_hook=_untag)
    return values


def row_from_json(text: str) -> Row:
    row: Row = json.loads(text, object_hook=_untag)
    return row


class ChangeDecoder:
    """Decodes event values; caches each writer schema's table shape (ids never change)."""

    def __init__(self, registry_url: str) -> None:
        self._registry = SchemaRegistryClient(registry_url)
        self._deserializer = AvroDeserializer(self._registry)
        self._tables: dict[int, TableSchema] = {}

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The registered writer schema (parsed JSON)."""
        schema: dict[str, Any] = self._registry.schema_by_id(schema_id)
        return schema

    def table(self, schema_id: int) -> TableSchema:
        table = self._tables.get(schema_id)
        if table is None:
            table = self._tables[schema_id] = table_schema_from_avro(self.schema(schema_id))
        return table

    def decode(self, value: bytes) -> tuple[str | None, str, str, int, int, str | None]:
        """``(key text, op, position, source ts_ms, schema id, after-row JSON or None)``; a
        TRUNCATE (op ``t``) has no key and no row."""
        schema_id, event = self._deserializer.deserialize_with_id(value)
        table = self.table(schema_id)
        op = event["op"]
        source = event["source"]
        if op == "t":
            return None, op, source["pos"], source["ts_ms"], schema_id, None
        image = event["after"] if event["after"] is not None else event["before"]
        if op not in ("c", "u", "d", "r") or image is None:
            raise ValueError(f"not a change event: op={op!r}, no row image")
        after = event["after"]
        return (
            key_text(table, table.key_of(image)),
            op,
            source["pos"],
            source["ts_ms"],
            schema_id,
            row_to_json(after) if after is not None and op != "d" else None,
        )


_decoders: dict[str, ChangeDecoder] = {}
_REGISTRY_RETRY = RetryPolicy()


def decode_batches(batches: Iterator[pa.RecordBatch], registry_url: str) -> Iterator[Any]:
    """The ``mapInArrow`` function: raw records (key, value, topic, partition, offset) to
    :data:`DECODED_SCHEMA`. Tombstones (null values) carry nothing to apply and are skipped."""
    decoder = _decoders.get(registry_url)
    if decoder is None:
        decoder = _decoders[registry_url] = ChangeDecoder(registry_url)
    for batch in batches:
        columns: dict[str, list[Any]] = {name: [] for name in _ARROW_SCHEMA.names}
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        topics = batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        for raw_key, raw_value, topic, partition, offset in zip(
            keys, values, topics, partitions, offsets, strict=True
        ):
            if raw_value is None:
                continue
            decoded: tuple[Any, ...]
            try:
                # A registry that does not answer (restarting with its broker) is waited for.
                fields = call_with_retries(
                    functools.partial(decoder.decode, raw_value), policy=_REGISTRY_RETRY,
                    what=f"decoding {topic}[{partition}]@{offset}",
                )  # fmt: skip
                decoded = (*fields, None, None, None)
            except Exception as e:
                if is_transient(e):
                    raise  # it stayed away: stop, rather than dead-letter a good record
                # any undecodable record goes to the dead-letter topic
                error = f"{type(e).__name__}: {e}"
                decoded = (None, None, None, None, None, None, error, raw_key, raw_value)
            for name, v in zip(
                _ARROW_SCHEMA.names, (topic, partition, offset, *decoded), strict=True
            ):
                columns[name].append(v)
        yield pa.RecordBatch.from_pydict(columns, schema=_ARROW_SCHEMA)
