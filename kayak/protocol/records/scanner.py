"""Walking a buffer of record batches by their headers alone, without decoding records.

The broker uses it to validate a produce request's batches before it stores them, and to
assign offsets; the consumer uses it to learn the next fetch offset. A buffer may end in the
middle of a batch (brokers cut fetch responses at ``max_bytes``): the scan stops there and
says where (:attr:`BatchScan.complete_bytes`), which is not an error.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import crc32c

from kayak.errors import CorruptRecordError, InvalidRecordError
from kayak.protocol.records.compression import codec_from_id
from kayak.protocol.records.record import (
    ATTRIBUTES_POS,
    BASE_OFFSET_AND_LENGTH,
    BATCH_HEADER,
    CODEC_MASK,
    CONTROL_BIT,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    PARTITION_LEADER_EPOCH_POS,
    TRANSACTIONAL_BIT,
)

Buffer = bytes | bytearray | memoryview

# Magic 0/1 message: offset, size, crc (CRC-32 of magic..end), magic, attributes [, timestamp].
_LEGACY_HEADER = struct.Struct(">qiIbb")
_LEGACY_CRC_POS = 12
_LEGACY_MAGIC_POS = 16
# Smallest message body: crc + magic + attributes (+ timestamp for v1) + key and value lengths.
LEGACY_MIN_MESSAGE_SIZE = {MAGIC_V0: 4 + 1 + 1 + 4 + 4, MAGIC_V1: 4 + 1 + 1 + 8 + 4 + 4}


class BatchHeader(NamedTuple):
    """The header of one batch, where it sits, and what its records will be.

    For magic 0/1 messages only position, base_offset (the message's own offset: for a
    compressed wrapper, that of its last inner message), batch_length, magic, crc and
    attributes are real; the v2-only fields are -1 and ``record_count`` is 1.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, offset and length fields included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def end(self) -> int:
        """Position just past the batch."""
        return self.position + LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec_id(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & CONTROL_BIT)


class BatchScan:
    """Iterator over the :class:`BatchHeader` of each complete batch in a buffer.

    After iteration, ``complete_bytes`` is where the complete batches end (the start of a
    trailing partial batch, or the buffer's length) and ``partial`` says whether bytes remain.
    A batch whose header contradicts itself raises :class:`~kayak.errors.CorruptRecordError`.
    """

    __slots__ = ("_buf", "_pos", "complete_bytes")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self._buf = memoryview(buf)
        self._pos = pos
        self.complete_bytes = pos

    def __iter__(self) -> BatchScan:
        return self

    def __next__(self) -> BatchHeader:
        header = read_batch_header(self._buf, self._pos)
        if header is None:
            raise StopIteration
        self._pos = self.complete_bytes = header.end
        return header

    @property
    def partial(self) -> bool:
        """Whether a trailing partial batch (or stray bytes) follows the complete batches."""
        return self.complete_bytes < len(self._buf)

    @property
    def stopped_at(self) -> int:
        """Alias of ``complete_bytes``."""
        return self.complete_bytes


def scan_batches(buf: Buffer, pos: int = 0) -> BatchScan:
    """Scan the batches in ``buf`` from ``pos`` by their headers alone."""
    return BatchScan(buf, pos)


def read_batch_header(buf: Buffer, pos: int) -> BatchHeader | None:
    """The header of the batch at ``pos``, or None if the buffer ends before the batch does."""
    available = len(buf) - pos
    if available < LOG_OVERHEAD:
        return None
    base_offset, batch_length = BASE_OFFSET_AND_LENGTH.unpack_from(buf, pos)
    if batch_length < 0:
        raise CorruptRecordError(f"batch at position {pos} has negative length {batch_length}")
    # The magic byte is not covered by anything yet: only trust it once it is present.
    if available <= MAGIC_POS:
        return None
    magic = buf[pos + MAGIC_POS]
    if magic == MAGIC_V2:
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at position {pos} claims batchLength {batch_length}, less than the "
                f"{MIN_BATCH_LENGTH}-byte v2 header"
            )
        if available < LOG_OVERHEAD + batch_length:
            return None
        return BatchHeader(pos, *BATCH_HEADER.unpack_from(buf, pos))
    if magic in (MAGIC_V0, MAGIC_V1):
        if batch_length < LEGACY_MIN_MESSAGE_SIZE[magic]:
            raise CorruptRecordError(
                f"magic {magic} message at position {pos} claims size {batch_length}, less than "
                f"the {LEGACY_MIN_MESSAGE_SIZE[magic]}-byte minimum"
            )
        if available < LOG_OVERHEAD + batch_length:
            return None
        _, _, crc, _, attributes = _LEGACY_HEADER.unpack_from(buf, pos)
        return BatchHeader(
            pos, base_offset, batch_length, -1, magic, crc, attributes, 0, -1, -1, -1, -1, -1, 1
        )
    signed_magic = magic - 256 if magic > 127 else magic  # magic is an int8
    raise CorruptRecordError(f"batch at position {pos} has unknown magic {signed_magic}")


