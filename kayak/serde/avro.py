"""Avro values in Confluent's wire format: magic byte 0, 4-byte big-endian schema id, body.

The body is Avro binary without a container (fastavro's schemaless writer and reader), so
bytes written here are read by Confluent's deserializers and the other way round.

Per message the serializer does one dict lookup, one header copy and fastavro's encoding; the
registry is asked once per (subject, schema) and the deserializer once per schema id. Both
pickle as their registry URL and options: caches are rebuilt lazily where they land (Spark
executors).
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Mapping
from typing import Any

import fastavro

from kayak.errors import SchemaRegistryError, SerializationError
from kayak.serde.registry import SchemaRegistryClient, registry_client, schema_text

MAGIC_BYTE = 0
HEADER = struct.Struct(">bI")  # magic byte, schema id

Schema = str | Mapping[str, Any]


def _parse(schema: Any) -> Any:
    """fastavro's parsed form (marked parsed, so encoding and decoding do not redo it)."""
    document = json.loads(schema) if isinstance(schema, str) else schema
    return fastavro.parse_schema(document)


class _Registered:
    """What a (subject, schema) pair turned into: the header to prefix and fastavro's schema."""

    __slots__ = ("header", "parsed", "source")

    def __init__(self, header: bytes, parsed: Any, source: object) -> None:
        self.header = header
        self.parsed = parsed
        self.source = source  # held so its id() stays unique while it is cached


class AvroSerializer:
    """Values to Confluent-framed Avro bytes, registering (or looking up) schemas once.

    ``auto_register=False`` only looks the schema up under the subject (an error if it is not
    registered there), for deployments where schemas are registered ahead of time.
    Schemas given as dicts are cached by identity: pass the same object each time, and do not
    change it after first use. ``registry``: a client, a URL, or Confluent's settings dict
    (``{"url": "https://…", "basic.auth.user.info": "u:p", "ssl.ca.location": "ca.pem"}``).
    """

    def __init__(
        self,
        registry: SchemaRegistryClient | str | Mapping[str, str],
        *,
        auto_register: bool = True,
    ) -> None:
        self.registry = registry_client(registry)
        self.auto_register = auto_register
        self._lock = threading.Lock()
        self._registered: dict[tuple[str, object], _Registered] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "auto_register": self.auto_register}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["registry"], auto_register=state["auto_register"])  # type: ignore[misc]

    def serialize(self, subject: str, schema: Schema, value: Any) -> bytes:
        """``value`` encoded with ``schema``, framed with the id ``schema`` has in ``subject``."""
        # str schemas are keyed by value (their hash is cached by Python), others by identity.
        if isinstance(schema, str):
            key: tuple[str, object] = (subject, schema)
            registered = self._registered.get(key)
        else:
            key = (subject, id(schema))
            registered = self._registered.get(key)
            if registered is not None and registered.source is not schema:
                registered = None  # another object that got the id of a freed one
        if registered is None:
            registered = self._register(subject, schema, key)
        out = io.BytesIO()
        out.write(registered.header)
        try:
            fastavro.schemaless_writer(out, registered.parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise SerializationError(
                f"cannot encode a value for subject {subject!r} with its schema: {exc}"
            ) from exc
        return out.getvalue()

    def _register(self, subject: str, schema: Schema, key: tuple[str, object]) -> _Registered:
        try:
            parsed = _parse(schema)
        except Exception as exc:  # fastavro raises many types for bad schemas
            raise SerializationError(f"invalid Avro schema for subject {subject!r}: {exc}") from exc
        try:
            if self.auto_register:
                schema_id = self.registry.register(subject, schema)
            else:
                schema_id = self.registry.lookup(subject, schema).schema_id
        except SchemaRegistryError as exc:
            if exc.error_code == 42201:  # the registry validates more strictly than fastavro
                raise SerializationError(
                    f"invalid Avro schema for subject {subject!r}: {exc.message}"
                ) from exc
            raise
        registered = _Registered(HEADER.pack(MAGIC_BYTE, schema_id), parsed, schema)
        with self._lock:
            self._registered[key] = registered
        return registered


class AvroDeserializer:
    """Confluent-framed Avro bytes to values, fetching writer schemas by id once each.

    With ``reader_schema`` values are resolved to it (Avro schema resolution: added fields
    get defaults, removed ones are skipped, promotions apply). ``registry`` as for
    :class:`AvroSerializer`.
    """

    def __init__(
        self,
        registry: SchemaRegistryClient | str | Mapping[str, str],
        reader_schema: Schema | None = None,
    ) -> None:
        self.registry = registry_client(registry)
        self.reader_schema = reader_schema
        self._reader = None if reader_schema is None else _parse(reader_schema)
        self._writers: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "reader_schema": self.reader_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["registry"], state["reader_schema"])  # type: ignore[misc]

    def deserialize(self, data: bytes | bytearray | memoryview) -> Any:
        """The value in ``data`` (see :meth:`deserialize_with_id`)."""
        return self.deserialize_with_id(data)[1]

    def deserialize_with_id(self, data: bytes | bytearray | memoryview) -> tuple[int, Any]:
        """(writer schema id, value); SerializationError naming what is wrong with ``data``."""
        if data is None:  # a null record value reaches here easily
            raise SerializationError("no data to deserialize (a null value)")
        if len(data) < HEADER.size:
            raise SerializationError(
                f"{len(data)} bytes are too short for the 5-byte Confluent Avro header"
            )
        magic, schema_id = HEADER.unpack_from(data)
        if magic != MAGIC_BYTE:
            raise SerializationError(f"unknown magic byte {magic}: not Confluent-framed Avro")
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writer_schema(schema_id)
        body = io.BytesIO(memoryview(data)[HEADER.size :])
        try:
            value = fastavro.schemaless_reader(body, writer, self._reader)
        except Exception as exc:  # truncated or garbled bodies fail many ways
            raise SerializationError(
                f"cannot decode the body with writer schema {schema_id}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if body.tell() != len(data) - HEADER.size:
            raise SerializationError(
                f"{len(data) - HEADER.size - body.tell()} bytes left over after the value "
                f"(writer schema {schema_id}): not this schema's encoding"
            )
        return schema_id, value

    def _writer_schema(self, schema_id: int) -> Any:
        try:
            schema = self.registry.schema_by_id(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status == 404:
                raise SerializationError(
                    f"unknown schema id {schema_id}: {self.registry.url} does not know it"
                ) from exc
            raise
        try:
            parsed = _parse(schema)
        except Exception as exc:
            raise SerializationError(f"schema {schema_id} is not valid Avro: {exc}") from exc
        with self._lock:
            self._writers[schema_id] = parsed
        return parsed


__all__ = ["HEADER", "MAGIC_BYTE", "AvroDeserializer", "AvroSerializer", "schema_text"]
