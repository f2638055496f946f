"""Decoding change events inside Spark's executors: Confluent-framed Avro to changes.

Runs in the Python worker that applies a micro-batch (:mod:`kayak.pipeline.apply`): Arrow
batches of raw records in, :class:`DecodedChange` values out, each holding its row image as
the Python values Avro decoding gave (no text form in between). A record that cannot be
decoded is not dropped: it comes out as an :class:`UndecodableRecord` with its raw key and
value, for the dead-letter topic.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from kayak.cdc.change import Row, TableSchema, snapshot_floor
from kayak.cdc.envelope import table_schema_from_avro
from kayak.errors import KayakError
from kayak.pipeline.targets.base import key_text
from kayak.pipeline.transient import RetryPolicy, call_with_retries, is_transient
from kayak.serde import AvroDeserializer, SchemaRegistryClient

__all__ = [
    "ChangeDecoder",
    "DecodedChange",
    "EventDecoder",
    "RefusedRecord",
    "UndecodableRecord",
    "decode_records",
    "latest_per_key",
]

log = logging.getLogger(__name__)

# Debezium's markers on the final snapshot row of a table, and of the whole snapshot.
_SNAPSHOT_ENDS = frozenset({"last_in_data_collection", "last"})
_RAW_COLUMNS = ("key", "value", "topic", "partition", "offset")
_REGISTRY_RETRY = RetryPolicy()


@dataclass(slots=True)
class DecodedChange:
    """One change event: ``key`` is the key's canonical text (None for a TRUNCATE, op
    ``t``), ``key_values`` the key columns' values in key order, ``after`` the row image to
    write (None for a delete or a TRUNCATE), ``snapshot`` Debezium's ``source.snapshot``."""

    topic: str
    schema_id: int
    key: str | None
    key_values: tuple[Any, ...]
    op: str
    position: str
    ts_ms: int
    after: Row | None
    snapshot: str = "false"


@dataclass(frozen=True, slots=True)
class UndecodableRecord:
    """A record that is not a change event this pipeline can read, and why."""

    topic: str
    partition: int
    offset: int
    error: str
    raw_key: bytes | None
    raw_value: bytes | None


class RefusedRecord(KayakError):
    """A record of a form the pipeline was told to read but cannot apply (one line naming
    the topic and the problem): it stops the pipeline instead of going to the dead-letter
    topic, since every record of that form would follow it there."""


class EventDecoder(Protocol):
    """What the apply path needs of a decoder: records to changes, schema ids to tables."""

    def decode_record(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes
    ) -> DecodedChange: ...

    def table(self, schema_id: int) -> TableSchema: ...

    def schema(self, schema_id: int) -> dict[str, Any]: ...


class ChangeDecoder:
    """Decodes event values; caches each writer schema's table shape (ids never change)."""

    def __init__(self, registry_url: str, registry_config: dict[str, str] | None = None) -> None:
        self._registry = SchemaRegistryClient(registry_url, config=registry_config)
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

    def decode_record(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes
    ) -> DecodedChange:
        """One record as a change (kayak's events carry all they need in the value)."""
        return self.decode(topic, value)

    def decode(self, topic: str, value: bytes) -> DecodedChange:
        """One event value as a change of ``topic``; ValueError (or the deserializer's
        error) when it is not a change event."""
        schema_id, event = self._deserializer.deserialize_with_id(value)
        table = self.table(schema_id)
        op = event["op"]
        source = event["source"]
        if op == "t":
            return DecodedChange(topic, schema_id, None, (), op, source["pos"], source["ts_ms"],
                                 None, source.get("snapshot", "false"))  # fmt: skip
        after = event["after"]
        image = after if after is not None else event["before"]
        if op not in ("c", "u", "d", "r") or image is None:
            raise ValueError(f"not a change event: op={op!r}, no row image")
        key_values = tuple(image[k] for k in table.key)
        return DecodedChange(
            topic, schema_id, key_text(table, image), key_values, op, source["pos"],
            source["ts_ms"], after if op != "d" else None, source.get("snapshot", "false"),
        )  # fmt: skip


def decode_records(
    decoder: EventDecoder, batch: pa.RecordBatch
) -> tuple[list[DecodedChange], list[UndecodableRecord]]:
    """The changes in ``batch`` (raw records: key, value, topic, partition, offset), and the
    records that are not changes. Tombstones (null values) carry nothing and are skipped; a
    :class:`RefusedRecord` stops the batch."""
    changes: list[DecodedChange] = []
    bad: list[UndecodableRecord] = []
    columns = [batch.column(name).to_pylist() for name in _RAW_COLUMNS]
    decode = decoder.decode_record
    for raw_key, raw_value, topic, partition, offset in zip(*columns, strict=True):
        if raw_value is None:
            continue
        try:
            changes.append(decode(topic, partition, offset, raw_key, raw_value))
        except RefusedRecord:
            raise
        except Exception as e:
            if not is_transient(e):
                # any undecodable record goes to the dead-letter topic
                bad.append(UndecodableRecord(topic, partition, offset,
                                             f"{type(e).__name__}: {e}", raw_key, raw_value))
                continue
            # A registry that does not answer (restarting with its broker) is waited for; if
            # it stays away, stop rather than dead-letter a good record.
            changes.append(call_with_retries(
                functools.partial(decode, topic, partition, offset, raw_key, raw_value),
                policy=_REGISTRY_RETRY,
                what=f"decoding {topic}[{partition}]@{offset}",
            ))  # fmt: skip
    return changes, bad


def latest_per_key(changes: Iterable[DecodedChange]) -> list[DecodedChange]:
    """What a micro-batch applies: the latest change (by source position) of every key of
    every topic, every TRUNCATE, and for each table whose snapshot ended here, a TRUNCATE just
    below that snapshot (so rows the snapshot did not see, deleted while capture was down,
    go; see :func:`~kayak.cdc.change.snapshot_floor`). Positions of one key are unique, and
    the result does not depend on the order of ``changes``."""
    latest: dict[tuple[str, str], DecodedChange] = {}
    truncates: list[DecodedChange] = []
    for change in changes:
        key = change.key
        if key is None:
            truncates.append(change)
            continue
        if change.snapshot in _SNAPSHOT_ENDS:
            truncates.append(_snapshot_end(change))
        seen = latest.get((change.topic, key))
        if seen is None or change.position > seen.position:
            latest[change.topic, key] = change
    return [*truncates, *latest.values()]


def _snapshot_end(change: DecodedChange) -> DecodedChange:
    return DecodedChange(change.topic, change.schema_id, None, (), "t",
                         snapshot_floor(change.position), change.ts_ms, None, change.snapshot)


def changes_by_schema(changes: Sequence[DecodedChange]) -> dict[int, list[DecodedChange]]:
    """Row changes grouped by writer schema (TRUNCATEs left out)."""
    groups: dict[int, list[DecodedChange]] = {}
    for change in changes:
        if change.key is not None:
            groups.setdefault(change.schema_id, []).append(change)
    return groups
