"""What the consumer hands out: ``ConsumerRecord``, and the partition types it is keyed by.

A consumer returns millions of records a second, so a ``ConsumerRecord`` costs almost nothing
beyond the record the batch decoder already built: it *is* that record. The decoder fills a
:class:`~kayak.protocol.records.Record` (offset, timestamp, key, value, headers); the fetcher
then points the record's class at a subclass made once per partition and timestamp type,
whose class attributes say ``topic``, ``partition`` and ``timestamp_type``. Same slots, so the
class can be swapped in place: one store per record instead of a new object.

``ConsumerRecord(topic, partition, offset, ...)`` builds one directly (tests, tools), and a
record pickles as the plain values it holds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.protocol.records import Header, Headers, Record, TimestampType
from kayak.protocol.records.native import codec as _codec


def _tracked_anyway(record: Record) -> None:
    """Without the C decoder every record is tracked: nothing to do."""


_set_attribute = object.__setattr__
_track = _codec.track if _codec is not None else _tracked_anyway

__all__ = [
    "ConsumerRecord",
    "OffsetAndMetadata",
    "TopicPartition",
    "record_class",
]


class ConsumerRecord(Record):
    """One record of one partition: ``topic``, ``partition``, ``offset``, ``timestamp``,
    ``timestamp_type``, ``key``, ``value`` and ``headers`` (a tuple of ``(str, bytes | None)``).

    ``topic``, ``partition`` and ``timestamp_type`` are shared by every record of a partition,
    so they live on the record's class (see the module docstring); read them as attributes.
    """

    __slots__ = ()

    topic: ClassVar[str] = ""
    partition: ClassVar[int] = -1
    timestamp_type: ClassVar[TimestampType] = TimestampType.CREATE_TIME

    if _codec is not None:
        # The C decoder leaves consumer records untracked by the garbage collector (what
        # they hold cannot form a cycle; walking the many records a consumer holds was a
        # third of its CPU). An assignment could create a cycle, so it tracks them again.
        _decoded_untracked: ClassVar[bool] = True

        def __setattr__(self, name: str, value: Any) -> None:
            _set_attribute(self, name, value)
            _track(self)

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | list[Header] = (),
    ) -> ConsumerRecord:
        record: ConsumerRecord = object.__new__(record_class(topic, partition, timestamp_type))
        return record

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | list[Header] = (),
    ) -> None:
        super().__init__(offset, timestamp, key, value, tuple(headers))

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def as_tuple(self) -> tuple[Any, ...]:
        """(topic, partition, offset, timestamp, timestamp_type, key, value, headers)."""
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self.as_tuple() == other.as_tuple()

    __hash__ = None

    def __reduce__(self) -> tuple[type[ConsumerRecord], tuple[Any, ...]]:
        return ConsumerRecord, self.as_tuple()

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
            f"offset={self.offset}, timestamp={self.timestamp}, "
            f"timestamp_type={self.timestamp_type.name}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


_RECORD_CLASSES: dict[tuple[str, int, int], type[ConsumerRecord]] = {}


def record_class(topic: str, partition: int, timestamp_type: int) -> type[ConsumerRecord]:
    """The ``ConsumerRecord`` subclass for records of one partition and timestamp type.

    Made on first use and kept: at most two per partition a process reads.
    """
    key = (topic, partition, int(timestamp_type))
    found = _RECORD_CLASSES.get(key)
    if found is None:
        attributes = {
            "__slots__": (),
            "__module__": __name__,
            "__qualname__": "ConsumerRecord",
            "topic": topic,
            "partition": partition,
            "timestamp_type": TimestampType(timestamp_type),
        }
        found = type("ConsumerRecord", (ConsumerRecord,), attributes)
        _RECORD_CLASSES[key] = found
    return found
