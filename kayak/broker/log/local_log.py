"""The ordered segments of one partition directory (Kafka's ``LocalLog``).

It finds the segment that holds an offset, walks segments for a read, rolls to a new segment,
deletes whole segments from the front (retention, DeleteRecords, a log start checkpoint ahead
of the files), replaces sealed segments by their cleaned copy, and keeps the log start
checkpoint. It knows files and offsets, never what a fetch may see or who produced what: that
is :class:`~kayak.broker.log.partition.PartitionLog`, which owns one and decides when each of
these happens (and takes the partition offline when one fails).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log.aborted_index import AbortedTxn
from kayak.broker.log.config import LogConfig
from kayak.broker.log.files import fsync_directory, write_atomically
from kayak.broker.log.loader import LogEndRecorder, write_sealed_segments
from kayak.broker.log.open_files import OpenFiles
from kayak.broker.log.segment import RecordsSlice, SealedFacts, Segment
from kayak.errors import CorruptRecordError, KafkaStorageError
from kayak.protocol.records.scanner import BatchHeader

log = logging.getLogger(__name__)

LOG_START_CHECKPOINT = "log-start-offset"


@dataclass(frozen=True, slots=True)
class LogPosition:
    """An offset and where it lies in the files: its segment and the byte position there."""

    offset: int
    segment: Segment
    position: int


class LocalLog:
    """The segments of one topic-partition directory, oldest first; the last is active."""

    def __init__(self, directory: Path, config: LogConfig, files: OpenFiles) -> None:
        self.directory = directory
        self.config = config
        self.files = files  # the bounded cache its segments open their files through
        self.segments: list[Segment] = []
        # Segments whose replacement by a cleaned copy is being committed: no write of the
        # sealed-segments record vouches for them (see begin_replacement).
        self._replacing: list[Segment] = []

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def index_of(self, offset: int) -> int:
        """The index of the segment holding ``offset`` (the first for one below them all)."""
        return max(bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1, 0)

    def new_segment(self, base_offset: int) -> Segment:
        """A new, empty segment file at ``base_offset``, its directory entry durable."""
        segment = Segment(self.directory, base_offset, self.config.index_interval_bytes, self.files)
        fsync_directory(self.directory)
        return segment

    # -- reading ------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, min_one: bool, bound: LogPosition
    ) -> tuple[Segment, RecordsSlice] | None:
        """Batches from the one holding ``offset``, never past ``bound``, and the segment they
        come from; None when nothing below ``bound`` fits ``max_bytes``."""
        for segment in self.segments[self.index_of(offset) :]:
            if segment.base_offset >= bound.offset:
                return None
            end = bound.position if segment is bound.segment else None
            found = segment.read(offset, max_bytes, min_one, end)
            if found is not None:
                return segment, found
            if segment.find(offset) is not None:
                return None  # the next batch exists but does not fit max_bytes
        return None

    def offset_after(self, segment: Segment, found: RecordsSlice, bound: LogPosition) -> int:
        """The offset that follows ``found``, read from ``segment``. Known without I/O when the
        slice reaches ``bound`` or the segment's end (a consumer at the tail); otherwise the
        next batch's header, which the read has just touched, says."""
        stop = found.position + len(found)
        if segment is bound.segment and stop == bound.position:
            return bound.offset
        if stop >= segment.size:
            return segment.next_offset
        try:
            header = segment.header_at(stop)
        except (CorruptRecordError, OSError):
            header = None  # the read stops before damage; the counters need not be exact
        return header.base_offset if header is not None else segment.next_offset

    def find_by_timestamp(self, timestamp: int, below: int) -> BatchHeader | None:
        """The first batch below offset ``below`` with a record at or after ``timestamp``.
        Raises UnreadableSegmentError for a segment that cannot be read."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            header = segment.find_by_timestamp(timestamp)
            if header is not None and header.base_offset < below:
                return header
        return None

    def batch_position(self, offset: int) -> LogPosition | None:
        """Where the batch holding ``offset`` begins; None if no segment here holds it."""
        segment = self.segments[self.index_of(offset)]
        header = segment.find(offset) if offset >= segment.base_offset else None
        if header is None:
            return None
        return LogPosition(header.base_offset, segment, header.position)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions whose markers are at or after ``start``, in the segments up to
        ``end``."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self.index_of(start) :]:
            found.extend(segment.aborted.overlapping(start, end))
        return found

    # -- rolling ------------------------------------------------------------------------

    def roll(self, end_record: LogEndRecorder) -> Segment:
        """Seal the active segment, whose data the caller has synced, and start a new one at
        its end. Raises KAFKA_STORAGE_ERROR, with the segment left active, if that fails."""
        sealing = self.active
        try:
            sealing.save_indexes()
            sealing.sealed = True
            write_sealed_segments(self.directory, self._vouched(self.segments))
            end_record.durable(sealing.next_offset, now=True)
            segment = self.new_segment(sealing.next_offset)  # its dir fsync covers all three
        except OSError as exc:
            # Nothing is lost (the data is synced) and the segment simply stays active; a
            # full disk must not take the partition offline. Active again: its in-memory
            # indexes must not be dropped as a sealed segment's may be.
            sealing.sealed = False
            log.error("%s: cannot roll %s: %s", self.directory.name, sealing.path.name, exc)
            raise KafkaStorageError(f"{self.directory.name}: roll failed: {exc}") from exc
        self.segments.append(segment)
        return segment

    # -- deleting from the front --------------------------------------------------------

    def delete_below(self, offset: int) -> int:
        """Delete the segments wholly below ``offset`` (never the active one); how many went.
        The caller fsyncs the directory when that matters."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.delete_oldest()
            deleted += 1
        return deleted

    def expired(self, now_ms: int) -> int:
        """How many of the oldest segments are past ``retention.ms`` or beyond
        ``retention.bytes`` (the active segment never is)."""
        expired = 0
        while expired + 1 < len(self.segments) and self._expired(expired, now_ms):
            expired += 1
        return expired

    def active_past_retention(self, now_ms: int) -> bool:
        """Whether the active segment holds records, all of them past ``retention.ms``."""
        active, retention_ms = self.segments[-1], self.config.retention_ms
        return (
            active.size > 0
            and retention_ms >= 0
            and 0 <= active.max_timestamp < (now_ms - retention_ms)
        )

    def _expired(self, index: int, now_ms: int) -> bool:
        segment = self.segments[index]
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        too_old = 0 <= segment.max_timestamp < now_ms - retention_ms
        if retention_ms >= 0 and too_old:
            return True
        remaining = sum(s.size for s in self.segments[index + 1 :])
        return retention_bytes >= 0 and remaining >= retention_bytes

    def delete_oldest(self) -> None:
        segment = self.segments.pop(0)
        segment.delete()
        log.info("%s: deleted segment %d", self.directory.name, segment.base_offset)

    def start_over_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        while self.segments:
            self.segments.pop().delete()
        self.segments.append(self.new_segment(offset))

    # -- log start checkpoint -----------------------------------------------------------

    def read_checkpoint(self) -> int:
        """The log start offset last checkpointed (0 if none was)."""
        try:
            return int((self.directory / LOG_START_CHECKPOINT).read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def write_checkpoint(self, log_start_offset: int) -> None:
        write_atomically(self.directory / LOG_START_CHECKPOINT, f"{log_start_offset}\n")

    # -- replacing cleaned segments -----------------------------------------------------

    def find_run(self, old: Sequence[Segment]) -> int | None:
        """The index of ``old[0]`` if ``old`` are consecutive sealed segments of this log."""
        try:
            first = next(i for i, s in enumerate(self.segments) if s is old[0])
        except StopIteration:
            return None
        last = first + len(old)
        if self.segments[first:last] != list(old) or last >= len(self.segments):
            return None
        return first

    def begin_replacement(self, old: Sequence[Segment]) -> Callable[[], None]:
        """Start replacing ``old`` by their cleaned copy: from now until
        :meth:`end_replacement`, no write of the sealed-segments record vouches for them (a
        roll meanwhile writes it too). Returns the durable write of the record without them,
        which must be done before their files change, as blocking work that may run in any
        thread (a cleaned copy can have the same size as the segment it replaces: a start
        must check what is there then, not trust stale facts)."""
        self._replacing.extend(old)
        write = self._vouched(self.segments[:-1])  # sealed: their facts never change
        return lambda: write_sealed_segments(self.directory, write, durable=True)

    def end_replacement(self, old: Sequence[Segment]) -> None:
        """The replacement of ``old`` is over (swapped in, undone or failed)."""
        self._replacing = [s for s in self._replacing if all(s is not o for o in old)]

    def commit_replacement(self, old: Sequence[Segment], commit: Callable[[], None]) -> None:
        """Put the cleaned copy of ``old`` in place on disk (``commit``) after the record of
        sealed segments stopped vouching for them, all in this thread. Raises OSError."""
        write_record = self.begin_replacement(old)
        try:
            write_record()
            commit()
        finally:
            self.end_replacement(old)

    def swap_in(self, first: int, old: Sequence[Segment], facts: SealedFacts) -> Segment:
        """Put the committed copy in the place of ``old`` (at index ``first``) in the list."""
        new = Segment(self.directory, old[0].base_offset, self.config.index_interval_bytes,
                      self.files, sealed=facts)  # fmt: skip
        self.segments[first : first + len(old)] = [new]
        for segment in old:
            segment.close()  # their files are gone or replaced; open slices keep reading
        try:
            write_sealed_segments(self.directory, self._vouched(self.segments[:-1]))
        except OSError as exc:  # only an optimisation for the next start
            log.warning("%s: sealed segments record not written: %s", self.directory.name, exc)
        return new

    def _vouched(self, sealed: Sequence[Segment]) -> list[Segment]:
        """``sealed`` but the segments being replaced: what the record may vouch for."""
        return [s for s in sealed if all(s is not r for r in self._replacing)]
