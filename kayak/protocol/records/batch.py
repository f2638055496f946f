"""Parsing record batches, magic v2: a header view and lazily decoded records.

``RecordBatch(buf, pos)`` reads only the 61-byte header; the records are decompressed and
decoded when first asked for, a whole batch in one loop. Every failure is a
:class:`~kayak.errors.CorruptRecordError` naming the batch and what was wrong (or
:class:`~kayak.errors.UnsupportedCompressionTypeError` for a codec id above 4): a truncated or
lying buffer never escapes as ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

from collections.abc import Iterator

import crc32c

from kayak.errors import CorruptRecordError
from kayak.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Codec,
    codec_from_id,
    decompress,
)
from kayak.protocol.records.native import codec as _codec
from kayak.protocol.records.record import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    ControlRecord,
    ControlRecordType,
    Record,
    TimestampType,
)
from kayak.protocol.records.records_section import decode_records, decode_values

Buffer = bytes | bytearray | memoryview


class RecordBatch:
    """A parsed view of one magic-2 record batch inside a buffer.

    Header fields are plain attributes. Records are decompressed and decoded only when first
    asked for (``records()``, iteration, ``record_list()``), a batch at a time; ``values()`` is
    the fast path for callers that only want values.
    """

    __slots__ = (
        "_records",
        "_records_data",
        "_source",
        "_view",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_decompressed_size",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

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

    def __init__(
        self,
        buf: Buffer,
        pos: int = 0,
        *,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        """Parse the header of the batch starting at ``pos``; the whole batch must be there."""
        view = memoryview(buf)
        available = len(view) - pos
        if pos < 0 or available < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at position {pos} is truncated: {max(available, 0)} bytes, "
                f"a batch header needs {BATCH_HEADER_SIZE}"
            )
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = BATCH_HEADER.unpack_from(view, pos)
        if self.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"batch at position {pos} has magic {self.magic}, RecordBatch reads magic 2"
            )
        if self.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at position {pos} claims batchLength {self.batch_length}, less than "
                f"the {MIN_BATCH_LENGTH}-byte header"
            )
        size = LOG_OVERHEAD + self.batch_length
        if size > available:
            raise CorruptRecordError(
                f"batch at position {pos} is truncated: batchLength says {size} bytes, "
                f"{available} present"
            )
        if self.record_count < 0:
            raise CorruptRecordError(
                f"batch at position {pos} has a negative record count {self.record_count}"
            )
        self.position = pos
        self._view = view[pos : pos + size]
        self._source = buf if type(buf) is bytes else None
        self._records_data: bytes | None = None
        self._records: list[Record] | None = None
        self.max_decompressed_size = max_decompressed_size

    # -- header-derived properties -------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (batchLength + 12)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes, as a view of the buffer it was parsed from."""
        return self._view

    @property
    def compression(self) -> Codec:
        return codec_from_id(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """Whether ``base_timestamp`` is a compaction delete horizon (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset a consumer fetches next after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def crc_ok(self) -> bool:
        """Whether the stored CRC-32C matches the bytes it covers."""
        return crc32c.crc32c(self._view[ATTRIBUTES_POS:]) == self.crc

    def validate_crc(self) -> None:
        """Raise :class:`~kayak.errors.CorruptRecordError` if the CRC-32C does not match."""
        actual = crc32c.crc32c(self._view[ATTRIBUTES_POS:])
        if actual != self.crc:
            raise CorruptRecordError(
                f"batch at base offset {self.base_offset} (position {self.position}) fails its "
                f"CRC-32C check: stored {self.crc:#010x}, computed {actual:#010x}"
            )

    # -- records -------------------------------------------------------------------------------

    def records_data(self) -> bytes:
        """The uncompressed records section (decompressed once, then cached)."""
        data = self._records_data
        if data is None:
            payload = self._view[BATCH_HEADER_SIZE:]
            codec = self.compression
            try:
                data = decompress(codec, payload, self.max_decompressed_size)
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"batch at base offset {self.base_offset}: {exc.message}"
                ) from None
            self._records_data = data
        return data

    def _records_section(self) -> tuple[Buffer, int, int]:
        """(data, start, stop): where the uncompressed records are.

        An uncompressed batch parsed from ``bytes`` is read in place: copying a large fetch
        response's records just to slice values out of the copy would double the memory
        traffic (and fault in a fresh copy's pages one by one). The C decoder reads any
        buffer in place (the consumer's views of a network frame); the Python one gets the
        section as ``bytes`` (copied once, by ``records_data``).
        """
        if not self.attributes & CODEC_MASK:
            source = self._source
            if source is not None:
                start = self.position + BATCH_HEADER_SIZE
                return source, start, self.position + LOG_OVERHEAD + self.batch_length
            if _codec is not None and self._records_data is None:
                return self._view, BATCH_HEADER_SIZE, len(self._view)
        data = self.records_data()
        return data, 0, len(data)

    def record_list(self, record_type: type[Record] = Record) -> list[Record]:
        """Every record, with absolute offsets and timestamps (decoded once, then cached).

        A list is the fast form: decoding a batch in one loop costs less than yielding one
        record at a time, and a consumer hands whole batches out anyway. ``record_type``, a
        subclass of :class:`Record` that adds no slots, makes the records instances of it
        (the consumer's per-partition ``ConsumerRecord`` classes); only plain ``Record``
        lists are cached.
        """
        records = self._records
        if records is None or record_type is not Record:
            data, start, stop = self._records_section()
            # Log-append time: the broker's time, kept once in maxTimestamp, is every
            # record's timestamp.
            append_time = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_BIT else None
            records = decode_records(
                data,
                start,
                stop,
                self.record_count,
                self.base_offset,
                self.base_timestamp,
                record_type,
                append_time,
            )
            if record_type is Record:
                self._records = records
        return records

    def records(self) -> Iterator[Record]:
        """Iterate the records; nothing is decoded before the first call."""
        return iter(self.record_list())

    def __iter__(self) -> Iterator[Record]:
        return iter(self.record_list())

    def __len__(self) -> int:
        return self.record_count

    def values(self) -> list[bytes | None]:
        """Every record's value, in order: the fast path when keys and headers do not matter.

        Record lengths, keys and values are bounds-checked; header contents are skipped
        unread (the batch CRC already vouches for them).
        """
        data, start, stop = self._records_section()
        return decode_values(data, start, stop, self.record_count, self.base_offset)

    def control_record(self) -> ControlRecord | None:
        """For a control batch, its transaction marker (abort or commit); else None."""
        if not self.is_control:
            return None
        records = self.record_list()
        if not records:
            raise CorruptRecordError(f"control batch at base offset {self.base_offset} is empty")
        return parse_control_record(records[0], self.base_offset)

    @property
    def control_type(self) -> ControlRecordType | None:
        """ABORT or COMMIT for a control batch, None for a data batch."""
        marker = self.control_record()
        return None if marker is None else marker.type

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, record_count={self.record_count}, "
            f"size={self.size}, compression={self.compression.name}, "
            f"transactional={self.is_transactional}, control={self.is_control})"
        )


def parse_control_record(record: Record, base_offset: int = -1) -> ControlRecord:
    """Decode a control record's key (version, type) and value (version, coordinator epoch)."""
    key, value = record.key, record.value
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            f"control record at offset {record.offset} (batch {base_offset}) has a "
            f"{'null' if key is None else f'{len(key)}-byte'} key, expected 4 bytes"
        )
    version = int.from_bytes(key[0:2], "big", signed=True)
    type_id = int.from_bytes(key[2:4], "big", signed=True)
    try:
        control_type = ControlRecordType(type_id)
    except ValueError:
        raise CorruptRecordError(
            f"control record at offset {record.offset} has unknown type {type_id}"
        ) from None
    coordinator_epoch = -1
    if value is not None and len(value) >= 6:
        coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True)
    return ControlRecord(version, control_type, coordinator_epoch)
