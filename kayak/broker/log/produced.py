"""A producer's batches on their way into a log: checked, given offsets, in stored form.

Each batch header is read once (:func:`~kayak.protocol.records.scanner.produced_batches`),
every record is validated, and the batches are written as they arrived in the request: only
their first 16 bytes (base offset, length, leader epoch, which the CRC does not cover) are
re-encoded, so the records reach the file without a user-space copy. A topic with
``message.timestamp.type=LogAppendTime`` rewrites timestamps inside the CRC, and only then
are the batches copied.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from kayak.broker.log.config import LogConfig
from kayak.errors import InvalidRecordError, RecordTooLargeError
from kayak.protocol.primitives import Buffer
from kayak.protocol.records.record import ATTRIBUTES_POS, CRC_POS
from kayak.protocol.records.scanner import BatchHeader, produced_batches
from kayak.protocol.records.validation import validate_produced_records

_TIMESTAMP_TYPE_BIT = 0x08
# v2 header positions of the timestamps LogAppendTime rewrites (inside the CRC).
_BASE_TIMESTAMP_AT = 27
_MAX_TIMESTAMP_AT = 35
# baseOffset, batchLength, partitionLeaderEpoch: a v2 batch's first 16 bytes, outside its CRC.
_OFFSET_PREFIX = struct.Struct(">qii")


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
        compacted = "compact" in config.cleanup_policy
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
