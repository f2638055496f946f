"""Reading magic 0 and 1 message sets (Kafka before 0.11), for old logs and old brokers.

A message::

    offset int64 | size int32 | crc uint32 (CRC-32 of magic..end) | magic int8 |
    attributes int8 (bits 0-2 codec, bit 3 timestamp type in v1) | [timestamp int64, v1] |
    key bytes (int32 length, -1 null) | value bytes (int32 length, -1 null)

A compressed message is a wrapper whose value is a compressed message set. Inner offsets are
absolute in v0 and relative in v1, where the wrapper carries the offset of the last inner
message: absolute = wrapper offset - last inner relative offset + inner relative offset.
Read only: kayak never writes these.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from kayak.errors import CorruptRecordError
from kayak.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Codec,
    codec_from_id,
    decompress,
    decompress_legacy_lz4,
)
from kayak.protocol.records.record import (
    CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    NO_HEADERS,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    Record,
    TimestampType,
)

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_HEADER_SIZE = _HEADER.size  # 18
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_MAGIC_POS = 16
_MIN_SIZE = {MAGIC_V0: 14, MAGIC_V1: 22}  # crc .. value length, empty key and value


class LegacyBatch:
    """One top-level magic 0/1 message: a plain record, or a compressed wrapper of several.

    Offers the same reading interface as :class:`~.batch.RecordBatch` (``records()``,
    ``next_offset``, ``validate_crc()``, ``compression``, ...).
    """

    __slots__ = (
        "_key",
        "_value",
        "_view",
        "attributes",
        "batch_length",
        "crc",
        "magic",
        "max_decompressed_size",
        "offset",
        "position",
        "timestamp",
    )

    is_transactional = False
    is_control = False
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    partition_leader_epoch = -1

    def __init__(
        self,
        buf: Buffer,
        pos: int = 0,
        *,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        """Parse the message starting at ``pos``; it must be complete."""
        view = memoryview(buf)
        message = _parse_message(view, pos)
        (
            self.offset,
            self.batch_length,
            self.crc,
            self.magic,
            self.attributes,
            self.timestamp,
            self._key,
            self._value,
        ) = message
        self.position = pos
        self._view = view[pos : pos + LOG_OVERHEAD + self.batch_length]
        self.max_decompressed_size = max_decompressed_size

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def buffer(self) -> memoryview:
        return self._view

    @property
    def compression(self) -> Codec:
        return codec_from_id(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.CREATE_TIME
        return TimestampType((self.attributes & TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def base_offset(self) -> int:
        """Offset of the first record (for a wrapper this decompresses it)."""
        if self.attributes & CODEC_MASK == 0:
            return self.offset
        for record in self.records():
            return record.offset
        return self.offset

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def crc_ok(self) -> bool:
        return zlib.crc32(self._view[_MAGIC_POS:]) == self.crc

    def validate_crc(self) -> None:
        """Raise :class:`~kayak.errors.CorruptRecordError` if the CRC-32 does not match."""
        actual = zlib.crc32(self._view[_MAGIC_POS:])
        if actual != self.crc:
            raise CorruptRecordError(
                f"magic {self.magic} message at offset {self.offset} (position "
                f"{self.position}) fails its CRC-32 check: stored {self.crc:#010x}, computed "
                f"{actual:#010x}"
            )

    def records(self) -> Iterator[Record]:
        """The message itself, or a compressed wrapper's inner messages with absolute offsets."""
        codec = self.compression
        if codec is Codec.NONE:
            key = None if self._key is None else bytes(self._key)
            value = None if self._value is None else bytes(self._value)
            return iter((Record(self.offset, self.timestamp, key, value, NO_HEADERS),))
        return iter(self._inner_records(codec))

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def _inner_records(self, codec: Codec) -> list[Record]:
        if self._value is None:
            raise CorruptRecordError(
                f"compressed magic {self.magic} wrapper at offset {self.offset} has a null value"
            )
        try:
            if codec is Codec.LZ4 and self.magic == MAGIC_V0:
                data = decompress_legacy_lz4(self._value, self.max_decompressed_size)
            else:
                data = decompress(codec, self._value, self.max_decompressed_size)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"wrapper message at offset {self.offset}: {exc.message}"
            ) from None
        inner = _parse_message_set(data, self.offset)
        if not inner:
            raise CorruptRecordError(f"compressed wrapper at offset {self.offset} is empty")
        log_append_time = (
            self.timestamp
            if self.magic == MAGIC_V1 and self.attributes & TIMESTAMP_TYPE_BIT
            else None
        )
        # v1 inner offsets count from the wrapper's; v0 inner offsets are already absolute.
        shift = self.offset - inner[-1][0] if self.magic == MAGIC_V1 else 0
        return [
            Record(
                offset + shift,
                timestamp if log_append_time is None else log_append_time,
                None if key is None else bytes(key),
                None if value is None else bytes(value),
                NO_HEADERS,
            )
            for offset, _, _, _, _, timestamp, key, value in inner
        ]

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(offset={self.offset}, magic={self.magic}, "
            f"compression={self.compression.name}, size={self.size})"
        )


_Message = tuple[int, int, int, int, int, int, memoryview | None, memoryview | None]


def _parse_message(view: memoryview, pos: int) -> _Message:
    """(offset, size, crc, magic, attributes, timestamp, key, value) of one complete message."""
    if pos < 0 or len(view) - pos < _HEADER_SIZE:
        raise CorruptRecordError(f"magic 0/1 message at position {pos} is truncated")
    offset, size, crc, magic, attributes = _HEADER.unpack_from(view, pos)
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptRecordError(f"message at position {pos} has magic {magic}, expected 0 or 1")
    end = pos + LOG_OVERHEAD + size
    if size < _MIN_SIZE[magic] or end > len(view):
        raise CorruptRecordError(
            f"magic {magic} message at position {pos} has impossible size {size} "
            f"({len(view) - pos - LOG_OVERHEAD} bytes present)"
        )
    cursor = pos + _HEADER_SIZE
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _TIMESTAMP.unpack_from(view, cursor)
        cursor += 8
    key, cursor = _read_nullable_bytes(view, cursor, end, pos, "key")
    value, cursor = _read_nullable_bytes(view, cursor, end, pos, "value")
    if cursor != end:
        raise CorruptRecordError(
            f"magic {magic} message at position {pos}: {end - cursor} bytes follow its value"
        )
    return offset, size, crc, magic, attributes, timestamp, key, value


def _read_nullable_bytes(
    view: memoryview, pos: int, end: int, message_pos: int, what: str
) -> tuple[memoryview | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"message at position {message_pos}: {what} length truncated")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptRecordError(
            f"message at position {message_pos}: {what} length {length} does not fit the message"
        )
    return view[pos : pos + length], pos + length


def _parse_message_set(data: bytes, wrapper_offset: int) -> list[_Message]:
    """Every message of a decompressed inner set; each must be complete and uncompressed."""
    view = memoryview(data)
    messages: list[_Message] = []
    pos = 0
    while pos < len(view):
        message = _parse_message(view, pos)
        if message[4] & CODEC_MASK:
            raise CorruptRecordError(
                f"wrapper at offset {wrapper_offset} nests a compressed message at inner "
                f"position {pos}"
            )
        messages.append(message)
        pos += LOG_OVERHEAD + message[1]
    return messages