def validate_batch(header: BatchHeader, buf: Buffer, *, strict: bool = True) -> None:
    """Check a batch's CRC and the header facts a broker relies on before storing it.

    ``strict`` adds what only a producer's fresh batch must satisfy (the produce path): magic
    2, and ``record_count == last_offset_delta + 1`` with at least one record. Batches read
    back from a log may legally break those (compaction leaves gaps and even empty batches).
    Raises :class:`~kayak.errors.CorruptRecordError` for damaged bytes and
    :class:`~kayak.errors.InvalidRecordError` for well-formed batches a broker must refuse.
    """
    view = memoryview(buf)
    where = f"batch at position {header.position} (base offset {header.base_offset})"
    if header.end > len(view):
        raise CorruptRecordError(f"{where} runs past the end of the buffer")
    if header.magic != MAGIC_V2:
        _validate_legacy(header, view, where, strict)
        return
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"{where}: batchLength {header.batch_length} is too short")
    actual = crc32c.crc32c(view[header.position + ATTRIBUTES_POS : header.end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"{where} fails its CRC-32C check: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    codec_from_id(header.codec_id)
    if header.record_count < 0:
        raise CorruptRecordError(f"{where} has negative record count {header.record_count}")
    if header.last_offset_delta < -1:
        raise CorruptRecordError(f"{where} has lastOffsetDelta {header.last_offset_delta}")
    if not strict:
        return
    if header.record_count == 0:
        raise InvalidRecordError(f"{where} holds no records")
    if header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where}: record count {header.record_count} does not match lastOffsetDelta "
            f"{header.last_offset_delta} (a produced batch's offsets must be contiguous)"
        )
    if header.codec_id == 0 and header.batch_length - MIN_BATCH_LENGTH < 6 * header.record_count:
        raise CorruptRecordError(
            f"{where}: {header.record_count} records cannot fit in "
            f"{header.batch_length - MIN_BATCH_LENGTH} bytes"
        )


def _validate_legacy(header: BatchHeader, view: memoryview, where: str, strict: bool) -> None:
    if strict:
        raise InvalidRecordError(
            f"{where} has magic {header.magic}; produce requests must carry magic 2 batches"
        )
    actual = zlib.crc32(view[header.position + _LEGACY_MAGIC_POS : header.end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"{where} fails its CRC-32 check: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    codec_from_id(header.codec_id)


def complete_batches(buf: Buffer, pos: int = 0) -> tuple[list[BatchHeader], int]:
    """All complete batch headers and the position where the complete batches end."""
    scan = BatchScan(buf, pos)
    headers = list(scan)
    return headers, scan.complete_bytes


def produced_batches(buf: Buffer) -> list[BatchHeader]:
    """The headers of a producer's batches, each read once and checked (:func:`validate_batch`,
    strict: CRC-32C, lengths, magic 2, record count against offsets).

    Raises :class:`~kayak.errors.CorruptRecordError` if the buffer ends mid-batch.
    """
    scan = BatchScan(buf)
    headers = list(scan)
    for header in headers:
        validate_batch(header, buf)
    if scan.partial:
        raise CorruptRecordError(
            f"{len(buf) - scan.complete_bytes} trailing bytes at position {scan.complete_bytes} "
            "are not a complete batch"
        )
    return headers


def assign_offsets(
    buf: bytearray | memoryview,
    first_offset: int,
    *,
    partition_leader_epoch: int | None = None,
    validate: bool = True,
) -> int:
    """Give the v2 batches in ``buf`` consecutive base offsets from ``first_offset``, in place.

    What a leader does on append. Only bytes outside the CRC change. With ``validate`` each
    batch is checked with :func:`validate_batch` (strict) first. Returns the next offset.
    Raises :class:`~kayak.errors.CorruptRecordError` if the buffer ends mid-batch.
    """
    scan = BatchScan(buf)
    next_offset = first_offset
    for header in scan:
        if validate:
            validate_batch(header, buf)
        elif header.magic != MAGIC_V2:
            raise InvalidRecordError(f"cannot assign offsets to a magic {header.magic} message")
        INT64.pack_into(buf, header.position, next_offset)
        if partition_leader_epoch is not None:
            INT32.pack_into(
                buf, header.position + PARTITION_LEADER_EPOCH_POS, partition_leader_epoch
            )
        next_offset += header.last_offset_delta + 1
    if scan.partial:
        raise CorruptRecordError(
            f"{len(buf) - scan.complete_bytes} trailing bytes at position {scan.complete_bytes} "
            "are not a complete batch"
        )
    return next_offset
