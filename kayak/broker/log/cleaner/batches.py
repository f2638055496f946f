"""Reading a sealed segment's batches in large chunks, and writing the batches a cleaning keeps.

A rebuilt batch keeps what Kafka's cleaner keeps of the original: its base offset and last
offset (so the producer's last sequence, ``baseSequence + lastOffsetDelta``, is unchanged),
producer id, epoch, base sequence, leader epoch, attributes and codec; only the records
that survive are in it, each at its original offset (offset deltas from the same base). A
batch holding a tombstone or a transaction marker the cleaner may later remove gets a
*delete horizon* (KIP-534): the attribute bit 0x40, with the base timestamp holding the time
after which those records may go; record timestamps stay what they were (their deltas are
taken from the new base).

A range of offsets whose batches all went is covered by one *empty* batch (a header with
no records, whose ``lastOffsetDelta`` spans the range), as Kafka's cleaner writes for a
producer's last batch: consumers step over it to the next offset, and the log's offsets stay
continuous from batch to batch and segment to segment, which recovery, ``kayak log verify``
and the start's checks rely on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from kayak.protocol.primitives import encode_varint
from kayak.protocol.records.batch import RecordBatch
from kayak.protocol.records.compression import Codec, compress
from kayak.protocol.records.record import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CRC_COVERED_HEADER,
    DELETE_HORIZON_BIT,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    Record,
)
from kayak.protocol.records.scanner import BatchHeader
from kayak.protocol.records.varints import NULL_LENGTH

DEFAULT_CHUNK = 1024 * 1024  # log.cleaner.io.buffer.size's default (Kafka: 512 KiB per buffer)
_PREFIX = BATCH_HEADER  # whole header, for packing the finished one


class ReadBatch(NamedTuple):
    """One batch of a segment: its header (position = place in the file) and its bytes."""

    header: BatchHeader
    data: memoryview


def read_batches(path: str, end: int, chunk: int = DEFAULT_CHUNK) -> Iterator[ReadBatch]:
    """Every batch of the file up to byte ``end``, read ``chunk`` bytes at a time (a larger
    batch by itself). Raises ``ValueError`` where the bytes are not a batch: a sealed
    segment is whole, so that is damage, and the cleaning stops."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf, start, position = b"", 0, 0
        while position < end:
            at = position - start
            if at + BATCH_HEADER_SIZE > len(buf):
                buf, start, at = os.pread(fd, max(chunk, BATCH_HEADER_SIZE), position), position, 0
            if len(buf) - at < BATCH_HEADER_SIZE:
                raise ValueError(f"{path}: no whole batch header at position {position}")
            header = BatchHeader(position, *BATCH_HEADER.unpack_from(buf, at))
            if header.magic != MAGIC_V2 or header.batch_length < MIN_BATCH_LENGTH:
                raise ValueError(f"{path}: no v2 batch at position {position}")
            if at + header.size > len(buf):
                buf, start, at = os.pread(fd, max(chunk, header.size), position), position, 0
                if len(buf) < header.size:
                    raise ValueError(f"{path}: batch at position {position} is cut short")
            yield ReadBatch(header, memoryview(buf)[at : at + header.size])
            position = header.end
    finally:
        os.close(fd)


def decode(batch: ReadBatch) -> list[Record]:
    """The records of a batch (decompressed), each with its absolute offset and timestamp."""
    return RecordBatch(batch.data).record_list()


def header_of(data: bytes | memoryview) -> BatchHeader:
    """The header of the batch at the start of ``data``."""
    return BatchHeader(0, *BATCH_HEADER.unpack_from(data, 0))


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), if it has one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def rebuild(header: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
    """``header``'s batch holding only ``records`` (see the module doc), with delete horizon
    ``horizon`` (None: none)."""
    attributes = header.attributes & ~DELETE_HORIZON_BIT
    append_time = bool(attributes & TIMESTAMP_TYPE_BIT)
    if append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r.timestamp for r in records) if records else header.max_timestamp
    if horizon is not None:
        attributes |= DELETE_HORIZON_BIT
        base_timestamp = horizon
    else:
        base_timestamp = records[0].timestamp if records else header.base_timestamp
    section = b"".join(_encode_record(r, header.base_offset, base_timestamp) for r in records)
    codec = Codec(attributes & CODEC_MASK)
    if codec is not Codec.NONE and records:
        section = compress(codec, section)
    return _assemble(
        header._replace(
            attributes=attributes,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            record_count=len(records),
        ),
        section,
    )


def empty_batch(
    base_offset: int,
    last_offset: int,
    max_timestamp: int,
    like: BatchHeader | None = None,
) -> bytes:
    """A batch with no records covering ``[base_offset, last_offset]``: ``like``'s producer
    fields and flags when it stands for one producer's last batch (Kafka's retained empty
    batch), none when it only fills the offsets of removed batches."""
    if like is not None:
        header = like._replace(
            attributes=like.attributes & ~CODEC_MASK, record_count=0, base_offset=base_offset
        )
    else:
        header = BatchHeader(
            0,
            base_offset,
            0,
            -1,
            MAGIC_V2,
            0,
            0,
            0,
            max_timestamp,
            max_timestamp,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            0,
        )
    return _assemble(header._replace(last_offset_delta=last_offset - base_offset), b"")


def _assemble(header: BatchHeader, section: bytes) -> bytes:
    covered = CRC_COVERED_HEADER.pack(
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )
    crc = crc32c.crc32c(section, crc32c.crc32c(covered))
    prefix = _PREFIX.pack(
        header.base_offset,
        MIN_BATCH_LENGTH + len(section),
        header.partition_leader_epoch,
        MAGIC_V2,
        crc,
        *CRC_COVERED_HEADER.unpack(covered),
    )
    return prefix + section


def _encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    key, value = record.key, record.value
    body = [
        b"\x00",  # record attributes (unused)
        encode_varint(record.timestamp - base_timestamp),
        encode_varint(record.offset - base_offset),
        NULL_LENGTH if key is None else encode_varint(len(key)),
        b"" if key is None else bytes(key),
        NULL_LENGTH if value is None else encode_varint(len(value)),
        b"" if value is None else bytes(value),
        encode_varint(len(record.headers)),
    ]
    for name, header_value in record.headers:
        encoded = name.encode()
        body += (encode_varint(len(encoded)), encoded)
        if header_value is None:
            body.append(NULL_LENGTH)
        else:
            body += (encode_varint(len(header_value)), bytes(header_value))
    joined = b"".join(body)
    return encode_varint(len(joined)) + joined
