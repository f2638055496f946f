"""The records of ``__transaction_state``: Kafka's TransactionLogKey v0 and TransactionLogValue v0.

Written in Kafka's own layout (an int16 version, then the fields) so the topic reads as
Kafka's does, e.g. with ``kafka-dump-log --transaction-log-decoder``. A null value deletes
the transactional id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from kayak.errors import CorruptRecordError

TOPIC = "__transaction_state"
_VERSION = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


class TxnState(enum.IntEnum):
    """A transactional id's state, with Kafka's ids (its log and DescribeTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As Kafka's admin APIs spell it: ``Ongoing``, ``PrepareCommit``, ..."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


TopicPartition = tuple[str, int]


@dataclass(slots=True)
class TxnMetadata:
    """What the coordinator keeps for one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1  # when the open transaction began; -1 when none is open

    def copy(self) -> TxnMetadata:
        return TxnMetadata(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            set(self.partitions),
            self.last_update_ms,
            self.start_ms,
        )


def _string(text: str) -> bytes:
    raw = text.encode()
    return _INT16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(_VERSION) + _string(transactional_id)


def encode_value(txn: TxnMetadata) -> bytes:
    parts = [
        _VALUE_HEAD.pack(
            _VERSION, txn.producer_id, txn.producer_epoch, txn.timeout_ms, int(txn.state)
        )
    ]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts.append(_INT32.pack(len(by_topic)))
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(partitions)))
        parts.extend(_INT32.pack(p) for p in partitions)
    parts.append(_TIMES.pack(txn.last_update_ms, txn.start_ms))
    return b"".join(parts)


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw, self.at = raw, 0

    def unpack(self, shape: struct.Struct) -> tuple[int, ...]:
        if self.at + shape.size > len(self.raw):
            raise CorruptRecordError(f"transaction log record ends at byte {len(self.raw)}")
        values = shape.unpack_from(self.raw, self.at)
        self.at += shape.size
        return values

    def string(self) -> str:
        (length,) = self.unpack(_INT16)
        if length < 0 or self.at + length > len(self.raw):
            raise CorruptRecordError(f"transaction log string of length {length} does not fit")
        text = self.raw[self.at : self.at + length].decode()
        self.at += length
        return text


def decode_key(raw: bytes) -> str:
    reader = _Reader(raw)
    (version,) = reader.unpack(_INT16)
    if version != _VERSION:
        raise CorruptRecordError(f"transaction log key version {version} is not known")
    return reader.string()


def decode_value(transactional_id: str, raw: bytes) -> TxnMetadata:
    reader = _Reader(raw)
    version, producer_id, epoch, timeout_ms, status = reader.unpack(_VALUE_HEAD)
    if version != _VERSION:
        raise CorruptRecordError(f"transaction log value version {version} is not known")
    partitions: set[TopicPartition] = set()
    (topics,) = reader.unpack(_INT32)
    for _ in range(max(topics, 0)):
        topic = reader.string()
        (count,) = reader.unpack(_INT32)
        for _ in range(max(count, 0)):
            partitions.add((topic, reader.unpack(_INT32)[0]))
    last_update, start = reader.unpack(_TIMES)
    try:
        state = TxnState(status)
    except ValueError as exc:
        raise CorruptRecordError(f"transaction state {status} is not known") from exc
    return TxnMetadata(
        transactional_id, producer_id, epoch, timeout_ms, state, partitions, last_update, start
    )
