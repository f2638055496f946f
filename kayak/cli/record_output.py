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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

import click

from kayak.client.consumer import ConsumerRecord
from kayak.protocol.records.record import TimestampType

__all__ = ["JsonPrinter", "Printer", "RecordWriter", "compile_format", "default_format"]

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
NULL = b"NULL"

Getter = Callable[[ConsumerRecord], bytes]
Piece = bytes | Getter


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(record: ConsumerRecord) -> bytes:
    return b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers)


def _tokens(null: bytes) -> dict[str, Getter]:
    def value(r: ConsumerRecord) -> bytes:
        return null if r.value is None else r.value

    def key(r: ConsumerRecord) -> bytes:
        return null if r.key is None else r.key

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


def compile_format(text: str, *, null_as_text: bool = False) -> list[Piece]:
    """Turn a kcat-like format into literal bytes and field getters (a newline appended
    unless the format ends with one); null keys and values as ``NULL`` if ``null_as_text``.
    Raises ``click.BadParameter`` for unknown tokens."""
    tokens = _tokens(NULL if null_as_text else b"")
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
    _brokers: dict[tuple[str, int], int] = field(default_factory=dict)

    def write(self, records: Sequence[ConsumerRecord]) -> None:
        lines: list[bytes] = []
        for record in records:
            lines.append(json.dumps(self.envelope(record), ensure_ascii=False).encode() + b"\n")
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
            envelope["headers"] = [
                item for k, v in record.headers for item in (k, _text(v))
            ]
        envelope["key"] = _text(record.key)
        envelope["payload"] = _text(record.value)
        return envelope
