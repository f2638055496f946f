"""One cleaning of one log, file to file: what runs away from the event loop.

Sealed segments never change, so a cleaning reads them without locks while produce and fetch
go on, and writes each group of segments it rewrites to ``<base>.log.cleaned`` (with its
``.index``, ``.timeindex`` and ``.txnindex``, each ``.cleaned`` and fsynced). Swapping them
in is :mod:`.swap`'s job, on the event loop. The steps, as Kafka's ``Cleaner.doClean``:

1. the transaction pre-pass (:mod:`.transactions`);
2. the offset map of the *dirty* section, ``[first dirty offset, end)``, where ``end`` is the
   first offset that may not be cleaned (the active segment, the last stable offset, the
   min.compaction.lag.ms bound, an open transaction) or where the map filled up;
3. every sealed segment from the log start to ``end`` rewritten, group by group (groups as
   large as ``segment.bytes``), keeping a record unless a later record of its key is mapped,
   it is a tombstone past its delete horizon, it has no key, or it belongs to an aborted
   transaction (:func:`clean_batch`).

Everything here takes and returns plain values, so it runs in a worker thread or process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log.cleaner import batches as fmt
from kayak.broker.log.cleaner.batches import ReadBatch
from kayak.broker.log.cleaner.offset_map import OffsetMap
from kayak.broker.log.cleaner.transactions import TxnFacts, TxnTracker, scan_transactions
from kayak.broker.log.index import OffsetIndex, TimeIndex
from kayak.broker.log.segment import segment_name
from kayak.protocol.records.scanner import BatchHeader

CLEANED = ".cleaned"
COMPANIONS = (".index", ".timeindex", ".txnindex")
_INT32_SPAN = 2**31 - 1  # relative offsets in an index are int32


class CleaningAborted(Exception):
    """The broker that asked for this cleaning is gone (a worker process outlived it)."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A segment as the cleaning reads it: up to ``size`` bytes, ending at ``next_offset``."""

    base: int
    size: int
    next_offset: int
    sealed: bool  # the active segment is read (the pre-pass) but never cleaned


@dataclass(frozen=True, slots=True)
class CleaningJob:
    """Everything a cleaning needs, taken from the log on the event loop."""

    directory: str
    segments: tuple[SourceSegment, ...]  # from the log start to the high watermark
    first_dirty: int
    uncleanable: int  # nothing at or past it is cleaned (nor mapped)
    active_producers: frozenset[int]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    map_bytes: int
    io_buffer_bytes: int
    index_interval_bytes: int
    parent_pid: int = 0  # a worker process checks its broker is still alive (0: do not)


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """A group of segments rewritten into ``<base>.log.cleaned`` (and its companions)."""

    base: int
    sources: tuple[int, ...]  # base offsets of the segments it replaces, in order
    size: int
    next_offset: int
    max_timestamp: int
    txnindex: bool  # a ``.txnindex.cleaned`` was written


@dataclass(slots=True)
class CleaningResult:
    """What a cleaning did."""

    end_offset: int  # the next cleaning's first dirty offset
    groups: list[CleanedGroup] = field(default_factory=list)
    min_horizon: int | None = None  # the earliest delete horizon left in the cleaned part
    records_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


def segment_path(directory: str | Path, base: int, suffix: str = ".log") -> str:
    return os.path.join(directory, segment_name(base) + suffix)


def run_cleaning(job: CleaningJob) -> CleaningResult:
    """Clean one log (see the module doc); returns the groups written, not yet swapped."""
    facts = scan_transactions(_all_batches(job, job.segments))
    end = job.uncleanable
    if facts.first_open_offset is not None:
        end = min(end, facts.first_open_offset)
    if job.first_dirty > end:
        return CleaningResult(job.first_dirty)
    offset_map = OffsetMap(job.map_bytes)
    end = _build_map(job, facts, offset_map, end)
    result = CleaningResult(end)
    tracker = TxnTracker(facts)
    for group in _groups(job, end):
        cleaned = _clean_group(job, group, offset_map, tracker, result)
        if cleaned is not None:
            result.groups.append(cleaned)
    if result.groups:
        _fsync_dir(job.directory)
    return result


