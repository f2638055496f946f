"""The broker's storage: segmented append-only logs, knowing nothing of the network.

- :class:`PartitionLog`: one partition's segments, offsets, retention and prefix truncation.
- :class:`Segment`: one ``.log`` file with its sparse ``.index`` and ``.timeindex``.
- :class:`OpenFiles`: the bounded cache of open segment files (``OPEN_FILES``).
- :class:`LogWriter`: the one way in: append, wait until durable and visible (fetchers wake).
- :class:`GroupCommit`: makes appends durable with shared fdatasync rounds, run off the event
  loop by :mod:`.disk_sync` (native threads that never take the GIL, or a Python pool).
- :class:`LogConfig`: per-topic settings by Kafka's property names.
"""

from __future__ import annotations

from kayak.broker.log.config import LogConfig
from kayak.broker.log.group_commit import FlushMode, GroupCommit
from kayak.broker.log.open_files import OPEN_FILES, OpenFiles
from kayak.broker.log.partition import AppendResult, PartitionLog
from kayak.broker.log.segment import CopiedSlice, FileSlice, RecordsSlice, Segment
from kayak.broker.log.writer import LogWriter

__all__ = [
    "OPEN_FILES",
    "AppendResult",
    "CopiedSlice",
    "FileSlice",
    "FlushMode",
    "GroupCommit",
    "LogConfig",
    "LogWriter",
    "OpenFiles",
    "PartitionLog",
    "RecordsSlice",
    "Segment",
]
