"""Opening one partition's log: what a start puts together before the partition serves.

In order: its segments (``loader.load_segments``: which there are and whether they can be
trusted), the log start offset from its checkpoint with the files made to agree with it, and
the producer state from its last snapshot plus what the log holds beyond it.
:meth:`PartitionLog.open <kayak.broker.log.partition.PartitionLog.open>` takes what this finds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from kayak.broker.log.aborted_recovery import rebuild_aborted_index
from kayak.broker.log.loader import RecordedEnd, load_segments
from kayak.broker.log.local_log import LocalLog
from kayak.broker.log.producer_state import ProducerStateFileError, ProducerStateTable
from kayak.errors import CorruptRecordError

log = logging.getLogger(__name__)

PRODUCER_SNAPSHOT = "producer-state.snapshot"


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
        local.segments.append(local.new_segment(0))
    opened.log_start_offset = max(local.read_checkpoint(), local.segments[0].base_offset)
    _drop_segments_below_log_start(local, opened.log_start_offset)
    try:
        _restore_producer_state(local, opened)
    except CorruptRecordError as exc:
        opened.problem = str(exc)
    return opened


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
