"""Small value types the client's parts share: partitions and committed offsets.

``TopicPartition`` and ``OffsetAndMetadata`` are plain ``NamedTuple``s, so they hash, compare,
sort and unpack like the tuples they are (``topic, partition = tp``), and pickle cheaply (Spark
ships them between processes).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["OffsetAndMetadata", "TopicPartition"]


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset the group will read, with the committer's note.

    ``leader_epoch`` is the leader epoch of the record before ``offset`` when the committer
    knew it (OffsetFetch v5+), else None.
    """

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None
