"""What the broker said about records it stored: where they went and when."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

__all__ = ["UNKNOWN_OFFSET", "RecordMetadata", "RecordMetadataList", "StoredRun"]

UNKNOWN_OFFSET = -1
"""The offset of records sent with acks=0: the broker does not answer, so it is unknown."""


class RecordMetadata(NamedTuple):
    """Where one record was stored.

    ``offset`` is -1 with ``acks=0``. ``timestamp`` is the record's own (CreateTime), or the
    broker's append time for topics with ``message.timestamp.type=LogAppendTime``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


class StoredRun(NamedTuple):
    """One stored record batch of a ``send_batch`` call.

    ``positions`` says which of the call's records it holds, in batch order: a ``range`` when
    they were consecutive in the call (no keys, or one partition), else a list.
    """

    positions: range | list[int]
    partition: int
    base_offset: int  # UNKNOWN_OFFSET with acks=0
    timestamp: int


class RecordMetadataList(Sequence[RecordMetadata]):
    """The metadata of every record of a ``send_batch`` call, in the order they were given.

    A read-only sequence (index it, iterate it, compare it with a list) that makes each
    :class:`RecordMetadata` only when asked: a thousand records sent as one batch cost one
    entry, not a thousand objects. ``list(results)`` gives a plain list.
    """

    __slots__ = ("_len", "_runs", "_scattered", "_starts", "topic")

    def __init__(self, topic: str, runs: Sequence[StoredRun], length: int) -> None:
        self.topic = topic
        self._len = length
        if all(isinstance(run.positions, range) for run in runs):
            self._runs = sorted(runs, key=_first_position)
            self._starts = [_first_position(run) for run in self._runs]
            self._scattered: list[RecordMetadata] | None = None
        else:
            self._runs, self._starts = list(runs), []
            self._scattered = None

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...
    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...
    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("record index out of range")
        if self._starts or not self._runs:
            run = self._runs[bisect_right(self._starts, index) - 1]
            return _metadata(self.topic, run, index - _first_position(run))
        return self._by_position()[index]

    def __iter__(self) -> Iterator[RecordMetadata]:
        if not self._starts and self._runs:
            yield from self._by_position()
            return
        for run in self._runs:
            for position in range(len(run.positions)):
                yield _metadata(self.topic, run, position)

    def _by_position(self) -> list[RecordMetadata]:
        """Every record's metadata in call order, for runs that interleave (keyed records)."""
        if self._scattered is None:
            scattered: list[RecordMetadata | None] = [None] * self._len
            for run in self._runs:
                for position, index in enumerate(run.positions):
                    scattered[index] = _metadata(self.topic, run, position)
            self._scattered = scattered  # type: ignore[assignment]  # every slot is filled
            return scattered  # type: ignore[return-value]
        return self._scattered

    def offsets(self) -> list[int]:
        """Every record's offset, in call order."""
        return [metadata.offset for metadata in self]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{self.topic}-{run.partition}@{run.base_offset}x{len(run.positions)}"
            for run in self._runs
        )
        return f"RecordMetadataList([{parts}])"


def _first_position(run: StoredRun) -> int:
    return run.positions[0] if run.positions else 0


def _metadata(topic: str, run: StoredRun, position: int) -> RecordMetadata:
    offset = run.base_offset + position if run.base_offset >= 0 else UNKNOWN_OFFSET
    return RecordMetadata(topic, run.partition, offset, run.timestamp)
