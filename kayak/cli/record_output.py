"""How ``kayak consume`` prints records: kcat's format tokens (``-f``), its default line
(``[headers<TAB>][key<SEP>]value``), and its JSON envelope (``-J``).

Format tokens: ``%s``/``%v`` value, ``%k`` key, ``%t`` topic, ``%p`` partition, ``%o``
offset, ``%T`` timestamp (ms), ``%h`` headers (``k=v,k2=v2``), ``%S``/``%K`` value and key
length (-1 for null), ``%%`` a percent sign; ``\\n``, ``\\t``, ``\\r``, ``\\0`` and ``\\\\``
escapes. A newline is added unless the format ends with one. Null keys and values print as
nothing, or as ``NULL`` with ``-Z`` (kcat's ``-Z``). The JSON envelope has kcat's field names:
``topic``, ``partition``, ``offset``, ``tstype`` (``create``/``logappend``), ``ts``,
``broker``, ``headers`` (``["k", "v", ...]``, present only when the record has headers),
``key`` and ``payload`` (strings, ``null`` when null; bytes that are not UTF-8 are replaced
by U+FFFD).

With ``-s key=avro``/``-s value=avro`` (:class:`AvroFields`) Confluent-framed Avro keys or
values are decoded through the schema registry: printed as JSON text by ``-f``/the default
line, and put in ``-J``'s ``key``/``payload`` as the decoded object itself (Avro bytes as
base64, decimals and UUIDs as strings, dates and times in ISO 8601). A key or value that
cannot be decoded (not Confluent framing, an unknown schema id, a garbled body) is shown as
it is, with one line on stderr naming the record and why.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TextIO

import click

from kayak.client.consumer import ConsumerRecord
from kayak.errors import SerializationError
from kayak.protocol.records.record import TimestampType
from kayak.serde.json_form import avro_json_default

__all__ = [
    "AvroFields",
    "JsonPrinter",
    "Printer",
    "RecordWriter",
    "compile_format",
    "default_format",
]

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
NULL = b"NULL"

Getter = Callable[[ConsumerRecord], bytes]
Piece = bytes | Getter


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(record: ConsumerRecord) -> bytes:
    return b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers)


class _Deserializer(Protocol):
    def deserialize(self, data: bytes | bytearray | memoryview) -> Any: ...


@dataclass
class AvroFields:
    """Decodes the Avro keys and/or values of records (``key``/``value``: which ones) with
    ``deserializer`` (a :class:`~kayak.serde.avro.AvroDeserializer`). A field that cannot be
    decoded is left as it is, and ``warnings`` gets one line saying which record and why.
    Registry errors other than an unknown id (the registry went away) are raised."""

    deserializer: _Deserializer
    key: bool = False
    value: bool = False
    warnings: TextIO = field(default_factory=lambda: sys.stderr)

    def decoded(self, record: ConsumerRecord, which: str) -> tuple[bool, Any]:
        """(True, the decoded object) or (False, None) for the record's ``which`` field
        ("key" or "value"); a null field is not decoded (a tombstone stays null)."""
        data = record.key if which == "key" else record.value
        if data is None or not (self.key if which == "key" else self.value):
            return False, None
        try:
            return True, self.deserializer.deserialize(data)
        except SerializationError as exc:
            where = f"{record.topic}-{record.partition}@{record.offset}"
            self.warnings.write(f"kayak consume: {where}: {which} shown raw: {exc}\n")
            self.warnings.flush()
            return False, None

    def text(self, record: ConsumerRecord, which: str) -> bytes | None:
        """The field as printed: the decoded object as JSON, else the bytes as they are."""
        ok, decoded = self.decoded(record, which)
        if ok:
            return json.dumps(decoded, ensure_ascii=False, default=avro_json_default).encode()
        return record.key if which == "key" else record.value


def _tokens(null: bytes, fields: AvroFields | None = None) -> dict[str, Getter]:
    def value(r: ConsumerRecord) -> bytes:
        data = r.value if fields is None else fields.text(r, "value")
        return null if data is None else data

    def key(r: ConsumerRecord) -> bytes:
        data = r.key if fields is None else fields.text(r, "key")
        return null if data is None else data

    return {
        "v": value,
        "s": value,
        "k": key,
        "t": lambda r: r.topic.encode(),
        "p": lambda r: str(r.partition).encode(),
        "o": lambda r: str(r.offset).encode(),
        "T": lambda r: str(r.timestamp).encode(),
        "h": _headers,
        "S": lambda r: _length(r.value),
        "K": lambda r: _length(r.key),
    }


def compile_format(
    text: str, *, null_as_text: bool = False, fields: AvroFields | None = None
) -> list[Piece]:
    """Turn a kcat-like format into literal bytes and field getters (a newline appended
    unless the format ends with one); null keys and values as ``NULL`` if ``null_as_text``;
    keys and values decoded by ``fields`` if given. Raises ``click.BadParameter`` for unknown
    tokens."""
    tokens = _tokens(NULL if null_as_text else b"", fields)
    pieces: list[Piece] = []
    literal = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "%" and following == "%":
            literal += b"%"
        elif char == "%":
            getter = tokens.get(following)
            if getter is None:
                known = " ".join(f"%{t}" for t in tokens)
                raise click.BadParameter(
                    f"unknown token %{following} (known: {known} %%)", param_hint="-f"
                )
            if literal:
                pieces.append(bytes(literal))
                literal.clear()
            pieces.append(getter)
        elif char == "\\" and following in _ESCAPES:
            literal += _ESCAPES[following]
        else:
            literal += char.encode()
            index += 1
            continue
        index += 2
    if not literal.endswith(b"\n"):
        literal += b"\n"
    pieces.append(bytes(literal))
    return pieces


def default_format(key_separator: str | None, with_headers: bool) -> str:
    """kcat's line without ``-f``: the value; ``-K SEP`` puts the key and SEP before it,
    ``-H`` the headers and a tab before that."""
    text = "%s"
    if key_separator is not None:
        text = "%k" + key_separator.replace("%", "%%") + text
    if with_headers:
        text = "%h\t" + text
    return text


class RecordWriter(Protocol):
    """What the read loop writes records to."""

    printed: int
    out: BinaryIO

    def write(self, records: Sequence[ConsumerRecord]) -> None: ...


@dataclass
class Printer:
    """Writes records to ``out`` in a compiled format."""

    pieces: list[Piece]
    out: BinaryIO
    printed: int = 0

    def write(self, records: Sequence[ConsumerRecord]) -> None:
        pieces = self.pieces
        chunks: list[bytes] = []
        for record in records:
            chunks += [p if isinstance(p, bytes) else p(record) for p in pieces]
        self.out.write(b"".join(chunks))
        self.printed += len(records)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


@dataclass
class JsonPrinter:
    """One JSON object per record, in kcat's ``-J`` envelope. ``leader`` gives the broker
    (node id) a partition was read from."""

    out: BinaryIO
    leader: Callable[[str, int], int]
    printed: int = 0
    fields: AvroFields | None = None
    _brokers: dict[tuple[str, int], int] = field(default_factory=dict)

    def write(self, records: Sequence[ConsumerRecord]) -> None:
        lines: list[bytes] = []
        for record in records:
            envelope = self.envelope(record)
            text = json.dumps(envelope, ensure_ascii=False, default=avro_json_default)
            lines.append(text.encode())
            lines.append(b"\n")
        self.out.write(b"".join(lines))
        self.printed += len(records)

    def envelope(self, record: ConsumerRecord) -> dict[str, object]:
        """The record as kcat's JSON object."""
        where = (record.topic, record.partition)
        broker = self._brokers.get(where)
        if broker is None:
            broker = self._brokers[where] = self.leader(*where)
        envelope: dict[str, object] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "tstype": "logappend"
            if record.timestamp_type == TimestampType.LOG_APPEND_TIME
            else "create",
            "ts": record.timestamp,
            "broker": broker,
        }
        if record.headers:
            envelope["headers"] = [item for k, v in record.headers for item in (k, _text(v))]
        envelope["key"] = self._field(record, "key")
        envelope["payload"] = self._field(record, "value")
        return envelope

    def _field(self, record: ConsumerRecord, which: str) -> object:
        if self.fields is not None:
            ok, decoded = self.fields.decoded(record, which)
            if ok:
                return decoded
        return _text(record.key if which == "key" else record.value)
