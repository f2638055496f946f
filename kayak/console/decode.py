"""Record keys and values as a person reads them: Avro, JSON, text, or hex.

Avro is recognised by Confluent's framing (magic byte 0, a 4-byte schema id) and decoded with
the writer schema the registry has under that id. ``auto`` tries Avro, then JSON, then UTF-8
text, and falls back to hex, so binary data is never shown as mojibake.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import fastavro

from kayak.serde.json_form import avro_json_default

FORMATS = ("auto", "avro", "json", "text", "hex")
MAX_SHOWN_BYTES = 16 * 1024  # longer values are cut, saying so
_AVRO_HEADER = struct.Struct(">bI")

SchemaById = Callable[[int], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Shown:
    """A key or value ready to print: how it was decoded (``format``) and the text."""

    format: str
    text: str


async def show(data: bytes | None, wanted: str, schema_by_id: SchemaById | None) -> Shown:
    """``data`` decoded as ``wanted`` (one of :data:`FORMATS`); a decoding that fails says
    why and shows hex instead."""
    if data is None:
        return Shown("null", "null")
    data = bytes(data)
    if wanted in ("auto", "avro"):
        avro = await _avro(data, schema_by_id)
        if avro is not None or wanted == "avro":
            return avro or Shown("hex (not Confluent Avro)", _hex(data))
    if wanted in ("auto", "json"):
        decoded = _json(data)
        if decoded is not None or wanted == "json":
            return decoded or Shown("hex (not JSON)", _hex(data))
    if wanted in ("auto", "text"):
        text = _text(data)
        if text is not None or wanted == "text":
            return text or Shown("hex (not UTF-8)", _hex(data))
    return Shown("hex", _hex(data))


def header_text(value: bytes | None) -> str:
    """A header value: its text when it is UTF-8, else hex."""
    if value is None:
        return "null"
    shown = _text(bytes(value))
    return shown.text if shown is not None else _hex(bytes(value))


async def _avro(data: bytes, schema_by_id: SchemaById | None) -> Shown | None:
    if schema_by_id is None or len(data) < _AVRO_HEADER.size:
        return None
    magic, schema_id = _AVRO_HEADER.unpack_from(data)
    if magic != 0:
        return None
    try:
        schema = fastavro.parse_schema(await schema_by_id(schema_id))
    except Exception:  # unknown id, registry down, not Avro: not this format
        return None
    body = io.BytesIO(data[_AVRO_HEADER.size :])
    try:
        value = fastavro.schemaless_reader(body, schema, None)
    except Exception:
        return None
    if body.tell() != len(data) - _AVRO_HEADER.size:
        return None  # bytes left over: it only looked like Avro
    return Shown(f"avro (schema {schema_id})", _cut(json.dumps(value, indent=2, default=_plain)))


def _json(data: bytes) -> Shown | None:
    start = data.lstrip()[:1]
    if start not in (b"{", b"[", b'"') and not _looks_scalar(data):
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return Shown("json", _cut(json.dumps(value, indent=2, ensure_ascii=False)))


def _looks_scalar(data: bytes) -> bool:
    """A JSON number, true, false or null (short: a long digit string is more likely text)."""
    stripped = data.strip()
    if stripped in (b"true", b"false", b"null"):
        return True
    return bool(stripped) and stripped[:1] in b"-0123456789" and len(stripped) < 40


def _text(data: bytes) -> Shown | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return None
    return Shown("text", _cut(text))


def _hex(data: bytes) -> str:
    shown = data[:MAX_SHOWN_BYTES].hex(" ")
    return shown + (f" … ({len(data)} bytes)" if len(data) > MAX_SHOWN_BYTES else "")


def _cut(text: str) -> str:
    if len(text) <= MAX_SHOWN_BYTES:
        return text
    return text[:MAX_SHOWN_BYTES] + f" … ({len(text)} characters in all)"


def _plain(value: object) -> object:
    """JSON for what Avro decodes to beyond JSON's types (shown, so never refused)."""
    try:
        return avro_json_default(value)
    except TypeError:
        return repr(value)
