"""The topics of the cluster map as the broker holds them: a ``Topic``, the ``Partition`` this
shard owns of it, a ``NewTopic`` to create, and Kafka's rules for their names and sizes.

:mod:`kayak.broker.catalog` keeps them: it reads, changes and shares the map.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from dataclasses import dataclass, field

from kayak.broker.catalog_edits import MAX_PARTITIONS
from kayak.broker.log import LogConfig, PartitionLog
from kayak.errors import InvalidPartitionsError, InvalidTopicError

__all__ = [
    "MAX_PARTITIONS",
    "NO_LEADER",
    "NewTopic",
    "Partition",
    "Topic",
    "check_partition_count",
    "check_topic_name",
]

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
NO_LEADER = -1  # the partition is being handed from one shard to another


def check_topic_name(name: str) -> None:
    """Kafka's topic naming rules, raised as INVALID_TOPIC_EXCEPTION."""
    if name in (".", "..") or not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"{name!r} is not a legal topic name: 1-249 of [a-zA-Z0-9._-], not '.' or '..'"
        )


def check_partition_count(count: int) -> None:
    """Kafka's partition count limits, raised as INVALID_PARTITIONS."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"{count} partitions: must be between 1 and {MAX_PARTITIONS}")


@dataclass(eq=False)
class Partition:
    """A partition this shard owns: its log and whoever waits for data to arrive in it."""

    topic: str
    index: int
    log: PartitionLog
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def data_arrived(self) -> None:
        """Wake every long-polling fetch waiting on this partition."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait_for_data(self) -> asyncio.Future[None]:
        """A future that completes at the next append."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        # A long poll that times out cancels its waiter; forget it so idle partitions
        # do not collect one per poll.
        waiter.add_done_callback(self._forget)
        return waiter

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)


@dataclass(eq=False)
class Topic:
    """A topic as the cluster map describes it, plus this shard's open partitions."""

    name: str
    topic_id: uuid.UUID
    config: LogConfig
    overrides: dict[str, str]
    owners: list[int]  # shard (node id) per partition, NO_LEADER while handed over
    epochs: list[int]  # leader epoch per partition, bumped at every move
    internal: bool = False
    handoffs: dict[int, int] = field(default_factory=dict)  # partition -> target shard
    open: dict[int, Partition] = field(default_factory=dict)
    # This shard is deleting it: its logs are closed and its directories are being renamed.
    deleting: bool = False

    @property
    def partition_count(self) -> int:
        return len(self.owners)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create (CreateTopics, auto-creation)."""

    name: str
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)
