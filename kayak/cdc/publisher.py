"""Turning changes into Debezium-style events on the log.

One change is one event, with two exceptions that keep consumers simple: a delete is followed
by a tombstone (same key, null value) so a compacted topic forgets the row, and an update that
changes the primary key becomes a delete of the old key (plus its tombstone) and a create of
the new one, so every event is about exactly one key. A TRUNCATE is one ``"t"`` event with no
key (Debezium's).

A table whose new shape the schema registry refuses (say a column's type changed from
``integer`` to ``text``: Avro cannot read an int as a string, so a BACKWARD subject answers
409) stops publishing *at* that change with a :class:`~kayak.cdc.errors.SchemaChangeError`
naming the table, the columns and the change: every whole source transaction before it is
published first (never the part of its own transaction that precedes it).

Transactions: a publisher made with ``transactional=True`` (its producer has a
``transactional.id`` and ``init_transactions()`` was done: :func:`open_capture_producer`)
publishes between :meth:`ChangePublisher.begin` and :meth:`ChangePublisher.commit`, one Kafka
transaction per capture batch, so a ``read_committed`` reader sees all of a batch's events on
every change topic or none of them. As a batch holds whole source transactions (the sources
cut reads there), no such reader ever sees part of a source transaction.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import fastavro

from kayak.cdc.change import Change, Op, Row, TableSchema
from kayak.cdc.envelope import event_value, key_schema, topic_name, value_schema
from kayak.cdc.errors import SchemaChangeError
from kayak.errors import SchemaRegistryError, UnsupportedVersionError

__all__ = [
    "ChangePublisher",
    "EventEncoder",
    "RegistryLike",
    "SentEvents",
    "open_capture_producer",
    "same_source_transaction",
    "whole_transactions",
]

log = logging.getLogger(__name__)

_CONFLUENT_HEADER = struct.Struct(">bI")


class RegistryLike(Protocol):
    """What the publisher needs of a schema registry client."""

    def register(self, subject: str, schema: Any) -> int: ...


# One record to produce: topic, key (None: a TRUNCATE, about no key), value (None: a tombstone).
_Record = tuple[str, bytes | None, bytes | None]


@dataclass(frozen=True)
class SentEvents:
    """Events handed to the producer (:meth:`ChangePublisher.send`): how many, and the
    producer's futures of their acknowledgement."""

    events: int
    futures: list[Future[Any]]


@dataclass
class _TableCodec:
    topic: str
    key_fields: tuple[str, ...]
    write_key: Callable[[Row], bytes]
    write_value: Callable[[dict[str, Any]], bytes]
    # Avro: the row record's full name, so row images are written as fastavro's
    # (name, value) union notation and fastavro need not test which branch a dict fits
    # (half the cost of encoding an event). None for JSON.
    row_name: str | None = None

    def key(self, image: Row) -> bytes:
        """The encoded key of a row image."""
        return self.write_key({k: image[k] for k in self.key_fields})


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


class EventEncoder:
    """Encodes keys and envelopes of one table's events, as Avro in Confluent's wire format
    (schemas registered once per table shape) or as plain JSON (bytes as base64)."""

    def __init__(
        self, *, prefix: str, connector: str, value_format: Literal["avro", "json"] = "avro",
        registry: RegistryLike | None = None,
    ) -> None:  # fmt: skip
        if value_format == "avro" and registry is None:
            raise ValueError("Avro events need a schema registry")
        if value_format not in ("avro", "json"):
            raise ValueError(f"value format must be avro or json, not {value_format!r}")
        self.prefix = prefix
        self.connector = connector
        self.value_format = value_format
        self._registry = registry
        self._codecs: dict[TableSchema, _TableCodec] = {}
        self._last: tuple[TableSchema, _TableCodec] | None = None
        self._shapes: dict[str, TableSchema] = {}  # topic -> the last shape registered

    def codec(self, table: TableSchema) -> _TableCodec:
        # Changes of one table share one TableSchema object: an identity check avoids hashing
        # the whole schema (a tuple of columns) for every event.
        last = self._last
        if last is not None and last[0] is table:
            return last[1]
        codec = self._codecs.get(table)
        if codec is None:
            codec = self._codecs[table] = self._make_codec(table)
        self._last = (table, codec)
        return codec

    def _make_codec(self, table: TableSchema) -> _TableCodec:
        topic = topic_name(self.prefix, table)
        if self.value_format == "json":
            return _TableCodec(topic, table.key, _json_writer(), _json_writer())
        assert self._registry is not None
        kschema = key_schema(self.prefix, table)
        vschema = value_schema(self.prefix, table, self.connector)
        try:
            key_id = self._registry.register(f"{topic}-key", kschema)
            value_id = self._registry.register(f"{topic}-value", vschema)
        except SchemaRegistryError as e:
            if e.http_status != 409:
                raise
            raise SchemaChangeError(
                f"table {table.qualified_name}: {describe_change(self._shapes.get(topic), table)}"
                f" is not carried: the schema registry refuses the new schema of {topic} as "
                f"incompatible ({e}); set that subject's compatibility to NONE to carry it"
            ) from None
        self._shapes[topic] = table
        log.info("table %s: key schema %d, value schema %d", table.qualified_name, key_id,
                 value_id)  # fmt: skip
        return _TableCodec(
            topic, table.key, _avro_writer(key_id, kschema), _avro_writer(value_id, vschema),
            row_name=f"{vschema['namespace']}.Value",
        )  # fmt: skip


