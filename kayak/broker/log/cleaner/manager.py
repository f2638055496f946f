"""Which compacted logs are due for cleaning, and cleaning them in the background.

As Kafka's ``LogCleanerManager``: a log is due when its *dirty* part (written since the last
cleaning, up to the first offset that may not be cleaned yet) is more than
``min.cleanable.dirty.ratio`` of the log's bytes, or when its oldest dirty record is older
than ``max.compaction.lag.ms``, or when a delete horizon the last cleaning set has passed
(tombstones and markers to remove). The first offset not to clean is the lowest of: the
active segment's base offset, the last stable offset, and the first segment holding a
record younger than ``min.compaction.lag.ms``. The dirtiest due log is cleaned first, one at
a time. Where the last cleaning ended is kept in ``cleaner-offset-checkpoint`` in each
partition directory (lost, it only makes the next cleaning longer).

A quiet active segment is rolled once older than ``segment.ms`` (or ``max.compaction.lag.ms``
when lower), so that records nobody appends after still get compacted.

The cleaning itself (:func:`.rewrite.run_cleaning`) runs in a worker process by default
(:mod:`.worker`), so that neither its CPU (the GIL) nor its I/O holds up produce and fetch.
Each cleaned group is then swapped in (:mod:`.swap`), one at a time between other work: its
durable steps (the sealed-segments record, the commit renames and their fsyncs, and the last
fsync) in a thread, and only the deletions, renames and the change of the list of segments,
which fetches must see at once, on the event loop (:meth:`LogCleaner.swap_off_loop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kayak.broker.log.cleaner.rewrite import (
    CleanedGroup,
    CleaningJob,
    CleaningResult,
    SourceSegment,
    run_cleaning,
)
from kayak.broker.log.cleaner.swap import (
    commit,
    commit_swap,
    discard_cleaned,
    put_in_place,
    settle,
    undo,
)
from kayak.broker.log.cleaner.worker import WorkerProcess
from kayak.broker.log.files import write_atomically
from kayak.broker.log.partition import PartitionLog
from kayak.broker.log.segment import SealedFacts, Segment
from kayak.errors import KafkaError, KafkaStorageError

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
# Topics the cleaner leaves alone: none today. The internal topics are cleaned as any
# compacted topic, their replays staying correct (see kayak.broker.consumer_offsets and
# kayak.broker.txn.state_log); _schemas's SCHEMA_ID record keeps every schema id ever handed
# out (see kayak.registry.store).
NOT_CLEANED: frozenset[str] = frozenset()


class CleanablePartition(Protocol):
    """What the cleaner needs of a catalog partition."""

    topic: str
    index: int
    log: PartitionLog


class BrokerSettings(Protocol):
    """The broker settings the cleaner reads (``BrokerConfig``'s)."""

    @property
    def log_cleaner_backoff_ms(self) -> int: ...
    @property
    def log_cleaner_dedupe_buffer_size(self) -> int: ...
    @property
    def log_cleaner_io_buffer_size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings."""

    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 16 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    executor: str = "process"  # "process", "thread" or "inline" (tests)


@dataclass(frozen=True, slots=True)
class DirtyState:
    """How dirty a log is (see the module doc)."""

    first_dirty: int
    uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # max.compaction.lag.ms passed for its oldest dirty record

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class LogCleaner:
    """Cleans the due compacted logs of a broker, one at a time (see the module doc)."""

    def __init__(self, config: CleanerConfig = CleanerConfig()) -> None:
        self.config = config
        self._process: WorkerProcess | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._horizons: dict[Path, int] = {}  # directory -> earliest delete horizon left
        self.cleanings = 0  # cleanings that swapped something in, since start

    @classmethod
    def for_broker(cls, config: BrokerSettings) -> LogCleaner:
        """The cleaner a broker runs, from its ``log.cleaner.*`` settings."""
        return cls(
            CleanerConfig(
                config.log_cleaner_backoff_ms,
                config.log_cleaner_dedupe_buffer_size,
                config.log_cleaner_io_buffer_size,
            )
        )

    # -- the background loop -----------------------------------------------------------

    async def run(self, partitions: Callable[[], Iterable[CleanablePartition]]) -> None:
        """Check for due logs every ``backoff_ms`` and clean them, until cancelled."""
        try:
            while True:
                await asyncio.sleep(self.config.backoff_ms / 1000)
                await self.clean_due(partitions())
        finally:
            await self.close()

    async def clean_due(self, partitions: Iterable[CleanablePartition]) -> int:
        """One round: roll quiet segments, then clean every due log, dirtiest first."""
        now_ms = int(time.time() * 1000)
        due: list[tuple[float, PartitionLog]] = []
        for partition in partitions:
            plog = partition.log
            if partition.topic in NOT_CLEANED or not plog.config.compacted:
                continue
            try:
                self.roll_if_quiet(plog)
                state = self.dirty_state(plog, now_ms)
            except (OSError, KafkaError):
                log.exception("cleaner: cannot look at %s-%d", partition.topic, partition.index)
                continue
            if state is not None and self.is_due(plog, state, now_ms):
                due.append((state.ratio, plog))
        cleaned = 0
        for _, plog in sorted(due, key=lambda d: -d[0]):
            try:
                if await self.clean(plog) is not None:
                    cleaned += 1
            except (OSError, KafkaError, ValueError):
                log.exception("cleaner: cleaning %s failed", plog.directory.name)
        return cleaned

    async def close(self) -> None:
        """Stop the worker (a cleaning in progress was waited for by :meth:`clean`)."""
        if self._process is not None:
            await self._process.close()
            self._process = None
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None

    # -- deciding --------------------------------------------------------------------------

    @staticmethod
    def roll_if_quiet(plog: PartitionLog) -> bool:
        config = plog.config
        return plog.roll_if_quiet(min(config.segment_ms, config.max_compaction_lag_ms))

    def dirty_state(self, plog: PartitionLog, now_ms: int) -> DirtyState | None:
        """How dirty ``plog`` is; None if it is offline, closed or has nothing sealed."""
        if plog.offline is not None or plog.closed or len(plog.segments) < 2:
            return None
        first_dirty = read_checkpoint(plog.directory)
        if not plog.log_start_offset <= first_dirty <= plog.log_end_offset:
            first_dirty = plog.log_start_offset
        sealed = plog.segments[:-1]
        uncleanable = min(plog.active.base_offset, plog.last_stable_offset)
        lag = plog.config.min_compaction_lag_ms
        if lag > 0:
            young = next(
                (
                    s.base_offset
                    for s in sealed
                    if s.next_offset > first_dirty and s.max_timestamp > now_ms - lag
                ),
                None,
            )
            if young is not None:
                uncleanable = min(uncleanable, young)
        clean = sum(s.size for s in sealed if s.next_offset <= first_dirty)
        dirty_segments = [
            s for s in sealed if s.next_offset > first_dirty and s.base_offset < uncleanable
        ]
        dirty = sum(s.size for s in dirty_segments)
        overdue = bool(dirty_segments) and _first_timestamp(dirty_segments[0]) < (
            now_ms - plog.config.max_compaction_lag_ms
        )
        return DirtyState(first_dirty, uncleanable, clean, dirty, overdue)

    def is_due(self, plog: PartitionLog, state: DirtyState, now_ms: int) -> bool:
        if state.dirty_bytes and (
            state.overdue or state.ratio > plog.config.min_cleanable_dirty_ratio
        ):
            return True
        horizon = self._horizons.get(plog.directory)
        return horizon is not None and horizon <= now_ms

    def plan(self, plog: PartitionLog, now_ms: int | None = None) -> CleaningJob | None:
        """The job cleaning ``plog`` now (due or not); None if there is nothing to clean."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        state = self.dirty_state(plog, now_ms)
        if state is None:
            return None
        sources = tuple(
            SourceSegment(s.base_offset, size, s.next_offset, s is not plog.active)
            for s, size in plog.cleaning_sources()
        )
        config = plog.config
        return CleaningJob(
            directory=str(plog.directory),
            segments=sources,
            first_dirty=state.first_dirty,
            uncleanable=state.uncleanable,
            active_producers=frozenset(plog.producers.state()),
            now_ms=now_ms,
            delete_retention_ms=config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            map_bytes=self.config.dedupe_buffer_size,
            io_buffer_bytes=self.config.io_buffer_size,
            index_interval_bytes=config.index_interval_bytes,
            parent_pid=os.getpid() if self.config.executor == "process" else 0,
        )

    # -- cleaning ---------------------------------------------------------------------------

    async def clean(self, plog: PartitionLog, now_ms: int | None = None) -> CleaningResult | None:
        """Clean ``plog`` now: the rewrite in the worker, then each group swapped in
        (:meth:`swap_off_loop`; the ``inline`` executor does it all in this thread)."""
        job = self.plan(plog, now_ms)
        if job is None:
            return None
        if self.config.executor == "inline":
            return self.finish(plog, job, run_cleaning(job))
        running = asyncio.ensure_future(self._run_job(job))
        try:
            result = await asyncio.shield(running)
        except asyncio.CancelledError:
            # The broker is stopping: let the worker finish (its files must not appear after
            # the log is closed, or after a next start cleaned up), and use nothing of it.
            with contextlib.suppress(Exception):
                for group in (await running).groups:
                    discard_cleaned(plog.directory, group)
            raise
        swapped = 0
        for i, group in enumerate(result.groups):
            try:
                swapped += await self._swap_off_loop_or_discard(plog, group)
                await asyncio.sleep(0)  # one swap at a time between requests
            except BaseException:
                for rest in result.groups[i + 1 :]:
                    discard_cleaned(plog.directory, rest)
                raise
        return self._finished(plog, result, swapped)

    def clean_now(self, plog: PartitionLog, now_ms: int | None = None) -> CleaningResult | None:
        """Clean ``plog`` in this thread (tools and tests)."""
        job = self.plan(plog, now_ms)
        if job is None:
            return None
        return self.finish(plog, job, run_cleaning(job))

    def finish(
        self, plog: PartitionLog, job: CleaningJob, result: CleaningResult
    ) -> CleaningResult:
        """Swap each cleaned group in (all in this thread), then move the checkpoint."""
        swapped = 0
        for i, group in enumerate(result.groups):
            try:
                swapped += self._swap_or_discard(plog, group)
            except BaseException:
                for rest in result.groups[i + 1 :]:
                    discard_cleaned(plog.directory, rest)
                raise
        return self._finished(plog, result, swapped)

    def _finished(self, plog: PartitionLog, result: CleaningResult, swapped: int) -> CleaningResult:
        if result.min_horizon is not None:
            self._horizons[plog.directory] = result.min_horizon
        else:
            self._horizons.pop(plog.directory, None)
        if not plog.closed and plog.offline is None:
            write_checkpoint(plog.directory, result.end_offset)
        if swapped:
            self.cleanings += 1
            log.info(
                "%s: cleaned up to offset %d: %d records removed, %d bytes -> %d",
                plog.directory.name,
                result.end_offset,
                result.records_removed,
                result.bytes_read,
                result.bytes_written,
            )
        return result

    def _swap_or_discard(self, plog: PartitionLog, group: CleanedGroup) -> int:
        """Swap ``group`` in; 1 if it was, 0 if the log changed under it (its files go)."""
        try:
            if self._swap(plog, group):
                return 1
        except BaseException:
            discard_cleaned(plog.directory, group)
            raise
        discard_cleaned(plog.directory, group)
        return 0

    def _swap(self, plog: PartitionLog, group: CleanedGroup) -> bool:
        old = _replaced(plog, group)
        if old is None:
            return False
        new = plog.replace_segments(old, lambda: commit_swap(plog.directory, group), _facts(group))
        return new is not None

    async def _swap_off_loop_or_discard(self, plog: PartitionLog, group: CleanedGroup) -> int:
        """:meth:`swap_off_loop`, as :meth:`_swap_or_discard`."""
        try:
            if await self.swap_off_loop(plog, group):
                return 1
        except BaseException:
            discard_cleaned(plog.directory, group)
            raise
        discard_cleaned(plog.directory, group)
        return 0

    async def swap_off_loop(self, plog: PartitionLog, group: CleanedGroup) -> bool:
        """Swap ``group`` in with nothing that waits on the disk done on the event loop;
        whether it was (False: the log changed under it first).

        In a thread: the sealed-segments record durably stops vouching for the replaced
        segments (:meth:`LocalLog.begin_replacement`, which keeps every other write of it
        from vouching for them meanwhile, a roll's), then :func:`.swap.commit` commits the
        replacement; neither touches the replaced segments' files, which fetches go on
        reading. Back on the loop, the log is looked at again, since retention, DeleteRecords
        or a close may have run meanwhile: if it still has those segments, the files are put
        in place and the list changes (:meth:`PartitionLog.replace_segments`), no fetch in
        between; if not, the commit is taken back (:func:`.swap.undo`: the replaced
        segments' files are untouched, so the log as it now is stays what is on disk). A
        crash at any point in between leaves ``B.log.swap`` (a start finishes the
        replacement, consistent with any log start retention moved meanwhile) or not (a
        start undoes it). Then, in the thread again, :func:`.swap.settle` makes it durable.

        Cancelled meanwhile (the broker stops), it still waits for the thread and finishes
        or undoes as above before it raises: the files must not change after the log is
        closed. A storage error takes the partition offline (the next start finishes or
        undoes the replacement) and raises KAFKA_STORAGE_ERROR.
        """
        old = _replaced(plog, group)
        if old is None or plog.offline is not None or plog.closed:
            return False
        if plog.local.find_run(old) is None:
            return False
        directory = plog.directory
        steps = _ThreadSteps(plog, self._executor())
        write_record = plog.local.begin_replacement(old)
        try:
            try:
                await steps.run(_commit_durably, write_record, directory, group)
                new = plog.replace_segments(
                    old, lambda: put_in_place(directory, group), _facts(group), committed=True
                )
            finally:
                plog.local.end_replacement(old)
            if new is None:
                log.info("%s: the log changed while segments %d to %d were being replaced by "
                         "their cleaned copy: taken back", directory.name, group.base,
                         group.next_offset - 1)  # fmt: skip
            await steps.run(settle if new is not None else undo, directory, group)
        except KafkaStorageError:
            steps.raise_cancelled()  # the broker is stopping: that comes first
            raise
        steps.raise_cancelled()
        return new is not None

    def _executor(self) -> ThreadPoolExecutor:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="kayak-cleaner")
        return self._thread

    async def _run_job(self, job: CleaningJob) -> CleaningResult:
        if self.config.executor == "process":
            if self._process is None:
                self._process = WorkerProcess()
            return await self._process.run(job)
        return await asyncio.get_running_loop().run_in_executor(self._executor(), run_cleaning, job)


