"""Decoded Avro values as JSON: the types Avro decoding gives beyond JSON's own."""

from __future__ import annotations

import base64
import datetime
import decimal
import uuid

__all__ = ["avro_json_default"]


def avro_json_default(value: object) -> object:
    """``json.dumps``'s ``default`` for decoded Avro values: bytes as base64, dates and times in
    ISO 8601, decimals and UUIDs as their text; anything else is not JSON (TypeError)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