def describe_change(before: TableSchema | None, after: TableSchema) -> str:
    """A table's change of shape, for one line: ``column 'd' integer → text, …``."""
    if before is None:
        return (
            "its new shape ("
            + ", ".join(f"{c.name} {c.source_type or c.type.value}" for c in after.columns)
            + ")"
        )
    old = {c.name: c for c in before.columns}
    parts = []
    for c in after.columns:
        was = old.get(c.name) or next((old[n] for n in reversed(c.renamed_from) if n in old), None)
        if was is None:
            parts.append(f"ADD COLUMN {c.name!r} {c.source_type}")
        elif was.name != c.name:
            parts.append(f"RENAME COLUMN {was.name!r} TO {c.name!r}")
        if was is not None and (was.type, was.source_type) != (c.type, c.source_type):
            parts.append(
                f"column {c.name!r}: ALTER COLUMN TYPE {was.source_type or was.type.value}"
                f" → {c.source_type or c.type.value}"
            )
    kept = {n for c in after.columns for n in (c.name, *c.renamed_from)}
    parts += [f"DROP COLUMN {n!r}" for n in old if n not in kept]
    return ", ".join(parts) or "a change of its schema"


def _avro_writer(schema_id: int, schema: dict[str, Any]) -> Callable[[Any], bytes]:
    parsed = fastavro.parse_schema(schema)
    header = _CONFLUENT_HEADER.pack(0, schema_id)
    write = fastavro.schemaless_writer

    def encode(value: Any) -> bytes:
        out = io.BytesIO()
        out.write(header)
        write(out, parsed, value)
        return out.getvalue()

    return encode


def _json_writer() -> Callable[[Any], bytes]:
    def encode(value: Any) -> bytes:
        return json.dumps(value, default=_json_default, separators=(",", ":")).encode()

    return encode


def _same_key(key: tuple[str, ...], before: Row, after: Row) -> bool:
    """``TableSchema.key_of(before) == key_of(after)``, without building the two dicts."""
    for name in key:
        old, new = before[name], after[name]
        if old is not new and old != new:
            return False
    return True


def same_source_transaction(a: Change, b: Change) -> bool:
    """Whether two changes belong to one source transaction: both streamed with the same
    transaction id and the same commit (a position's first part: PostgreSQL's commit LSN, so
    a reused xid is not mistaken). Snapshot rows and changes without a transaction id (the
    SQLite source's) are each their own."""
    if a.tx_id is None or a.tx_id != b.tx_id or a.snapshot != "false" or b.snapshot != "false":
        return False
    return a.position.split("/", 1)[0] == b.position.split("/", 1)[0]


def whole_transactions(changes: Sequence[Change], count: int) -> int:
    """How many of the first ``count`` changes to take so as not to end inside a source
    transaction: ``count`` moved back to where the transaction of ``changes[count]`` begins."""
    while 0 < count < len(changes) and same_source_transaction(changes[count - 1], changes[count]):
        count -= 1
    return count


def open_capture_producer(config: Mapping[str, object], transactional_id: str) -> tuple[Any, bool]:
    """A blocking producer for capture with ``transactional.id`` and its transactions
    initialised (fencing an earlier capture of the same id, and aborting the transaction it
    left open); True with it. A broker without Kafka transactions gets a plain producer, and
    False: events are then published without them (one line in the log says so)."""
    from kayak.client.sync import Producer

    producer = Producer({**config, "transactional.id": transactional_id})
    try:
        producer.init_transactions()
    except UnsupportedVersionError as e:
        producer.close()
        log.warning("the broker has no Kafka transactions (%s): publishing without them, so a "
                    "reader may see part of a source transaction", e)  # fmt: skip
        return Producer(dict(config)), False
    except BaseException:
        producer.close()
        raise
    log.info("publishing in Kafka transactions as transactional.id %s", transactional_id)
    return producer, True


