"""The values every record-batch module shares: the decoded ``Record`` and the v2 batch layout.

Record batch v2 header (61 bytes, big-endian)::

    offset  size  field
         0     8  baseOffset              \\ not covered by the CRC: the broker rewrites
         8     4  batchLength              | baseOffset and partitionLeaderEpoch in place
        12     4  partitionLeaderEpoch    /
        16     1  magic (2)
        17     4  crc (CRC-32C of bytes 21..end)
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records (compressed as one blob when the codec is not NONE)

Magic 0/1 messages share the first 12 bytes (offset, size) and, after a 4-byte CRC-32 at 12,
also put their magic at byte 16: a reader looks at byte 16 before deciding how to parse.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import ClassVar, NamedTuple

Header = tuple[str, bytes | None]
"""A record header: a UTF-8 key and a nullable value."""

Headers = tuple[Header, ...]

NO_HEADERS: Headers = ()


class Record:
    """One decoded record, with its absolute offset and timestamp.

    A ``__slots__`` class rather than a tuple: the decoder fills slots directly (cheaper than
    building a tuple and copying it into a NamedTuple) and slot reads are the fastest
    attribute access CPython has. ``headers`` is a tuple; the empty one is shared.
    """

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    _decoded_untracked: ClassVar[bool] = False
    """Whether the C decoder may leave instances untracked by the garbage collector. Only for
    subclasses whose ``__setattr__`` re-tracks the record (``_codec.track``): a decoded
    record holds nothing that can form a cycle until something is assigned to it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = NO_HEADERS,
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def as_tuple(self) -> tuple[int, int, bytes | None, bytes | None, Headers]:
        """(offset, timestamp, key, value, headers)."""
        return (self.offset, self.timestamp, self.key, self.value, self.headers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.as_tuple() == other.as_tuple()

    __hash__ = None  # type: ignore[assignment]  # mutable slots: equal, not hashable

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


class TimestampType(IntEnum):
    """Who set a batch's timestamps: the producer or the broker on append."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The key of a control record: how a transaction ended."""

    ABORT = 0
    COMMIT = 1


class ControlRecord(NamedTuple):
    """A transaction marker: the decoded key and value of a control batch's record."""

    version: int
    type: ControlRecordType
    coordinator_epoch: int


MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

# Everything before the CRC, then everything the CRC covers up to the records.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
# The fields after the CRC, packed separately so the CRC can be computed over them.
CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")
LOG_OVERHEAD = BASE_OFFSET_AND_LENGTH.size  # 12: offset + length, present in every magic
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
RECORD_COUNT_POS = 57

INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
