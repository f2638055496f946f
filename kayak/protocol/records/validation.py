"""Record-by-record validation of a produced batch: what Kafka's LogValidator checks.

:func:`~.scanner.validate_batch` vouches for a batch's header and CRC; a CRC only proves that
the bytes are the ones the producer sent, not that they say what the header says. A producer
(or anyone speaking the protocol) can send a batch whose header claims ten records and whose
(compressed) payload holds one, or whose records carry offset deltas 0 and 7 under a header
saying two. Stored, such a batch moves the log end by the header's count while consumers see
other offsets: they hang or read duplicates. So before a broker appends a produced batch it
decodes every record, compressed payloads included, and checks that:

* the records section holds exactly ``recordCount`` records, each record's length varint
  spans exactly its fields, and no bytes are left over (a compressed payload must decompress,
  within a size limit, so that a decompression bomb is refused and not expanded);
* varints are well formed, key, value and header lengths are in bounds, header keys are UTF-8;
* offset deltas run 0, 1, 2, ... in order;
* with CreateTime, no record's timestamp is after the header's ``maxTimestamp`` (the time
  index and retention trust it) and none falls outside int64;
* on a topic whose ``cleanup.policy`` includes ``compact``, every record has a key.

Structural lies raise :class:`~kayak.errors.CorruptRecordError` (CORRUPT_MESSAGE); a well
formed batch a topic does not accept raises :class:`~kayak.errors.InvalidRecordError`
(INVALID_RECORD). The records are decoded by the consumer's own decoder (``batch.py``, in C
when built), which already checks lengths, varints, fields and the section end; this module
adds the checks that need the decoded records.

Negative timestamp deltas are not refused: Kafka's producers (and kayak's builder) take the
first record's timestamp as the base, so a later record with an earlier timestamp has one.

:func:`read_stored_batches` is the reading side for a broker's own internal topics: every
batch of a chunk of log, decoded, with a damaged batch reported instead of raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import NamedTuple

from kayak.errors import CorruptRecordError, InvalidRecordError, KafkaError
from kayak.protocol.records.batch import RecordBatch
from kayak.protocol.records.compression import Codec, codec_from_id, decompress
from kayak.protocol.records.native import codec as _codec
from kayak.protocol.records.record import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    MAGIC_V2,
    TIMESTAMP_TYPE_BIT,
    Record,
)
from kayak.protocol.records.records_section import decode_records
from kayak.protocol.records.scanner import BatchHeader, BatchScan
from kayak.protocol.records.varints import ZIGZAG_DECODE_1, ZIGZAG_DECODE_2, read_zigzag

__all__ = [
    "MAX_DECOMPRESSED_BATCH_SIZE",
    "StoredRecords",
    "read_stored_batches",
    "validate_produced_records",
]

Buffer = bytes | bytearray | memoryview

MAX_DECOMPRESSED_BATCH_SIZE = 64 * 1024 * 1024
"""The most one produced batch may decompress to. A batch is at most ``max.message.bytes``
(1 MiB by default) compressed; 64 MiB leaves room for any real compression ratio and keeps a
bomb from costing more than that much memory for a moment."""

INT64_MIN = -(1 << 63)

# The C codec's allocation-free walk of a records section, when it has one: it checks what
# the decoder checks plus offset deltas 0, 1, 2, ... and returns (earliest timestamp delta,
# latest timestamp delta, whether a key is null), or None for anything not strictly valid.
# Decoding every record into Python objects costs about 18 times more on the produce path.
_walk_records: Callable[[Buffer, int, int, int], tuple[int, int, bool] | None] | None = getattr(
    _codec, "validate_records", None
)

_offset_of = attrgetter("offset")
_timestamp_of = attrgetter("timestamp")
_key_of = attrgetter("key")


CHUNK_RECORDS = 1 << 16
"""Records decoded at a time. A batch of millions of tiny records (a few MiB of zstd can
hold them) is checked a slice at a time, so validating it never holds more than this many
decoded records in memory."""


def validate_produced_records(
    buf: Buffer,
    header: BatchHeader,
    *,
    compacted: bool = False,
    log_append_time: bool = False,
    max_decompressed_size: int = MAX_DECOMPRESSED_BATCH_SIZE,
) -> None:
    """Check every record of the magic-2 batch ``header`` describes against its header.

    ``buf`` holds the batch at ``header.position`` (a view of just the batch, with position
    0, is fine); the header and CRC must already have passed
    :func:`~.scanner.validate_batch`. ``compacted``: the topic's ``cleanup.policy`` includes
    ``compact``, so every record needs a key. ``log_append_time``: the topic stamps its own
    time on every batch, so the records' timestamps do not matter. Raises
    :class:`~kayak.errors.CorruptRecordError` or :class:`~kayak.errors.InvalidRecordError`
    naming the batch, the record and what is wrong.
    """
    where = f"batch at base offset {header.base_offset}"
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"{where} has magic {header.magic}; records must be magic 2")
    count = header.record_count
    if count <= 0 or count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where}: record count {count} does not match lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    data, start, stop = _records_section(buf, header, where, max_decompressed_size)
    create_time = not log_append_time and not header.attributes & TIMESTAMP_TYPE_BIT
    needs_keys = compacted and not header.attributes & CONTROL_BIT
    if _walk_records is not None and count <= CHUNK_RECORDS:
        summary = _walk_records(data, start, stop, count)
        if summary is not None and _summary_passes(summary, header, create_time, needs_keys):
            return
        # Not strictly valid: decoding in Python finds and names the problem.
    first = header.base_offset
    for records in _decoded_chunks(
        data, start, stop, count, header.base_offset, header.base_timestamp
    ):
        offsets = list(map(_offset_of, records))
        if offsets != list(range(first, first + len(records))):
            _raise_offset_gap(offsets, first, header.base_offset, where)
        if create_time:
            _check_timestamps(records, header.max_timestamp, first - header.base_offset, where)
        if needs_keys:
            keys = list(map(_key_of, records))
            if None in keys:
                raise InvalidRecordError(
                    f"{where}, record {first - header.base_offset + keys.index(None)}: a "
                    "compacted topic (cleanup.policy compact) does not accept a record "
                    "without a key"
                )
        first += len(records)


def _summary_passes(
    summary: tuple[int, int, bool], header: BatchHeader, create_time: bool, needs_keys: bool
) -> bool:
    """Whether the C walk's (earliest delta, latest delta, any null key) pass the rules."""
    earliest, latest, null_key = summary
    if create_time and not (
        header.base_timestamp + latest <= header.max_timestamp
        and header.base_timestamp + earliest >= INT64_MIN
    ):
        return False
    return not (needs_keys and null_key)


