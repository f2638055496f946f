"""One partition's log: a directory of segments, appended to at the end, cut at the front.

A single node owns every partition, so the high watermark is the log end offset. The log
start offset moves forward through retention and DeleteRecords (prefix truncation) and is
checkpointed so that a restart never serves offsets a client was told were deleted.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import crc32c

from kayak.broker.log.config import LogConfig
from kayak.broker.log.files import write_atomically
from kayak.broker.log.producer_state import ProducerStateFileError, ProducerStateTable
from kayak.broker.log.segment import FileSlice, Segment
from kayak.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from kayak.protocol.records.record import ATTRIBUTES_POS, CRC_POS
from kayak.protocol.records.scanner import BatchHeader, assign_offsets, scan_batches

log = logging.getLogger(__name__)

LOG_START_CHECKPOINT = "log-start-offset"
PRODUCER_SNAPSHOT = "producer-state.snapshot"
_TIMESTAMP_TYPE_BIT = 0x08
# v2 header positions of the timestamps LogAppendTime rewrites (inside the CRC).
_BASE_TIMESTAMP_AT = 27
_MAX_TIMESTAMP_AT = 35


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

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.leader_epoch = 0  # a single node never changes leader
        self.config = config
        self.segments: list[Segment] = []
        self.log_start_offset = 0
        self.producers = ProducerStateTable()
        self._unflushed: set[Segment] = set()

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, clean_shutdown: bool = False) -> PartitionLog:
        """Open (creating if needed) and recover a partition directory.

        After an unclean shutdown the active segment is rescanned with CRC checks and a torn
        or corrupt tail is cut; older segments only need their indexes, which are rebuilt if
        they disagree with the log.
        """
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config)
        bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        for i, base in enumerate(bases):
            segment = Segment(directory, base, config.index_interval_bytes)
            active = i == len(bases) - 1
            plog._load_segment(segment, active, clean_shutdown)
            plog.segments.append(segment)
        if not plog.segments:
            plog.segments.append(Segment(directory, 0, config.index_interval_bytes))
        plog.log_start_offset = max(plog._read_checkpoint(), plog.segments[0].base_offset)
        plog._restore_producer_state()
        return plog

    def _restore_producer_state(self) -> None:
        """Load the last snapshot and replay what the log holds beyond it."""
        path = self.directory / PRODUCER_SNAPSHOT
        try:
            table = ProducerStateTable.load(path)
        except (FileNotFoundError, ProducerStateFileError):
            table = ProducerStateTable()
        if table.snapshot_offset > self.log_end_offset:
            table = ProducerStateTable()  # a torn tail was cut after the snapshot was taken
        for segment in self.segments:
            if segment.next_offset > table.next_offset:
                table.rebuild(segment.headers())
        table.expire(int(time.time() * 1000))
        self.producers = table

    def _load_segment(self, segment: Segment, active: bool, clean_shutdown: bool) -> None:
        if active and not clean_shutdown:
            cut = segment.recover()
            if cut:
                log.warning("%s: recovered, cut %d bytes of torn tail", segment.path, cut)
            return
        if not segment.load_indexes():
            log.info("%s: rebuilding inconsistent indexes", segment.path)
            segment.recover(validate_crc=active)
            return
        segment.max_timestamp = segment.time_index.max_timestamp
        header = segment.last_indexed()
        while header is not None:
            segment.next_offset = header.next_offset
            segment.max_timestamp = max(segment.max_timestamp, header.max_timestamp)
            header = segment.header_at(header.end)

    # -- offsets ------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending ----------------------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> AppendResult:
        """Validate produced batches, give them offsets, and write them to the active segment.

        Nothing of an invalid request is written: every batch is checked (CRC-32C, lengths,
        magic 2, record count against offsets, size limit) before the first byte goes out.
        Durability is the caller's next step (:class:`~kayak.broker.log.group_commit.GroupCommit`).
        """
        buf = bytearray(records)
        base_offset = self.log_end_offset
        next_offset = assign_offsets(buf, base_offset, partition_leader_epoch=self.leader_epoch)
        headers = list(scan_batches(buf))
        for header in headers:
            if header.is_control:
                raise InvalidRecordError("control batches are written by the broker, not produced")
            if header.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes exceeds max.message.bytes "
                    f"{self.config.max_message_bytes}"
                )
        # Idempotent producers: a retry of a stored batch gets its original offsets and
        # nothing is written; a gap or a stale epoch raises before anything is written.
        duplicate = next((d for d in self.producers.check_all(headers) if d is not None), None)
        if duplicate is not None:
            stamp = duplicate.max_timestamp if self.config.log_append_time else -1
            return AppendResult(
                duplicate.first_offset, duplicate.last_offset, stamp, self.log_start_offset, True
            )
        append_time = -1
        if self.config.log_append_time:
            append_time = now_ms if now_ms is not None else int(time.time() * 1000)
            headers = [_stamp_log_append_time(buf, h, append_time) for h in headers]
        self._maybe_roll(len(buf))
        self.active.append(memoryview(buf), headers)
        self._unflushed.add(self.active)
        for header in headers:
            self.producers.update(header)
        return AppendResult(base_offset, next_offset - 1, append_time, self.log_start_offset)

    def _maybe_roll(self, incoming: int) -> None:
        active = self.active
        if active.size == 0:
            return
        too_big = active.size + incoming > self.config.segment_bytes
        too_old = (time.time() - active.created_at) * 1000 >= self.config.segment_ms
        if too_big or too_old:
            self.roll()

    def roll(self) -> Segment:
        """Start a new active segment at the log end offset (unless the active one is empty)."""
        if self.active.size == 0:
            return self.active
        segment = Segment(self.directory, self.log_end_offset, self.config.index_interval_bytes)
        self.segments.append(segment)
        # A restart then replays producer state from the new segment on, not the whole log.
        self.producers.snapshot(self.directory / PRODUCER_SNAPSHOT)
        return segment

    def take_unflushed(self) -> list[Segment]:
        """Segments written since the last call; the caller makes them durable."""
        segments = list(self._unflushed)
        self._unflushed.clear()
        return segments

    def flush(self) -> None:
        """fdatasync everything appended so far (blocking: call from a worker thread)."""
        for segment in self.take_unflushed():
            segment.flush()

    # -- reading ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool = True) -> FileSlice | None:
        """Batches from the one holding ``offset``; None when ``offset`` is the log end.

        Raises :class:`~kayak.errors.OffsetOutOfRangeError` outside [log start, log end].
        """
        self._check_range(offset)
        if offset == self.log_end_offset:
            return None
        i = max(bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1, 0)
        for segment in self.segments[i:]:
            found = segment.read(offset, max_bytes, min_one)
            if found is not None:
                return found
            if segment.find(offset) is not None:
                return None  # the next batch exists but does not fit max_bytes
        return None

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.directory.name}"
            )

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch with a record at or after ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            header = segment.find_by_timestamp(timestamp)
            if header is not None:
                return max(header.base_offset, self.log_start_offset), header.max_timestamp
        return None

    # -- truncation and retention -------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Prefix truncation (DeleteRecords): make ``offset`` the new log start offset.

        Whole segments below it are deleted; the checkpoint makes the cut survive restarts.
        Returns the new log start offset.
        """
        if offset == -1:  # Kafka's "up to the high watermark"
            offset = self.high_watermark
        self._check_range(offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_checkpoint()
            self._delete_segments_below(offset)
        return self.log_start_offset

    def _delete_segments_below(self, offset: int) -> None:
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self._delete_oldest()

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past ``retention.ms`` or beyond ``retention.bytes``.

        The active segment is never deleted. Returns how many segments went.
        """
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        self.producers.expire(now)
        if not self.config.deletes:
            return 0
        deleted = 0
        while len(self.segments) > 1 and self._expired(self.segments[0], now):
            self._delete_oldest()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self._write_checkpoint()
        return deleted

    def _expired(self, segment: Segment, now_ms: int) -> bool:
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        too_old = 0 <= segment.max_timestamp < now_ms - retention_ms
        if retention_ms >= 0 and too_old:
            return True
        return retention_bytes >= 0 and self.size_in_bytes - segment.size >= retention_bytes

    def _delete_oldest(self) -> None:
        segment = self.segments.pop(0)
        self._unflushed.discard(segment)
        segment.delete()
        log.info("%s: deleted segment %d", self.directory.name, segment.base_offset)

    # -- checkpoint ---------------------------------------------------------------------

    def _read_checkpoint(self) -> int:
        try:
            return int((self.directory / LOG_START_CHECKPOINT).read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def _write_checkpoint(self) -> None:
        write_atomically(self.directory / LOG_START_CHECKPOINT, f"{self.log_start_offset}\n")

    def close(self) -> None:
        """Flush and close every segment; snapshot producer state for a fast restart."""
        self.flush()
        self.producers.snapshot(self.directory / PRODUCER_SNAPSHOT)
        for segment in self.segments:
            segment.close()


def _stamp_log_append_time(buf: bytearray, header: BatchHeader, append_time: int) -> BatchHeader:
    """Set a batch's timestamp type to LogAppendTime and both timestamps to ``append_time``."""
    pos = header.position
    attributes = header.attributes | _TIMESTAMP_TYPE_BIT
    buf[pos + ATTRIBUTES_POS : pos + ATTRIBUTES_POS + 2] = attributes.to_bytes(2, "big")
    stamp = append_time.to_bytes(8, "big", signed=True)
    buf[pos + _BASE_TIMESTAMP_AT : pos + _BASE_TIMESTAMP_AT + 8] = stamp
    buf[pos + _MAX_TIMESTAMP_AT : pos + _MAX_TIMESTAMP_AT + 8] = stamp
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : header.end])
    buf[pos + CRC_POS : pos + CRC_POS + 4] = crc.to_bytes(4, "big")
    return header._replace(
        attributes=attributes, base_timestamp=append_time, max_timestamp=append_time, crc=crc
    )
