"""The broker's storage: segmented append-only logs, knowing nothing of the network.

- :class:`PartitionLog`: one partition's segments, offsets, retention and prefix truncation.
- :class:`Segment`: one ``.log`` file with its sparse ``.index`` and ``.timeindex``.
- :class:`GroupCommit`: makes appends durable with shared fdatasync rounds.
- :class:`LogConfig`: per-topic settings by Kafka's property names.
"""

from __future__ import annotations

from kayak.broker.log.config import LogConfig
from kayak.broker.log.group_commit import FlushMode, GroupCommit
from kayak.broker.log.partition import AppendResult, PartitionLog
from kayak.broker.log.segment import FileSlice, Segment

__all__ = [
    "AppendResult",
    "FileSlice",
    "FlushMode",
    "GroupCommit",
    "LogConfig",
    "PartitionLog",
    "Segment",
]
