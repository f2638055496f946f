"""A position of a partition's active segment to make durable, and the file that holds it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kayak.broker.log.disk_sync import SyncFile, sync_file
from kayak.broker.log.open_files import SegmentFile
from kayak.broker.log.segment import Segment

__all__ = ["FlushPoint"]


@dataclass(frozen=True, slots=True)
class FlushPoint:
    """A position of the active segment to make durable (see :meth:`PartitionLog.flush_point`).

    It holds the segment's file, so a roll or a deletion meanwhile cannot close it; or, when
    the cache of open files allows no more holders (``file`` is None), the sync opens the file
    by name for the moment it takes. A descriptor opened after a write still reports that
    write's failure (Linux 4.16+ reports a writeback error to every file not yet told of it).
    """

    segment: Segment
    file: SegmentFile | None
    position: int
    offset: int

    @property
    def sync_file(self) -> SyncFile:
        """What to fdatasync: the held descriptor, or the segment's path to open for it."""
        return self.file.fd if self.file is not None else os.fsencode(self.segment.path)

    def sync(self) -> None:
        """fdatasync the file (blocking: tools and tests; the group commit runs it off the
        event loop through its :class:`DiskSync`)."""
        sync_file(self.sync_file)
