"""kayak's asyncio consumer: pipelined fetching, consumer groups, commits.

See :class:`Consumer`. The parts, one file per data path: ``fetcher`` (Fetch requests per
broker), ``completed`` (lazy decoding of fetched batches), ``offsets`` (ListOffsets, starting
positions), ``position_lookup`` (resolving them in the background), ``group``
(membership, heartbeats, commits), ``commits`` (what a commit sends, asynchronous commits),
``assignors``, ``subscription`` (what is assigned, positions), ``records``
(``ConsumerRecord``).
"""

from __future__ import annotations

from kayak.client.consumer.assignors import (
    Assignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
)
from kayak.client.consumer.consumer import Consumer
from kayak.client.consumer.errors import (
    CommitFailedError,
    ConsumerClosedError,
    NoOffsetForPartitionError,
)
from kayak.client.consumer.fetcher import FetchStats
from kayak.client.consumer.listener import RebalanceListener
from kayak.client.consumer.records import ConsumerRecord, OffsetAndMetadata, TopicPartition

__all__ = [
    "Assignor",
    "CommitFailedError",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerRecord",
    "CooperativeStickyAssignor",
    "FetchStats",
    "MemberSubscription",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "RangeAssignor",
    "RebalanceListener",
    "RoundRobinAssignor",
    "TopicPartition",
]
