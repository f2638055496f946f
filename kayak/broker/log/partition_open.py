"""Opening one partition's log: what a start puts together before the partition serves.

In order: its segments (``loader.load_segments``: which there are and whether they can be
trusted), the log start offset from its checkpoint with the files made to agree with it, and
the producer state from its last snapshot plus what the log holds beyond it.
:meth:`PartitionLog.open <kayak.broker.log.partition.PartitionLog.open>` takes what this finds.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.aborted_recovery import rebuild_aborted_index
from kayak.broker.log.files import fsync_directory
from kayak.broker.log.loader import RecordedEnd, load_segments
from kayak.broker.log.local_log import LocalLog
from kayak.broker.log.producer_state import ProducerStateFileError, ProducerStateTable
from kayak.broker.log.segment import Segment
from kayak.errors import CorruptRecordError

log = logging.getLogger(__name__)

PRODUCER_SNAPSHOT = "producer-state.snapshot"

# Inside deferred_directory_syncs: the directories whose new first segment is not durable yet.
_unsynced: ContextVar[list[Path] | None] = ContextVar("kayak_unsynced_directories", default=None)


@contextlib.contextmanager
def deferred_directory_syncs() -> Iterator[None]:
    """Open many partitions, making their new first segments durable at the end, together.

    A start on a data directory of 10,000 partitions that never had a segment created one in
    each, with one directory fsync (one journal commit) after each: most of the start. Here
    the segments are created first and made durable together on the way out: one syncfs(2)
    of the data directory's file system, or where there is none, a directory fsync each (the
    first commits every creation, the others find the journal committed already). Nothing
    may be appended before leaving: the segments are not durable yet.
    """
    unsynced: list[Path] = []
    token = _unsynced.set(unsynced)
    try:
        yield
    finally:
        _unsynced.reset(token)
    if len(unsynced) > _SYNCFS_OVER and _syncfs(unsynced[0].parent):
        # A partition directory mounted elsewhere (or a link to another disk) is not on
        # that file system: those are synced one by one.
        device = os.stat(unsynced[0].parent).st_dev
        unsynced = [d for d in unsynced if os.stat(d).st_dev != device]
    for directory in unsynced:
        fsync_directory(directory)


# Past this many directories one syncfs(2) is cheaper: each fsync of a directory still costs
# a device cache flush even when the journal commit it asks for is done already.
_SYNCFS_OVER = 64


def _syncfs(directory: Path) -> bool:
    """Make everything written to ``directory``'s file system durable (Linux's syncfs(2));
    False where there is no syncfs or it failed (then fsync each directory instead)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if syncfs(fd) == 0:
            return True
    finally:
        os.close(fd)
    log.warning("syncfs(%s) failed (errno %d); syncing each new partition instead",
                directory, ctypes.get_errno())  # fmt: skip
    return False


@dataclass(slots=True)
class OpenedLog:
    """What a start found beside the segments of a partition directory."""

    log_start_offset: int = 0
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    snapshot_current: bool = False  # the producer snapshot on disk covers the log
    problem: str | None = None  # set: the partition must stay offline


def open_local_log(
    local: LocalLog, clean_shutdown: bool, recorded: RecordedEnd | None
) -> OpenedLog:
    """Load (and recover) ``local``'s segments, then what the partition keeps beside them."""
    opened = OpenedLog()
    loaded = load_segments(
        local.directory, local.config.index_interval_bytes, clean_shutdown, local.files, recorded
    )
    local.segments = loaded.segments
    if loaded.problem is not None:
        opened.problem = loaded.problem
        return opened
    if not local.segments:
        local.segments.append(_first_segment(local))
    opened.log_start_offset = max(local.read_checkpoint(), local.segments[0].base_offset)
    _drop_segments_below_log_start(local, opened.log_start_offset)
    try:
        _restore_producer_state(local, opened)
    except CorruptRecordError as exc:
        opened.problem = str(exc)
    return opened


def _first_segment(local: LocalLog) -> Segment:
    """The first segment of an empty log, durable now or (deferred) with many others."""
    unsynced = _unsynced.get()
    if unsynced is None:
        return local.new_segment(0)
    unsynced.append(local.directory)
    return Segment(local.directory, 0, local.config.index_interval_bytes, local.files)


def _drop_segments_below_log_start(local: LocalLog, log_start_offset: int) -> None:
    """Make the files agree with the log start checkpoint.

    Segments wholly below it are what a crash between the checkpoint and the deletion
    left. A log end below it (only after losing unsynced data) restarts the log there:
    those offsets were deleted anyway and must never be handed out again.
    """
    local.delete_below(log_start_offset)
    log_end_offset = local.active.next_offset
    if log_end_offset < log_start_offset:
        log.warning("%s: log end %d is below the log start %d; starting empty at %d",
                    local.directory, log_end_offset, log_start_offset,
                    log_start_offset)  # fmt: skip
        local.start_over_at(log_start_offset)


def _restore_producer_state(local: LocalLog, opened: OpenedLog) -> None:
    """Load the last snapshot and replay what the log holds beyond it."""
    log_end_offset = local.active.next_offset
    path = local.directory / PRODUCER_SNAPSHOT
    try:
        table = ProducerStateTable.load(path)
    except (FileNotFoundError, ProducerStateFileError):
        table = ProducerStateTable()
    if table.snapshot_offset > log_end_offset:
        table = ProducerStateTable()  # a torn tail was cut after the snapshot was taken
    opened.snapshot_current = table.next_offset >= log_end_offset
    for segment in local.segments:
        if segment.next_offset > table.next_offset:
            rebuild_aborted_index(segment, table)
    table.expire(int(time.time() * 1000))
    opened.producers = table
