"""Small value types the client's parts share: partitions, committed offsets, and a group
member's identity for transactional offset commits.

``TopicPartition`` and ``OffsetAndMetadata`` are plain ``NamedTuple``s, so they hash, compare,
sort and unpack like the tuples they are (``topic, partition = tp``), and pickle cheaply (Spark
ships them between processes).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ConsumerGroupMetadata", "OffsetAndMetadata", "TopicPartition"]


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


class ConsumerGroupMetadata(NamedTuple):
    """Who commits offsets for a group: what ``Consumer.group_metadata()`` returns and
    ``Producer.send_offsets_to_transaction`` takes (Java's ``ConsumerGroupMetadata``).

    With the generation and member id the group coordinator refuses offsets from a member
    the group has moved on from (KIP-447); ``ConsumerGroupMetadata("group")`` alone (generation
    -1, no member) skips that check, like Java's ``sendOffsetsToTransaction(offsets, groupId)``.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