class _ThreadSteps:
    """Runs a swap's blocking steps in the cleaner's thread, each waited for to its end even
    through a cancellation, which is kept to be raised once the swap is consistent again."""

    def __init__(self, plog: PartitionLog, executor: ThreadPoolExecutor) -> None:
        self.plog = plog
        self.executor = executor
        self.cancelled: asyncio.CancelledError | None = None

    async def run(self, step: Callable[..., None], *args: object) -> None:
        """``step(*args)`` in the thread; an OSError takes the partition offline and raises
        KAFKA_STORAGE_ERROR."""
        running = asyncio.get_running_loop().run_in_executor(self.executor, step, *args)
        while True:
            try:
                await asyncio.shield(running)
                return
            except asyncio.CancelledError as exc:
                if running.cancelled():
                    raise  # the executor was shut down under it
                self.cancelled = self.cancelled or exc
            except OSError as exc:
                self.plog.take_offline(f"replacing cleaned segments failed: {exc}")
                name = self.plog.directory.name
                raise KafkaStorageError(f"{name}: cleaning failed: {exc}") from exc

    def raise_cancelled(self) -> None:
        if self.cancelled is not None:
            raise self.cancelled


def _replaced(plog: PartitionLog, group: CleanedGroup) -> list[Segment] | None:
    """The log's segments ``group`` replaces; None if they are no longer all there."""
    old: list[Segment] = []
    for base in group.sources:
        segment = next((s for s in plog.segments if s.base_offset == base), None)
        if segment is None:
            return None
        old.append(segment)
    return old if old[-1].next_offset == group.next_offset else None


def _facts(group: CleanedGroup) -> SealedFacts:
    return SealedFacts(group.size, group.next_offset, group.max_timestamp)


def _commit_durably(write_record: Callable[[], None], directory: Path, group: CleanedGroup) -> None:
    """The part of a swap that runs in the cleaner's thread before the loop looks again."""
    write_record()
    commit(directory, group)


def _first_timestamp(segment: Segment) -> int:
    """The largest timestamp of a segment's first batch (Kafka's first batch timestamp)."""
    header = segment.header_at(0)
    return header.max_timestamp if header is not None else segment.max_timestamp


def read_checkpoint(directory: Path) -> int:
    """Where the last cleaning of the log in ``directory`` ended (0: never cleaned)."""
    try:
        return int((directory / CHECKPOINT).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def write_checkpoint(directory: Path, offset: int) -> None:
    # Not fsynced: a lost checkpoint only makes the next cleaning start earlier.
    write_atomically(directory / CHECKPOINT, f"{offset}\n", durable=False)