def _all_batches(job: CleaningJob, segments: tuple[SourceSegment, ...]) -> Iterator[ReadBatch]:
    ppid_checks = 0
    for source in segments:
        path = segment_path(job.directory, source.base)
        for batch in fmt.read_batches(path, source.size, job.io_buffer_bytes):
            ppid_checks += 1
            if job.parent_pid and ppid_checks % 1024 == 0 and os.getppid() != job.parent_pid:
                raise CleaningAborted("the broker process is gone")
            yield batch


def _build_map(job: CleaningJob, facts: TxnFacts, offset_map: OffsetMap, end: int) -> int:
    """Map the dirty section; returns where the cleaning ends (earlier if the map filled)."""
    tracker = TxnTracker(facts)
    dirty = tuple(
        s for s in job.segments if s.sealed and s.next_offset > job.first_dirty and s.base < end
    )
    for batch in _all_batches(job, dirty):
        header = batch.header
        if header.base_offset >= end:
            break
        if header.is_control:
            tracker.marker_removable(batch)
            continue
        if tracker.data_batch_aborted(header) or header.last_offset < job.first_dirty:
            continue
        for record in fmt.decode(batch):
            if record.offset < job.first_dirty or record.offset >= end or record.key is None:
                continue
            if not offset_map.put(bytes(record.key), record.offset):
                return offset_map.latest_offset + 1
    # Everything below the end was mapped: records there are judged by the map (a key not
    # in it has no later record), as Kafka moves the map's latest offset to the end.
    offset_map.latest_offset = end - 1
    return end


def _groups(job: CleaningJob, end: int) -> list[list[SourceSegment]]:
    """Consecutive sealed segments below ``end``, grouped up to ``segment.bytes`` each."""
    groups: list[list[SourceSegment]] = []
    for source in job.segments:
        if not source.sealed or source.base >= end:
            break
        last = groups[-1] if groups else None
        if (
            last is not None
            and sum(s.size for s in last) + source.size <= job.segment_bytes
            and source.next_offset - last[0].base <= _INT32_SPAN
        ):
            last.append(source)
        else:
            groups.append([source])
    return groups


@dataclass(slots=True)
class _Writer:
    """The ``.cleaned`` log of one group and its indexes, as batches are kept."""

    path: str
    base: int
    interval: int
    fd: int = -1
    size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1
    changed: bool = False
    gap_start: int | None = None  # first offset of removed batches not yet covered
    gap_max_timestamp: int = -1
    since_index: int = 0
    index: OffsetIndex = field(init=False)
    time_index: TimeIndex = field(init=False)

    def __post_init__(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.next_offset = self.base
        self.index = OffsetIndex(
            Path(self.path[: -len(".log" + CLEANED)] + ".index" + CLEANED), self.base
        )
        self.time_index = TimeIndex(
            Path(self.path[: -len(".log" + CLEANED)] + ".timeindex" + CLEANED), self.base
        )

    def drop(self, batch: ReadBatch) -> None:
        """A batch that goes entirely: its offsets join the gap to cover."""
        if self.gap_start is None:
            self.gap_start = batch.header.base_offset
        self.gap_max_timestamp = max(self.gap_max_timestamp, batch.header.max_timestamp)
        self.changed = True

    def keep(self, data: bytes | memoryview) -> None:
        """Write a batch (after an empty one covering any gap before it)."""
        header = fmt.header_of(data)
        self.close_gap(header.base_offset)
        self._write(data, header)

    def close_gap(self, until: int) -> None:
        if self.gap_start is not None and until > self.gap_start:
            filler = fmt.empty_batch(self.gap_start, until - 1, self.gap_max_timestamp)
            self._write(filler, fmt.header_of(filler))
        self.gap_start, self.gap_max_timestamp = None, -1

    def _write(self, data: bytes | memoryview, header: BatchHeader) -> None:
        written = 0
        while written < len(data):
            written += os.pwrite(self.fd, memoryview(data)[written:], self.size + written)
        if self.since_index >= self.interval or not len(self.index):
            self.index.append(header.last_offset, self.size)
            self.since_index = 0
        self.since_index += len(data)
        self.time_index.maybe_append(header.max_timestamp, header.last_offset)
        self.size += len(data)
        self.next_offset = header.next_offset
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)

    def finish(self) -> None:
        """fsync the log and write both indexes durably."""
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        self.index.save()
        self.time_index.save()

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for path in (self.path, str(self.index.path), str(self.time_index.path)):
            _remove(path)


