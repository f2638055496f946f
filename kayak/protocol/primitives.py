"""Kafka wire primitives: fixed-width integers, varints, strings, bytes, uuids, arrays.

Every reader takes ``(buf, pos)`` and returns ``(value, new_pos)``; every writer appends to a
``bytearray``. Readers check bounds themselves because slicing a ``memoryview`` past its end
silently truncates instead of failing; a short or lying buffer raises
:class:`~kayak.errors.MalformedMessageError`, never ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from kayak.errors import EncodeError, MalformedMessageError

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)

_UVARINT_1 = [bytes((i,)) for i in range(128)]


# -- varints ---------------------------------------------------------------------------------


def encode_unsigned_varint(value: int) -> bytes:
    """Encode a non-negative integer as a base-128 little-endian varint."""
    if 0 <= value < 128:
        return _UVARINT_1[value]
    if value < 0:
        raise EncodeError(f"unsigned varint cannot hold negative value {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_unsigned_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as an unsigned varint."""
    if 0 <= value < 128:
        out.append(value)
    else:
        out += encode_unsigned_varint(value)


def read_unsigned_varint(buf: Buffer, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Read an unsigned varint of at most ``max_bytes`` bytes (5 for 32-bit, 10 for 64-bit)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        for i in range(1, max_bytes):
            b = buf[pos + i]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos + i + 1
            shift += 7
    except IndexError:
        raise MalformedMessageError(f"truncated varint at offset {pos}") from None
    raise MalformedMessageError(f"varint longer than {max_bytes} bytes at offset {pos}")


def encode_varint(value: int) -> bytes:
    """Encode a signed integer as a zigzag varint (Kafka ``varint``/``varlong``)."""
    return encode_unsigned_varint((value << 1) ^ (value >> 63))


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zigzag varint."""
    write_unsigned_varint(out, (value << 1) ^ (value >> 63))


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded 32-bit varint."""
    raw, pos = read_unsigned_varint(buf, pos, 5)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded 64-bit varint."""
    raw, pos = read_unsigned_varint(buf, pos, 10)
    return (raw >> 1) ^ -(raw & 1), pos


# -- lengths ---------------------------------------------------------------------------------


def _check_span(buf: Buffer, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise MalformedMessageError(
            f"{what} of {n} bytes at offset {pos} runs past the end of a {len(buf)}-byte buffer"
        )
    return end


def read_int16_length(buf: Buffer, pos: int) -> tuple[int, int]:
    if pos + 2 > len(buf):
        raise MalformedMessageError(f"truncated length at offset {pos}")
    return INT16.unpack_from(buf, pos)[0], pos + 2


def read_int32_length(buf: Buffer, pos: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise MalformedMessageError(f"truncated length at offset {pos}")
    return INT32.unpack_from(buf, pos)[0], pos + 4


def read_compact_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a compact length: the unsigned varint N+1, so -1 means null."""
    n, pos = read_unsigned_varint(buf, pos)
    return n - 1, pos


# -- strings ---------------------------------------------------------------------------------


def _decode_utf8(buf: Buffer, pos: int, end: int) -> str:
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedMessageError(f"string at offset {pos} is not valid UTF-8") from exc


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise EncodeError(f"string of {len(data)} bytes exceeds the int16 length limit")
    out += INT16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    write_unsigned_varint(out, len(data) + 1)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = read_int16_length(buf, pos)
    if n < 0:
        raise MalformedMessageError(f"null string at offset {pos - 2} where none is allowed")
    end = _check_span(buf, pos, n, "string")
    return _decode_utf8(buf, pos, end), end


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_int16_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "string")
    return _decode_utf8(buf, pos, end), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = read_compact_length(buf, pos)
    if n < 0:
        raise MalformedMessageError(f"null compact string at offset {pos} where none is allowed")
    end = _check_span(buf, pos, n, "string")
    return _decode_utf8(buf, pos, end), end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "string")
    return _decode_utf8(buf, pos, end), end


# -- bytes -----------------------------------------------------------------------------------