def _records_section(
    buf: Buffer, header: BatchHeader, where: str, max_decompressed_size: int
) -> tuple[Buffer, int, int]:
    """(data, start, stop): the uncompressed records, in place when the batch is not
    compressed; a compressed payload must decompress to at most ``max_decompressed_size``."""
    start = header.position + BATCH_HEADER_SIZE
    stop = header.end
    codec = codec_from_id(header.attributes & CODEC_MASK)
    if codec is Codec.NONE:
        return buf, start, stop
    try:
        data = decompress(codec, memoryview(buf)[start:stop], max_decompressed_size)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc.message}") from None
    return data, 0, len(data)


def _raise_offset_gap(offsets: list[int], first: int, base_offset: int, where: str) -> None:
    for index, offset in enumerate(offsets, first - base_offset):
        if offset != base_offset + index:
            raise CorruptRecordError(
                f"{where}, record {index}: offset delta {offset - base_offset}, expected "
                f"{index} (offset deltas must run 0, 1, 2, ... up to lastOffsetDelta)"
            )


def _check_timestamps(records: list[Record], max_timestamp: int, first: int, where: str) -> None:
    timestamps = list(map(_timestamp_of, records))
    latest = max(timestamps)
    if latest > max_timestamp:
        raise CorruptRecordError(
            f"{where}, record {first + timestamps.index(latest)}: timestamp {latest} is after "
            f"the batch's maxTimestamp {max_timestamp}"
        )
    earliest = min(timestamps)
    if earliest < INT64_MIN:
        raise CorruptRecordError(
            f"{where}, record {first + timestamps.index(earliest)}: its timestamp delta takes "
            "the timestamp below the int64 range"
        )