def _clean_group(
    job: CleaningJob,
    group: list[SourceSegment],
    offset_map: OffsetMap,
    tracker: TxnTracker,
    result: CleaningResult,
) -> CleanedGroup | None:
    base = group[0].base
    # Whatever an earlier, interrupted cleaning left under these names is not ours (the swap
    # adopts every ``.cleaned`` companion it finds).
    for suffix in COMPANIONS:
        _remove(segment_path(job.directory, base, suffix + CLEANED))
    writer = _Writer(
        segment_path(job.directory, base, ".log" + CLEANED), base, job.index_interval_bytes
    )
    try:
        for batch in _all_batches(job, tuple(group)):
            result.bytes_read += batch.header.size
            kept = clean_batch(job, batch, offset_map, tracker, result)
            if kept is None:
                writer.drop(batch)
            else:
                if kept is not batch.data:
                    writer.changed = True
                writer.keep(kept)
        writer.close_gap(group[-1].next_offset)
        if not writer.changed:
            writer.discard()
            return None
        writer.finish()
        txnindex = _concatenate_txnindexes(job.directory, group)
    except BaseException:
        writer.discard()
        raise
    result.bytes_written += writer.size
    return CleanedGroup(
        base,
        tuple(s.base for s in group),
        writer.size,
        writer.next_offset,
        writer.max_timestamp,
        txnindex,
    )


def clean_batch(
    job: CleaningJob,
    batch: ReadBatch,
    offset_map: OffsetMap,
    tracker: TxnTracker,
    result: CleaningResult,
) -> bytes | memoryview | None:
    """What of ``batch`` a cleaning keeps: its own bytes (unchanged), a rebuilt batch, or
    None (all of it goes). Kafka's ``Cleaner`` rules, batch and record."""
    header = batch.header
    horizon = fmt.delete_horizon(header)
    if header.is_control:
        removable = tracker.marker_removable(batch)
        discard_all = removable and horizon is not None and horizon <= job.now_ms
    else:
        removable = False
        discard_all = tracker.data_batch_aborted(header)
    retain_empty = header.producer_id in job.active_producers and tracker.is_last_batch(header)
    if discard_all:
        result.records_removed += header.record_count
        return (
            fmt.empty_batch(header.base_offset, header.last_offset, header.max_timestamp, header)
            if retain_empty
            else None
        )
    if header.is_control:
        if removable and horizon is None:
            records = fmt.decode(batch)
            return fmt.rebuild(header, records, job.now_ms + job.delete_retention_ms)
        _note_horizon(result, horizon)
        return batch.data
    records = fmt.decode(batch)
    kept = [r for r in records if _keep_record(r.offset, r.key, r.value, horizon, offset_map, job)]
    result.records_removed += len(records) - len(kept)
    if not kept:
        return (
            fmt.empty_batch(header.base_offset, header.last_offset, header.max_timestamp, header)
            if retain_empty
            else None
        )
    tombstones = any(r.value is None for r in kept)
    if tombstones and horizon is None:
        horizon = job.now_ms + job.delete_retention_ms
        _note_horizon(result, horizon)
        return fmt.rebuild(header, kept, horizon)
    if tombstones:
        _note_horizon(result, horizon)
    if len(kept) == len(records):
        return batch.data
    return fmt.rebuild(header, kept, horizon)


def _keep_record(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    horizon: int | None,
    offset_map: OffsetMap,
    job: CleaningJob,
) -> bool:
    if offset > offset_map.latest_offset:
        return True  # past what this cleaning mapped: the next one decides
    if key is None:
        return False  # a compacted log keeps records by key; Kafka drops keyless ones
    if offset < offset_map.get(bytes(key)):
        return False  # a later record of the key is kept
    return value is not None or horizon is None or job.now_ms < horizon


def _note_horizon(result: CleaningResult, horizon: int | None) -> None:
    if horizon is not None and (result.min_horizon is None or horizon < result.min_horizon):
        result.min_horizon = horizon


def _concatenate_txnindexes(directory: str, group: list[SourceSegment]) -> bool:
    """``<base>.txnindex.cleaned``: the sources' aborted-transaction entries, in order."""
    parts: list[bytes] = []
    for source in group:
        try:
            with open(segment_path(directory, source.base, ".txnindex"), "rb") as f:
                parts.append(f.read())
        except FileNotFoundError:
            continue
    if not parts:
        return False
    path = segment_path(directory, group[0].base, ".txnindex" + CLEANED)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"".join(parts))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