class ChangePublisher:
    """Publishes changes through a blocking producer (``kayak.client.sync.Producer`` or
    anything with its ``send_batch``/``create_topics`` shape) and waits for every ack.

    ``transactional``: the producer's transactions are initialised; :meth:`begin`,
    :meth:`commit` and :meth:`abort` then frame each batch (they do nothing otherwise)."""

    def __init__(
        self, producer: Any, encoder: EventEncoder, *, db: str,
        ensure_topic: Callable[[str], None] | None = None, transactional: bool = False,
    ) -> None:  # fmt: skip
        self._producer = producer
        self._encoder = encoder
        self._db = db
        self._ensure_topic = ensure_topic
        self._topics: set[str] = set()
        self.transactional = transactional
        self.events_published = 0

    def begin(self) -> None:
        """Start the Kafka transaction of the next batch (transactional publishers only)."""
        if self.transactional:
            self._producer.begin_transaction()

    def commit(self) -> None:
        """Make the batch's events visible to read_committed readers, all at once."""
        if self.transactional:
            self._producer.commit_transaction()

    def abort(self) -> None:
        """Abort the open transaction (its events are never visible to read_committed
        readers); an error while aborting is logged, as the caller is already failing."""
        if not self.transactional:
            return
        try:
            self._producer.abort_transaction()
        except Exception as e:
            log.warning("aborting the capture's Kafka transaction failed: %s", e)

    def _records(self, change: Change, now_ms: int) -> list[_Record]:
        """The records of one change (see the module doc for deletes and key changes)."""
        codec = self._encoder.codec(change.table)
        topic, op = codec.topic, change.op
        if op is Op.TRUNCATE:
            return [(topic, None, self._value(codec, change, "t", None, None, now_ms))]
        before, after = change.before, change.after
        if op is Op.DELETE:
            assert before is not None
            key = codec.key(before)
            value = self._value(codec, change, "d", before, None, now_ms)
            return [(topic, key, value), (topic, key, None)]
        if op is Op.UPDATE and before is not None:
            assert after is not None
            if not _same_key(change.table.key, before, after):
                key = codec.key(before)
                return [
                    (topic, key, self._value(codec, change, "d", before, None, now_ms)),
                    (topic, key, None),
                    (topic, codec.key(after), self._value(codec, change, "c", None, after, now_ms)),
                ]
        image = after if after is not None else before
        image_key = None if image is None else codec.key(image)
        return [(topic, image_key, self._value(codec, change, op.value, before, after, now_ms))]

    def _value(
        self, codec: _TableCodec, change: Change, op: str, before: Row | None,
        after: Row | None, now_ms: int,
    ) -> bytes:  # fmt: skip
        enc, row_name = self._encoder, codec.row_name
        value = event_value(
            change, op=op, prefix=enc.prefix, connector=enc.connector, db=self._db,
            now_ms=now_ms,
            before=before if before is None or row_name is None else (row_name, before),
            after=after if after is None or row_name is None else (row_name, after),
        )  # fmt: skip
        return codec.write_value(value)

    def publish(self, changes: Sequence[Change]) -> int:
        """Produce the events of ``changes`` in order; return when the broker acknowledged
        all of them (raising the first delivery error otherwise). Returns the event count.

        A change whose new table shape the registry refuses raises
        :class:`~kayak.cdc.errors.SchemaChangeError` once the whole source transactions before
        it are published; its ``published`` attribute is how many changes were."""
        sent = self.send(changes)
        self.wait(sent)
        return sent.events

    def send(self, changes: Sequence[Change]) -> SentEvents:
        """:meth:`publish` without the wait: the events of ``changes`` are handed to the
        producer, and :meth:`wait` returns once the broker acknowledged them. (A refused
        change raises as in :meth:`publish`, after the wait for what precedes it.)"""
        now_ms = time.time_ns() // 1_000_000
        by_topic: dict[str, tuple[list[bytes | None], list[bytes | None]]] = {}
        last_topic = ""
        values: list[bytes | None] = []
        keys: list[bytes | None] = []
        count = 0
        for i, change in enumerate(changes):
            try:
                records = self._records(change, now_ms)
            except SchemaChangeError as e:
                refused = SchemaChangeError(f"{e}; capture stopped at source position "
                                            f"{change.position}")  # fmt: skip
                # Not the part of the refused change's transaction before it: a reader would
                # see half of that transaction.
                refused.published = whole_transactions(changes, i)
                if refused.published:
                    self.wait(self.send(changes[: refused.published]))
                raise refused from None
            for topic, key, value in records:
                if topic != last_topic:
                    values, keys = by_topic.setdefault(topic, ([], []))
                    last_topic = topic
                values.append(value)
                keys.append(key)
            count += len(records)
        return SentEvents(count, self._send(by_topic))

    def wait(self, sent: SentEvents) -> None:
        """Return once the broker acknowledged every event of ``sent`` (raising the first
        delivery error otherwise)."""
        for future in sent.futures:
            future.result()
        self.events_published += sent.events

    def _send(
        self, by_topic: dict[str, tuple[list[bytes | None], list[bytes | None]]]
    ) -> list[Future[Any]]:  # fmt: skip
        futures = []
        for topic, (values, keys) in by_topic.items():
            if topic not in self._topics:
                if self._ensure_topic is not None:
                    self._ensure_topic(topic)
                self._topics.add(topic)
            futures.append(self._producer.send_batch(topic, values, keys))
        return futures