def write_bytes(out: bytearray, value: Buffer) -> None:
    out += INT32.pack(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: Buffer) -> None:
    write_unsigned_varint(out, len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_bytes(out, value)


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = read_int32_length(buf, pos)
    if n < 0:
        raise MalformedMessageError(f"null bytes at offset {pos - 4} where none is allowed")
    end = _check_span(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_int32_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = read_compact_length(buf, pos)
    if n < 0:
        raise MalformedMessageError(f"null compact bytes at offset {pos} where none is allowed")
    end = _check_span(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


# Records are handed out as read-only views of the frame, never copied: the broker writes them
# to disk and the consumer scans them in place.
#
# On the way out, a records field may also hold a *region*: anything with a length that the
# transport will send itself (the broker's segment file slices, sent with sendfile). The encoder
# writes the length prefix and leaves a splice point in a SplicedBuffer; this package never
# reads the region's bytes.


@runtime_checkable
class RecordsRegion(Protocol):
    """Record bytes held elsewhere (a file range), sent by the transport, not by the encoder.

    ``read()`` is the fallback for transports that cannot send the region themselves; it
    also keeps arbitrary sized objects (a str, a list) from passing for a region.
    """

    def __len__(self) -> int: ...

    def read(self) -> bytes: ...


Records = bytes | bytearray | memoryview | RecordsRegion


class SplicedBuffer(bytearray):
    """An output buffer that may also carry regions to be sent between its bytes.

    ``parts()`` yields the encoding in order: memoryviews of this buffer's own bytes and the
    regions spliced in at the places their length prefixes announced.
    """

    # No __init__ of its own, and no list until a region is spliced in: nearly every buffer
    # carries none, and a Python __init__ was a third of an empty buffer's cost.
    splices: Sequence[tuple[int, RecordsRegion]] = ()

    def splice(self, region: RecordsRegion) -> None:
        entry = (len(self), region)
        if self.splices:
            cast("list[tuple[int, RecordsRegion]]", self.splices).append(entry)
        else:
            self.splices = [entry]

    @property
    def total_size(self) -> int:
        """Bytes on the wire: this buffer's plus every spliced region's."""
        if not self.splices:
            return len(self)
        return len(self) + sum(len(region) for _, region in self.splices)

    def parts(self) -> list[memoryview | RecordsRegion]:
        view = memoryview(self)
        out: list[memoryview | RecordsRegion] = []
        start = 0
        for at, region in self.splices:
            if at > start:
                out.append(view[start:at])
            out.append(region)
            start = at
        if start < len(self):
            out.append(view[start:])
        return out


def _write_region(out: bytearray, region: object) -> None:
    # Duck-typed as RecordsRegion is, without a runtime-checkable Protocol's slow isinstance.
    if (
        isinstance(out, SplicedBuffer)
        and hasattr(region, "__len__")
        and callable(getattr(region, "read", None))
    ):
        out.splice(cast(RecordsRegion, region))
    else:
        raise EncodeError(f"records of type {type(region).__name__} need a SplicedBuffer")


def write_records(out: bytearray, value: Records | None) -> None:
    """Records field (classic): nullable bytes, or a region spliced in by the transport."""
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        write_nullable_bytes(out, value)
    else:
        out += INT32.pack(len(value))
        _write_region(out, value)


def write_compact_records(out: bytearray, value: Records | None) -> None:
    """Records field (flexible): compact nullable bytes, or a spliced region."""
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        write_compact_nullable_bytes(out, value)
    else:
        write_unsigned_varint(out, len(value) + 1)
        _write_region(out, value)


def read_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_int32_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "records")
    return memoryview(buf)[pos:end].toreadonly(), end


def read_compact_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = _check_span(buf, pos, n, "records")
    return memoryview(buf)[pos:end].toreadonly(), end


# -- uuid ------------------------------------------------------------------------------------


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = _check_span(buf, pos, 16, "uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


# -- arrays ----------------------------------------------------------------------------------


def _check_array_length(buf: Buffer, pos: int, n: int) -> None:
    # Every element takes at least one byte, so a count larger than the bytes left is a lie;
    # rejecting it up front stops a 2**31 count from spinning before it fails.
    if n > len(buf) - pos:
        raise MalformedMessageError(
            f"array of {n} elements at offset {pos} cannot fit in the {len(buf) - pos} bytes left"
        )


def read_int32_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a classic array length (-1 for null)."""
    n, pos = read_int32_length(buf, pos)
    _check_array_length(buf, pos, n)
    return n, pos


def read_compact_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a compact array length (N+1 as an unsigned varint; -1 for null)."""
    if pos < len(buf) and buf[pos] < 0x80:
        n = buf[pos] - 1
        pos += 1
    else:
        n, pos = read_compact_length(buf, pos)
    _check_array_length(buf, pos, n)
    return n, pos


def read_array_length(buf: Buffer, pos: int, compact: bool) -> tuple[int, int]:
    """Read an array length (-1 for null), compact or classic."""
    if compact:
        return read_compact_array_length(buf, pos)
    return read_int32_array_length(buf, pos)


def write_array_length(out: bytearray, n: int, compact: bool) -> None:
    if compact:
        write_unsigned_varint(out, n + 1)
    else:
        out += INT32.pack(n)


def read_primitive_array(
    buf: Buffer, pos: int, n: int, reader: Callable[[Buffer, int], tuple[T, int]]
) -> tuple[list[T], int]:
    items: list[T] = []
    append = items.append
    for _ in range(n):
        item, pos = reader(buf, pos)
        append(item)
    return items, pos


def read_nullable_fixed_array(
    buf: Buffer, pos: int, compact: bool, fmt: str, size: int
) -> tuple[list[Any] | None, int]:
    """Read a possibly-null array of fixed-width values (struct format ``fmt``) in one call.

    Metadata and group responses carry thousands of small int32 arrays; doing the length,
    the bounds check and the unpack in one call is most of their decoding cost.
    """
    end = len(buf)
    if compact:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_compact_length(buf, pos)
    elif pos + 4 <= end:
        n = INT32.unpack_from(buf, pos)[0]
        pos += 4
    else:
        raise MalformedMessageError(f"truncated array length at offset {pos}")
    if n <= 0:
        return (None if n < 0 else []), pos
    stop = pos + n * size
    if stop > end:
        raise MalformedMessageError(f"array of {n} values at offset {pos} runs past the end")
    # the struct module caches compiled formats by their string
    return list(struct.unpack_from(f">{n}{fmt}", buf, pos)), stop


def read_fixed_array(
    buf: Buffer, pos: int, compact: bool, fmt: str, size: int
) -> tuple[list[Any], int]:
    """Read a non-null array of fixed-width values (struct format ``fmt``) in one call."""
    items, end = read_nullable_fixed_array(buf, pos, compact, fmt, size)
    if items is None:
        raise MalformedMessageError(f"null array at offset {pos} where none is allowed")
    return items, end


# -- tagged fields ---------------------------------------------------------------------------


def skip_tagged_field(buf: Buffer, pos: int) -> int:
    """Skip one tagged field's payload (its tag already read); returns the new position."""
    size, pos = read_unsigned_varint(buf, pos)
    return _check_span(buf, pos, size, "tagged field")


def write_tagged_field(out: bytearray, tag: int, payload: Buffer) -> None:
    write_unsigned_varint(out, tag)
    write_unsigned_varint(out, len(payload))
    out += payload


def read_tag_header(buf: Buffer, pos: int) -> tuple[int, int, int]:
    """Read a tagged field's tag and size; returns ``(tag, payload_start, payload_end)``."""
    tag, pos = read_unsigned_varint(buf, pos)
    size, pos = read_unsigned_varint(buf, pos)
    return tag, pos, _check_span(buf, pos, size, "tagged field")


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a whole tagged-field section none of whose tags this version knows."""
    if pos < len(buf) and buf[pos] == 0:  # by far the common case: no tagged fields
        return pos + 1
    count, pos = read_unsigned_varint(buf, pos)
    for _ in range(count):
        _, _, pos = read_tag_header(buf, pos)
    return pos


def read_int8(buf: Buffer, pos: int) -> tuple[int, int]:
    if pos >= len(buf):
        raise MalformedMessageError(f"truncated int8 at offset {pos}")
    return INT8.unpack_from(buf, pos)[0], pos + 1


def not_null(value: T | None, name: str) -> T:
    """Reject None for a field that is nullable only in other versions than the one encoded."""
    if value is None:
        raise EncodeError(f"{name} cannot be null at this version")
    return value