# -- decoding a slice at a time ---------------------------------------------------------------


def _decoded_chunks(
    data: Buffer,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None = None,
) -> Iterator[list[Record]]:
    """The records of ``data[start:stop]``, at most :data:`CHUNK_RECORDS` at a time.

    The decoder (``records_section.decode_records``) checks each slice's structure: every record
    within its slice, fields ending where its length says, the slice ending exactly after its
    records. In a batch of several slices, its errors count records from the slice's first.
    """
    if count <= CHUNK_RECORDS:
        yield decode_records(
            data, start, stop, count, base_offset, base_timestamp, Record, append_time
        )
        return
    starts = _chunk_starts(data, start, stop, count, base_offset)
    starts.append(stop)
    for index, first in enumerate(range(0, count, CHUNK_RECORDS)):
        try:
            records = decode_records(
                data,
                starts[index],
                starts[index + 1],
                min(CHUNK_RECORDS, count - first),
                base_offset,
                base_timestamp,
                Record,
                append_time,
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{exc.message} (records counted from record {first})"
            ) from None
        yield records


def _chunk_starts(data: Buffer, start: int, stop: int, count: int, base_offset: int) -> list[int]:
    """Where records 0, CHUNK_RECORDS, 2 * CHUNK_RECORDS, ... start, by their length varints.

    Only the lengths are read; the decoder checks everything inside each record.
    """
    zz1, zz2 = ZIGZAG_DECODE_1, ZIGZAG_DECODE_2
    starts: list[int] = []
    pos = start
    index = 0
    try:
        for index in range(count):
            if not index % CHUNK_RECORDS:
                starts.append(pos)
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    length = zz2[b - 0x80 + (b2 << 7)]
                    pos += 2
                else:
                    length, pos = read_zigzag(data, pos, 5)
            if length < 0 or pos + length > stop:
                raise CorruptRecordError(
                    f"batch at base offset {base_offset}, record {index}: record length "
                    f"{length} does not fit the records section"
                )
            pos += length
    except IndexError:
        raise CorruptRecordError(
            f"batch at base offset {base_offset}: the records section ends after {index} of "
            f"its {count} records"
        ) from None
    return starts


# -- reading internal topics back -------------------------------------------------------------


class StoredRecords(NamedTuple):
    """Records of one stored batch (a slice of it, for a batch of very many records), or why
    the rest of the batch could not be read."""

    header: BatchHeader
    records: list[Record]  # empty when ``problem`` is set
    problem: str | None
    first_unread: int  # with a problem: the first offset of the batch not read


def read_stored_batches(
    buf: Buffer, *, max_decompressed_size: int = MAX_DECOMPRESSED_BATCH_SIZE
) -> Iterator[StoredRecords]:
    """Decode the complete batches of ``buf`` (a chunk read from a log), damage and all.

    A batch that fails its CRC, is not magic 2, does not decompress (within
    ``max_decompressed_size``) or whose records do not decode ends with an item whose
    ``problem`` says why, and the next batch is read: its header says where it ends. Records
    come at most :data:`CHUNK_RECORDS` at a time, so a damaged batch may have given some
    records before its problem. Only a header that cannot be walked past raises
    :class:`~kayak.errors.CorruptRecordError`.
    """
    for header in BatchScan(buf):
        first_unread = header.base_offset
        try:
            if header.magic != MAGIC_V2:
                raise CorruptRecordError(f"magic {header.magic} batch, expected magic 2")
            batch = RecordBatch(buf, header.position, max_decompressed_size=max_decompressed_size)
            batch.validate_crc()
            where = f"batch at base offset {header.base_offset}"
            data, start, stop = _records_section(buf, header, where, max_decompressed_size)
            append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
            for records in _decoded_chunks(
                data,
                start,
                stop,
                header.record_count,
                header.base_offset,
                header.base_timestamp,
                append_time,
            ):
                yield StoredRecords(header, records, None, 0)
                first_unread += len(records)
        except KafkaError as exc:  # corrupt bytes, or an unknown compression codec
            yield StoredRecords(header, [], exc.message, first_unread)
