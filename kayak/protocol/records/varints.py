"""Zigzag varints as the record format uses them: tables for the encode and decode hot paths.

The per-record loops in :mod:`.batch` and :mod:`.builder` decode one- and two-byte varints
inline with these tables (a list index is several times cheaper than the shift/xor/negate
arithmetic, and a function call costs more than the whole decode); anything longer goes
through :func:`read_zigzag`, which reuses the bounded reader from ``kayak.protocol.primitives``.
"""

from __future__ import annotations

from kayak.errors import CorruptRecordError, MalformedMessageError
from kayak.protocol.primitives import encode_varint, read_unsigned_varint

Buffer = bytes | bytearray | memoryview

ZIGZAG_TABLE_SIZE = 8192
"""Every value in ``[0, 8192)`` has a zigzag varint of at most two bytes."""

ZIGZAG_VARINTS: list[bytes] = [encode_varint(value) for value in range(ZIGZAG_TABLE_SIZE)]
"""``ZIGZAG_VARINTS[v]`` is the zigzag varint encoding of the non-negative ``v``."""

ZIGZAG_VARINT_SIZES: list[int] = [len(encoded) for encoded in ZIGZAG_VARINTS]

NULL_LENGTH = encode_varint(-1)  # b"\x01": the length of a null key or value

# Decoding: index by the raw (un-zigzagged) varint value.
ZIGZAG_DECODE_1: list[int] = [(raw >> 1) ^ -(raw & 1) for raw in range(0x80)]
"""Decoded value of a one-byte varint, indexed by that byte."""

ZIGZAG_DECODE_2: list[int] = [(raw >> 1) ^ -(raw & 1) for raw in range(0x4000)]
"""Decoded value of a two-byte varint, indexed by ``(b0 - 0x80) + (b1 << 7)``."""


def varint_bytes(value: int) -> bytes:
    """Zigzag varint for any int64, through the table when it is small."""
    if 0 <= value < ZIGZAG_TABLE_SIZE:
        return ZIGZAG_VARINTS[value]
    return encode_varint(value)


def read_zigzag(buf: Buffer, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Read one zigzag varint of at most ``max_bytes`` bytes; the slow path of the loops."""
    try:
        raw, pos = read_unsigned_varint(buf, pos, max_bytes)
    except MalformedMessageError as exc:
        raise CorruptRecordError(f"bad varint in record data: {exc}") from None
    return (raw >> 1) ^ -(raw & 1), pos


def skip_varint(buf: Buffer, pos: int) -> int:
    """Return the position after the varint at ``pos`` without decoding it."""
    return read_zigzag(buf, pos)[1]
