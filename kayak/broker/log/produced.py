"""A producer's batches on their way into a log: checked, given offsets, in stored form.

Each batch header is read once (:func:`~kayak.protocol.records.scanner.produced_batches`),
every record is validated, and the batches are written as they arrived in the request: only
their first 16 bytes (base offset, length, leader epoch, which the CRC does not cover) are
re-encoded, so the records reach the file without a user-space copy. A topic with
``message.timestamp.type=LogAppendTime`` rewrites timestamps inside the CRC, and only then
are the batches copied.

Two topic configurations change what is accepted or stored (each in its own function below):
``message.timestamp.before.max.ms`` / ``after.max.ms`` (and the older
``difference.max.ms``) refuse CreateTime batches too far from the broker's clock with
INVALID_TIMESTAMP, and a ``compression.type`` other than ``producer`` recompresses every batch
not already in that codec (a copy, like LogAppendTime's).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import crc32c

from kayak.broker.log.config import LogConfig
from kayak.broker.log.config_defs import LONG_MAX, LONG_MIN
from kayak.errors import InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from kayak.protocol.primitives import Buffer
from kayak.protocol.records.compression import Codec, codec_from_id, compress, decompress
from kayak.protocol.records.native import codec as _codec
from kayak.protocol.records.record import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_POS,
    CODEC_MASK,
    CRC_POS,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
)
from kayak.protocol.records.scanner import BatchHeader, produced_batches
from kayak.protocol.records.validation import (
    MAX_DECOMPRESSED_BATCH_SIZE,
    validate_produced_records,
)

_TIMESTAMP_TYPE_BIT = 0x08
# v2 header positions of the timestamps LogAppendTime rewrites (inside the CRC).
_BASE_TIMESTAMP_AT = 27
_MAX_TIMESTAMP_AT = 35
# baseOffset, batchLength, partitionLeaderEpoch: a v2 batch's first 16 bytes, outside its CRC.
_OFFSET_PREFIX = struct.Struct(">qii")


# The C check (kayak/protocol/records/_produced_batches.c) answers for the common case, valid
# uncompressed batches, in one call: about 6 µs less per one-record request than the
# reference below, which it mirrors and which runs whenever it declines.
_checked_in_c = getattr(_codec, "check_produced_batches", None)


def _checked_headers(
    view: memoryview, config: LogConfig, base_offset: int, leader_epoch: int
) -> list[BatchHeader]:
    """The batches' headers as they will be stored, each checked; raises for the first batch
    refused (see :meth:`ProducedBatches.check`)."""
    compacted = config.compacted
    headers = produced_batches(view)
    next_offset = base_offset
    for i, header in enumerate(headers):
        if header.is_control:
            raise InvalidRecordError("control batches are written by the broker, not produced")
        if header.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{config.max_message_bytes}"
            )
        # As stored: the assigned base offset and the leader's epoch (cheaper than _replace).
        header = headers[i] = BatchHeader._make(
            (header.position, next_offset, header.batch_length, leader_epoch, *header[4:])
        )
        next_offset = header.next_offset
        validate_produced_records(
            view, header, compacted=compacted, log_append_time=config.log_append_time
        )
    return headers


@dataclass(slots=True)
class ProducedBatches:
    """Validated batches of one produce request for one partition, with assigned offsets."""

    view: memoryview
    headers: list[BatchHeader]  # as stored: assigned base offsets and leader epoch
    next_offset: int

    @classmethod
    def check(
        cls, records: Buffer, config: LogConfig, base_offset: int, leader_epoch: int
    ) -> ProducedBatches:
        """Check every batch (CRC-32C, lengths, magic 2, record count against offsets, size
        limit) and every record in it (``validate_produced_records``: offset deltas,
        lengths, compressed payloads, timestamps, keys on a compacted topic); raises
        before anything is written."""
        view = memoryview(records)
        headers = None
        if _checked_in_c is not None:
            headers = _checked_in_c(
                view, base_offset, leader_epoch, config.max_message_bytes, config.compacted,
                config.log_append_time, BatchHeader, crc32c.crc32c,
            )  # fmt: skip
        if headers is None:  # declined (compressed, or not valid): Python checks, or raises
            headers = _checked_headers(view, config, base_offset, leader_epoch)
        next_offset = headers[-1].next_offset if headers else base_offset
        if config.checks_timestamps:
            check_timestamps(headers, config, int(time.time() * 1000))
        if config.recompresses:
            view, headers = recompressed(view, headers, config)
        return cls(view, headers, next_offset)

    def stored(self) -> list[Buffer]:
        """The batches as they are stored, without copying them: per batch its first 16 bytes
        re-encoded with the assigned base offset and leader epoch, then a view of the rest of
        the batch as the producer sent it."""
        parts: list[Buffer] = []
        view = self.view
        for header in self.headers:
            prefix = _OFFSET_PREFIX.pack(
                header.base_offset, header.batch_length, header.partition_leader_epoch
            )
            parts.append(prefix)
            parts.append(view[header.position + _OFFSET_PREFIX.size : header.end])
        return parts

    def stamped(self, append_time: int) -> tuple[list[Buffer], list[BatchHeader]]:
        """A copy of the batches with their offsets and the broker's LogAppendTime (timestamps
        and CRCs rewritten), and their headers as stored."""
        buf = bytearray(self.view)
        headers = []
        for header in self.headers:
            _OFFSET_PREFIX.pack_into(
                buf, header.position, header.base_offset, header.batch_length,
                header.partition_leader_epoch,
            )  # fmt: skip
            headers.append(_stamp_log_append_time(buf, header, append_time))
        return [buf], headers


def _stamp_log_append_time(buf: bytearray, header: BatchHeader, append_time: int) -> BatchHeader:
    """Set a batch's timestamp type to LogAppendTime and both timestamps to ``append_time``."""
    pos = header.position
    attributes = header.attributes | _TIMESTAMP_TYPE_BIT
    buf[pos + ATTRIBUTES_POS : pos + ATTRIBUTES_POS + 2] = attributes.to_bytes(2, "big")
    stamp = append_time.to_bytes(8, "big", signed=True)
    buf[pos + _BASE_TIMESTAMP_AT : pos + _BASE_TIMESTAMP_AT + 8] = stamp
    buf[pos + _MAX_TIMESTAMP_AT : pos + _MAX_TIMESTAMP_AT + 8] = stamp
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : header.end])
    buf[pos + CRC_POS : pos + CRC_POS + 4] = crc.to_bytes(4, "big")
    return header._replace(
        attributes=attributes, base_timestamp=append_time, max_timestamp=append_time, crc=crc
    )


