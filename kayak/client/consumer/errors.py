"""Errors only the consumer raises (the Kafka error codes are in :mod:`kayak.errors`)."""

from __future__ import annotations

from collections.abc import Iterable

from kayak.client.types import TopicPartition
from kayak.errors import KayakError

__all__ = ["CommitFailedError", "ConsumerClosedError", "NoOffsetForPartitionError"]


class NoOffsetForPartitionError(KayakError):
    """A partition has no committed offset and ``auto.offset.reset`` is ``none``."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = frozenset(partitions)
        names = ", ".join(sorted(str(tp) for tp in self.partitions))
        super().__init__(
            f"no committed offset for {names} and auto.offset.reset is 'none': seek() to an "
            "offset, or set auto.offset.reset to earliest or latest"
        )


class CommitFailedError(KayakError):
    """The group rebalanced (or dropped this member) before the commit could be made.

    The partitions may now belong to another member, which will read from the last committed
    offset: records since then may be processed twice.
    """


class ConsumerClosedError(KayakError):
    """The consumer was used after ``close()``."""
