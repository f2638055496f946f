"""One partition's log: a directory of segments, appended to at the end, cut at the front.

Offsets that bound it:
- the *log end offset*: where the next append goes;
- the *high watermark*: what a fetch may return. With fsync-before-ack
  (``visible_after_flush``) it is the last offset known to be on disk, so a consumer never sees
  a record that a power loss could take back and hand out again under the same offset, as a
  replicated Kafka only exposes committed records; otherwise it follows the log end;
- the *log start offset*: moved forward by retention and DeleteRecords (prefix truncation)
  and checkpointed so that a restart never serves offsets a client was told were deleted.

Storage errors follow Kafka's rule that a log which failed to write or sync is not trusted:
a failed fsync (the page cache may have dropped the data, PostgreSQL's "fsyncgate") or a
write that could not be undone takes the partition *offline* until a restart, which recovers
it from disk. A write that failed cleanly (a full disk) is cut back and refused with
KAFKA_STORAGE_ERROR, and the partition stays online for when space returns.

:class:`PartitionLog` is the log as the rest of the broker sees it (Kafka's ``UnifiedLog``):
appends, offsets, durability, reads, retention and the cleaner's hooks. It builds on
``local_log`` (the ordered segments on disk: roll, delete from the front, replace, the log
start checkpoint), ``partition_open`` (what a start recovers) and ``transactions`` (markers
and the last stable offset).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log.aborted_index import AbortedTxn
from kayak.broker.log.config import LogConfig
from kayak.broker.log.files import fsync_directory
from kayak.broker.log.flush_point import FlushPoint
from kayak.broker.log.loader import LogEndRecorder
from kayak.broker.log.local_log import LOG_START_CHECKPOINT, LocalLog, LogPosition
from kayak.broker.log.open_files import OPEN_FILES, OpenFiles
from kayak.broker.log.partition_open import PRODUCER_SNAPSHOT, open_local_log
from kayak.broker.log.produced import ProducedBatches
from kayak.broker.log.producer_state import ProducerStateTable
from kayak.broker.log.segment import (
    RecordsSlice,
    SealedFacts,
    Segment,
    SegmentDamagedError,
    UnreadableSegmentError,
)
from kayak.broker.log.transactions import StableBound, last_stable_offset, marker_batch
from kayak.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from kayak.protocol.primitives import Buffer
from kayak.protocol.records.scanner import BatchHeader, produced_batches

# The file names are defined beside the code that reads them; importers find them here too.
__all__ = [
    "LOG_START_CHECKPOINT",
    "PRODUCER_SNAPSHOT",
    "AppendResult",
    "PartitionLog",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed: what a Produce response reports."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # an idempotent retry: already stored, nothing written


class PartitionLog:
    """The segments of one topic-partition and the offsets that bound them."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        visible_after_flush: bool = False,
        files: OpenFiles = OPEN_FILES,
    ) -> None:
        self.directory = directory
        self.local = LocalLog(directory, config, files)  # the segments on disk
        self.leader_epoch = 0  # a single node never changes leader
        self.visible_after_flush = visible_after_flush
        self.log_start_offset = 0
        self.producers = ProducerStateTable()
        self.offline: str | None = None  # why the partition is offline (None: online)
        self.closed = False  # close() ran: nothing more is appended or synced here
        self.on_visible: Callable[[], None] | None = None  # the high watermark moved
        self._visible: LogPosition | None = None  # the high watermark and where it lies
        self._stable = StableBound()  # where the last read_committed bound lies
        self._flushed = (0, 0)  # (position, offset) of the active segment known durable
        self._snapshot_current = False  # the producer snapshot on disk covers the log
        self.end_record = LogEndRecorder(directory)  # where the log reached, for a start
        # Plain counters since this process opened the log, read by the metrics at scrape
        # time: appended = stored by appends (not idempotent duplicates); read = handed out by
        # reads (records counted as offsets from the one asked for to the slice's end).
        self.appended_bytes = 0
        self.appended_records = 0
        self.read_bytes = 0
        self.read_records = 0

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clean_shutdown: bool = False,
        visible_after_flush: bool = False,
        files: OpenFiles = OPEN_FILES,
    ) -> PartitionLog:
        """Open (creating if needed) and recover a partition directory (see ``partition_open``).

        Segment files are opened through ``files`` (the process's bounded cache by default)
        and only as they are used: sealed segments are not opened here at all.

        A directory that fails its checks opens *offline*: every operation then raises
        KAFKA_STORAGE_ERROR naming the problem, and the broker's other partitions are not
        affected.
        """
        if not directory.exists():
            directory.mkdir(parents=True)
            fsync_directory(directory.parent)
        plog = cls(directory, config, visible_after_flush, files)
        opened = open_local_log(plog.local, clean_shutdown, plog.end_record.load())
        plog.log_start_offset = opened.log_start_offset
        plog.producers = opened.producers
        plog._snapshot_current = opened.snapshot_current
        if opened.problem is not None:
            plog.take_offline(opened.problem)
        else:
            plog._show_everything_on_disk()
        return plog

    def _show_everything_on_disk(self) -> None:
        active = self.active
        self._flushed = (active.size, active.next_offset)
        self._visible = LogPosition(active.next_offset, active, active.size)

    # -- offsets ------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:  # a topic's configuration was altered
        self.local.config = config

    @property
    def files(self) -> OpenFiles:
        return self.local.files

    @property
    def segments(self) -> list[Segment]:
        return self.local.segments

    @property
    def active(self) -> Segment:
        return self.local.active

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        # No segments: only a partition opened offline because every file is missing.
        return self.active.next_offset if self.segments else self.log_start_offset

    @property
    def high_watermark(self) -> int:
        """The end of what a fetch may return (the durable end with ``visible_after_flush``)."""
        return self._visible.offset if self._visible is not None else self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The end of what a read_committed fetch may return: the high watermark, or the first
        offset of the oldest transaction still open below it."""
        first = self.producers.first_unstable_offset()
        return last_stable_offset(first, self.high_watermark, self.log_start_offset)

    @property
    def durable_offset(self) -> int:
        """Everything below this offset is known to be on disk."""
        return self._flushed[1]

    @property
    def size_in_bytes(self) -> int:
        return self.local.size_in_bytes

    def check_online(self) -> None:
        """Raise KAFKA_STORAGE_ERROR if the partition is offline."""
        if self.offline is not None:
            raise KafkaStorageError(f"{self.directory.name} is offline: {self.offline}")

    def take_offline(self, why: str) -> None:
        """Refuse every operation until a restart, saying ``why`` in one log line."""
        if self.offline is None:
            log.error("%s: partition offline until restart: %s", self.directory.name, why)
            self.offline = why
        if self.on_visible is not None:
            self.on_visible()  # long-polling fetches answer the error now

    def _advance_visible(self, segment: Segment, position: int, offset: int) -> None:
        if self._visible is not None and offset <= self._visible.offset:
            return
        self._visible = LogPosition(offset, segment, position)
        if self.on_visible is not None:
            self.on_visible()

    # -- appending ----------------------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> AppendResult:
        """Validate produced batches, give them offsets, and write them to the active segment.

        Nothing of an invalid request is written: every batch is checked (CRC-32C, lengths,
        magic 2, record count against offsets, size limit) and then every record in it
        (``validate_produced_records``: count, offset deltas, lengths, compressed payloads,
        timestamps, keys on a compacted topic) before the first byte goes out.
        Durability is the caller's next step (:class:`~kayak.broker.log.group_commit.GroupCommit`).
        A write that fails leaves nothing in the file and raises KAFKA_STORAGE_ERROR.
        """
        self.check_online()
        config = self.config
        base_offset = self.log_end_offset
        batches = ProducedBatches.check(records, config, base_offset, self.leader_epoch)
        # Idempotent producers: a retry of a stored batch gets its original offsets and
        # nothing is written; a gap or a stale epoch raises before anything is written.
        duplicate = next(
            (d for d in self.producers.check_all(batches.headers) if d is not None), None
        )
        if duplicate is not None:
            stamp = duplicate.max_timestamp if config.log_append_time else -1
            return AppendResult(
                duplicate.first_offset, duplicate.last_offset, stamp, self.log_start_offset, True
            )
        append_time = -1
        if config.log_append_time:
            append_time = now_ms if now_ms is not None else int(time.time() * 1000)
            parts, headers = batches.stamped(append_time)
        else:
            parts, headers = batches.stored(), batches.headers
        size = len(batches.view)
        self._maybe_roll(size)
        self._write(parts, size, headers)
        for header in headers:
            self.producers.update(header)
        if not self.visible_after_flush:
            self._advance_visible(self.active, self.active.size, self.active.next_offset)
        last = batches.next_offset - 1
        self.appended_bytes += size
        self.appended_records += last - base_offset + 1
        return AppendResult(base_offset, last, append_time, self.log_start_offset)

    def append_marker(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> AppendResult:
        """Write a transaction marker (COMMIT or ABORT control batch) for ``producer_id``.

        INVALID_PRODUCER_EPOCH for an epoch older than the producer's here (a zombie
        coordinator's marker). An ABORT that closes a transaction open here is entered in the
        aborted-transactions index of the segment it lands in.
        """
        self.check_online()
        raw = marker_batch(self.producers, producer_id, epoch, commit, coordinator_epoch,
                           self.log_end_offset, self.leader_epoch)  # fmt: skip
        headers = produced_batches(memoryview(raw))
        self._maybe_roll(len(raw))
        self._write([raw], len(raw), headers)
        completed = self.producers.update(headers[0], coordinator_epoch)
        if completed is not None and not commit:
            self.active.aborted.append(AbortedTxn(*completed, self.last_stable_offset))
        if not self.visible_after_flush:
            self._advance_visible(self.active, self.active.size, self.active.next_offset)
        self.appended_bytes += len(raw)
        self.appended_records += 1
        offset = headers[0].base_offset
        return AppendResult(offset, offset, -1, self.log_start_offset)

    def _write(self, parts: list[Buffer], size: int, headers: list[BatchHeader]) -> None:
        try:
            self.active.append(parts, headers)
        except SegmentDamagedError as exc:
            self.take_offline(str(exc))
            raise KafkaStorageError(str(exc)) from exc
        except OSError as exc:
            log.error("%s: append of %d bytes failed and was cut back: %s",
                      self.directory.name, size, exc.strerror or exc)  # fmt: skip
            raise KafkaStorageError(
                f"{self.directory.name}: write failed: {exc.strerror or exc}"
            ) from exc

    def _maybe_roll(self, incoming: int) -> None:
        active = self.active
        if active.size == 0:
            return
        too_big = active.size + incoming > self.config.segment_bytes
        too_old = (time.time() - active.created_at) * 1000 >= self.config.segment_ms
        if too_big or too_old:
            self.roll()

    def roll(self) -> Segment:
        """Seal the active segment and start a new one at the log end offset.

        Sealing (fsync, indexes saved) comes first: only the last segment ever needs
        recovery. Does nothing while the active segment is empty.
        """
        self.check_online()
        sealing = self.active
        if sealing.size == 0:
            return sealing
        try:
            sealing.flush()
        except OSError as exc:
            self.take_offline(f"fdatasync of {sealing.path.name} failed: {exc}")
            raise KafkaStorageError(f"{self.directory.name}: roll failed: {exc}") from exc
        segment = self.local.roll(self.end_record)  # a failure keeps the partition online
        self._flushed = (0, segment.base_offset)
        self._advance_visible(sealing, sealing.size, sealing.next_offset)
        try:
            # A restart then replays producer state from the new segment on, not the whole log.
            self.producers.snapshot(self.directory / PRODUCER_SNAPSHOT, durable=False)
        except OSError as exc:
            log.warning("%s: producer state snapshot not written: %s", self.directory.name, exc)
        return segment

    # -- durability ---------------------------------------------------------------------

    def flush_point(self, force: bool = False) -> FlushPoint | None:
        """What an fdatasync now would make durable; None if that is already done.

        Only the active segment can hold unsynced data (older ones were sealed).
        """
        self.check_online()
        active = self.active
        if not force and active.size == self._flushed[0]:
            return None
        return FlushPoint(active, active.pin_file(), active.size, active.next_offset)

    def flushed(self, point: FlushPoint) -> None:
        """``point`` is on disk: move the high watermark up to it."""
        if point.segment is self.active and point.position > self._flushed[0]:
            self._flushed = (point.position, point.offset)
        if not self.closed:
            self.end_record.durable(self.durable_offset)
        self._advance_visible(point.segment, point.position, point.offset)

    def flush_failed(self, point: FlushPoint, error: OSError) -> None:
        """An fdatasync failed: the page cache may have dropped the data, so stop trusting it."""
        self.take_offline(f"fdatasync of {point.segment.path.name} failed: {error}")

    def flush(self) -> None:
        """fdatasync everything appended so far (blocking: tools and tests)."""
        point = self.flush_point()
        if point is not None:
            point.sync()
            self.flushed(point)

    # -- reading ------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, min_one: bool = True, committed: bool = False
    ) -> RecordsSlice | None:
        """Batches from the one holding ``offset``; None at the high watermark.

        Raises :class:`~kayak.errors.OffsetOutOfRangeError` outside [log start, high
        watermark], KAFKA_STORAGE_ERROR when offline and CORRUPT_MESSAGE where the file is
        damaged (naming file and position); never returns bytes past the high watermark, nor
        with ``committed`` (read_committed) past the last stable offset.
        """
        self.check_online()
        self._check_range(offset)
        visible = self._visible
        if offset == self.high_watermark or visible is None:
            return None
        if committed:
            first_unstable = self.producers.first_unstable_offset()
            visible = self._stable.below(visible, first_unstable, self.local, self.log_start_offset)
            if offset >= visible.offset:
                return None
        try:
            return self._read(offset, max_bytes, min_one, visible)
        except CorruptRecordError as exc:
            log.error("%s: read at offset %d: %s", self.directory.name, offset, exc.message)
            raise
        except UnreadableSegmentError as exc:
            self.take_offline(exc.message)
            raise

    def _read(
        self, offset: int, max_bytes: int, min_one: bool, visible: LogPosition
    ) -> RecordsSlice | None:
        found = self.local.read(offset, max_bytes, min_one, visible)
        if found is None:
            return None
        segment, records = found
        # Records are counted as offsets from the one asked for to the slice's end.
        self.read_bytes += len(records)
        self.read_records += max(self.local.offset_after(segment, records, visible) - offset, 0)
        return records

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions that may have records in [start, end), for a read_committed
        fetch: their markers are at or after ``start``, in the segments up to ``end``."""
        return self.local.aborted_transactions(start, end)

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.high_watermark}] "
                f"of {self.directory.name}"
            )

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch with a record at or after ``timestamp``."""
        self.check_online()
        try:
            header = self.local.find_by_timestamp(timestamp, below=self.high_watermark)
        except UnreadableSegmentError as exc:
            self.take_offline(exc.message)
            raise
        if header is None:
            return None
        return max(header.base_offset, self.log_start_offset), header.max_timestamp

    # -- truncation and retention -------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Prefix truncation (DeleteRecords): make ``offset`` the new log start offset.

        Whole segments below it are deleted; the checkpoint, written first, makes the cut
        survive restarts. Returns the new log start offset.
        """
        self.check_online()
        if offset == -1:  # Kafka's "up to the high watermark"
            offset = self.high_watermark
        self._check_range(offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_checkpoint()
            if self.local.delete_below(offset):
                fsync_directory(self.directory)
        return self.log_start_offset

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past ``retention.ms`` or beyond ``retention.bytes``.

        As in Kafka, an active segment wholly past ``retention.ms`` and visible is rolled
        first and goes too (else a quiet topic would keep its last segment forever). Returns
        how many segments went.
        """
        if self.offline is not None:
            return 0
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        self.producers.expire(now)
        if not self.config.deletes:
            return 0
        if self.local.active_past_retention(now) and self.high_watermark == self.log_end_offset:
            self.roll()
        expired = self.local.expired(now)
        if expired:
            # Checkpoint first: a crash between the two leaves segments below the log start,
            # which the next start deletes, never a log start pointing at deleted data.
            self.log_start_offset = max(self.log_start_offset, self.segments[expired].base_offset)
            self._write_checkpoint()
            for _ in range(expired):
                self.local.delete_oldest()
            fsync_directory(self.directory)
        return expired

    def _write_checkpoint(self) -> None:
        """Checkpoint the log start offset: before any segment below it is deleted."""
        self.local.write_checkpoint(self.log_start_offset)

    # -- close --------------------------------------------------------------------------

    def close(self) -> bool:
        """Flush and seal the active segment, snapshot producer state, let go of the files.

        Returns False if the partition is offline or closing it failed: the next start must
        then recover it rather than trust it.
        """
        clean = self.offline is None
        # Unchanged since a clean start (no append, no recovery): already sealed on disk.
        unchanged = clean and not self.active.changed and self._snapshot_current
        if clean and not unchanged:
            try:
                self.active.seal()
                self.producers.snapshot(self.directory / PRODUCER_SNAPSHOT)
                self.end_record.stopped(self.log_end_offset)
                fsync_directory(self.directory)
            except OSError as exc:
                log.error("%s: closing failed: %s", self.directory.name, exc)
                clean = False
        elif clean:
            self.end_record.stopped(self.log_end_offset)  # unless the record says so already
        if clean:  # sealed: everything appended is on disk, for whoever still waits on it
            self._flushed = (self.active.size, self.active.next_offset)
        self.closed = True
        for segment in self.segments:
            segment.close()
        return clean

    # -- cleaning -----------------------------------------------------------------------
    # The log cleaner (``kayak.broker.log.cleaner``) reads sealed segments in a worker and
    # calls these on the event loop.

    def roll_if_quiet(self, max_age_ms: int, now: float | None = None) -> bool:
        """Roll a non-empty active segment older than ``max_age_ms`` though nothing is being
        appended (``segment.ms`` rolls only on append), so that the cleaner can reach its
        records. Returns whether it rolled."""
        if self.offline is not None or self.closed or self.active.size == 0:
            return False
        age_ms = ((time.time() if now is None else now) - self.active.created_at) * 1000
        if age_ms < max_age_ms:
            return False
        self.roll()
        return True

    def cleaning_sources(self) -> list[tuple[Segment, int]]:
        """Each segment up to the high watermark, with how many of its bytes lie below it."""
        visible = self._visible
        sources: list[tuple[Segment, int]] = []
        for segment in self.segments:
            if visible is not None and segment is visible.segment:
                sources.append((segment, visible.position))
                break
            if visible is not None and segment.base_offset >= visible.offset:
                break
            sources.append((segment, segment.size))
        return sources

    def replace_segments(
        self,
        old: Sequence[Segment],
        commit: Callable[[], None],
        facts: SealedFacts,
        committed: bool = False,
    ) -> Segment | None:
        """Replace the consecutive sealed segments ``old`` by their cleaned copy: ``commit``
        puts its files in place (``cleaner.swap``), then the list of segments changes, on the
        event loop: a fetch sees the old segments or the new one (one still sending from an
        old file keeps it open). ``committed``: the durable part ran in a thread already
        (``LocalLog.begin_replacement``, ``swap.commit``) and ``commit`` is the rest. None,
        with nothing done, when ``old`` are no longer the log's segments (retention or
        DeleteRecords went first) or it is closed or offline. A commit that fails midway takes
        the partition offline: the next start finishes or undoes it."""
        if self.offline is not None or self.closed or not old:
            return None
        first = self.local.find_run(old)
        if first is None:
            return None
        try:
            if committed:
                commit()
            else:
                self.local.commit_replacement(old, commit)
        except OSError as exc:
            self.take_offline(f"replacing cleaned segments failed: {exc}")
            raise KafkaStorageError(f"{self.directory.name}: cleaning failed: {exc}") from exc
        new = self.local.swap_in(first, old, facts)
        visible = self._visible
        if visible is not None and any(s is visible.segment for s in old):
            self._visible = LogPosition(visible.offset, new, new.size)
        self._stable.forget(old)  # found again in the new segment when next asked for
        return new