def check_timestamps(headers: list[BatchHeader], config: LogConfig, now_ms: int) -> None:
    """INVALID_TIMESTAMP for a CreateTime batch whose first or latest timestamp lies outside
    [now - before.max.ms, now + after.max.ms] (KIP-937; Kafka checks each record, the batch's
    first and maximum timestamps bound them all unless a producer wrote a record earlier than
    the batch's first one)."""
    earliest = max(now_ms - config.timestamp_before_max_ms, LONG_MIN)
    latest = min(now_ms + config.timestamp_after_max_ms, LONG_MAX)
    for header in headers:
        for timestamp in (header.base_timestamp, header.max_timestamp):
            if timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest:
                raise InvalidTimestampError(
                    f"Timestamp {timestamp} of message with offset {header.base_offset} is out "
                    f"of range. The timestamp should be within [{earliest}, {latest}]"
                )


_CODECS = {
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")


def recompressed(
    view: memoryview, headers: list[BatchHeader], config: LogConfig
) -> tuple[memoryview, list[BatchHeader]]:
    """The batches with every one not already in ``compression.type``'s codec rewritten to it
    (records unchanged: only the records section, length, attributes and CRC), and their
    headers as stored. Returns ``view`` itself when no batch needs it."""
    target = _CODECS[config.compression_type]
    if all(h.codec_id == target for h in headers):
        return view, headers
    level = _level(config, target)
    out = bytearray()
    stored: list[BatchHeader] = []
    for header in headers:
        position = len(out)
        if header.codec_id == target:
            out += view[header.position : header.end]
            stored.append(header._replace(position=position))
            continue
        header = _rewrite(out, view, header, target, level)._replace(position=position)
        if header.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes after recompression to {config.compression_type} "
                f"exceeds max.message.bytes {config.max_message_bytes}"
            )
        stored.append(header)
    return memoryview(out), stored


def _level(config: LogConfig, codec: Codec) -> int | None:
    if codec is Codec.GZIP:
        return None if config.compression_gzip_level == -1 else config.compression_gzip_level
    if codec is Codec.LZ4:
        return config.compression_lz4_level
    if codec is Codec.ZSTD:
        return config.compression_zstd_level
    return None


def _rewrite(
    out: bytearray, view: memoryview, header: BatchHeader, target: Codec, level: int | None
) -> BatchHeader:
    """Append ``header``'s batch to ``out`` with its records in ``target``'s codec."""
    start = header.position + BATCH_HEADER_SIZE
    records: bytes = bytes(view[start : header.end])  # some of cramjam's codecs want bytes
    source = codec_from_id(header.codec_id)
    if source is not Codec.NONE:
        records = decompress(source, records, MAX_DECOMPRESSED_BATCH_SIZE)
    payload = compress(target, records, level) if target is not Codec.NONE else records
    at = len(out)
    out += view[header.position : start]
    out += payload
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload)
    attributes = (header.attributes & ~CODEC_MASK) | target.value
    _LENGTH.pack_into(out, at + BATCH_LENGTH_POS, batch_length)
    _ATTRIBUTES.pack_into(out, at + ATTRIBUTES_POS, attributes)
    crc = crc32c.crc32c(memoryview(out)[at + ATTRIBUTES_POS :])
    _CRC.pack_into(out, at + CRC_POS, crc)
    return header._replace(batch_length=batch_length, attributes=attributes, crc=crc)
