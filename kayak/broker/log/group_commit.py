"""Group commit: many waiting appends made durable by one fdatasync.

Kafka acknowledges ``acks=all`` before anything reaches the disk; with fsync-before-ack its
throughput collapses as writers spread over more connections, because each request pays for
its own fsync. Here an append that arrives while a sync is running joins the *next* sync, so
one ``fdatasync`` per dirty file covers every append that queued behind it, across all
connections and partitions, and the event loop never blocks on the disk. A waiter is released
when its partition's durable offset reaches what it appended.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol

from kayak.broker.log.partition import FlushPoint, PartitionLog
from kayak.errors import KafkaError, NotLeaderOrFollowerError

log = logging.getLogger(__name__)


class FlushMode(enum.Enum):
    """When an acknowledged append is on disk."""

    GROUP = "group"  # before the ack, sharing fsyncs between waiting appends (default)
    ALWAYS = "always"  # before the ack, one fsync per request (to show the difference)
    NEVER = "never"  # page cache only, like Kafka's default; the OS writes back later

    @property
    def syncs(self) -> bool:
        """Whether acknowledged means on disk (and so reads wait for the disk too)."""
        return self is not FlushMode.NEVER


class FlushObserver(Protocol):
    """Told about every sync round (on the event loop): how long each fdatasync took, in
    seconds, and how many records (offsets) the round made durable across its logs."""

    def flushed(self, durations: list[float], records: int) -> None: ...


class GroupCommit:
    """Turns ``await sync(log)`` into as few fdatasync calls as correctness allows.

    Rounds run one after another while any log is dirty; each makes every dirty log durable
    up to where it was when the round began, and so moves those logs' high watermarks. A sync
    that fails takes its partition offline (see :class:`PartitionLog`), and every request
    waiting on that partition gets KAFKA_STORAGE_ERROR, never an acknowledgement.
    """

    def __init__(self, mode: FlushMode = FlushMode.GROUP) -> None:
        self.mode = mode
        # One thread: syncs are serialised, which is what makes batching them pay off.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kayak-fsync")
        self._dirty: set[PartitionLog] = set()
        self._running: asyncio.Future[None] | None = None
        self._waiters: list[_Waiter] = []
        self.syncs = 0  # fdatasync rounds run, for tests and metrics
        self.observer: FlushObserver | None = None  # the metrics, when they are on

    def sync(self, plog: PartitionLog) -> asyncio.Future[None]:
        """Start making everything appended to ``plog`` so far durable; await the result.

        The work starts in this call, not when the result is awaited, so a waiter that goes
        away (a closed connection) does not leave appended data unsynced and unreadable.
        The awaitable raises KAFKA_STORAGE_ERROR if the partition is (or goes) offline.
        """
        if self.mode is FlushMode.ALWAYS:
            # Its own fsync, even if another request's round already covers this data: that
            # fsync may not have finished yet.
            flush = asyncio.ensure_future(self._run([plog], force=True))
            return asyncio.ensure_future(self._wait_for(plog, flush))
        # A plain future, resolved when a round ends: no task per waiting request.
        waiter = asyncio.get_running_loop().create_future()
        if self.mode is FlushMode.NEVER or plog.offline is not None:
            _resolve(waiter, plog)
            return waiter
        self._waiters.append(_Waiter(plog, plog.log_end_offset, waiter))
        self.schedule(plog)
        return waiter

    def schedule(self, plog: PartitionLog) -> None:
        """Make ``plog`` durable in the next round, with nobody waiting (acks=0)."""
        if self.mode is FlushMode.NEVER:
            return
        self._dirty.add(plog)
        if self._running is None:
            self._start_round()

    async def _wait_for(self, plog: PartitionLog, flush: asyncio.Future[None]) -> None:
        await asyncio.shield(flush)
        plog.check_online()

    def _start_round(self) -> None:
        logs, self._dirty = list(self._dirty), set()
        self._running = asyncio.ensure_future(self._run(logs))
        self._running.add_done_callback(self._round_done)

    def _round_done(self, finished: asyncio.Future[None]) -> None:
        self._running = None
        failure = None if finished.cancelled() else finished.exception()
        waiting, self._waiters = self._waiters, []
        for entry in waiting:
            if entry.future.done():
                continue  # its request went away; the data still became durable
            if failure is not None:
                entry.future.set_exception(failure)
            elif entry.plog.offline is not None or entry.plog.durable_offset >= entry.target:
                _resolve(entry.future, entry.plog)
            elif entry.plog.closed:
                # Closed (deleted, handed to another shard) without its data known durable.
                entry.future.set_exception(
                    NotLeaderOrFollowerError(f"{entry.plog.directory.name} was closed")
                )
            else:
                self._waiters.append(entry)
                self._dirty.add(entry.plog)  # defensive: a round must be coming for it
        if self._dirty:
            self._start_round()

    async def _run(self, logs: list[PartitionLog], force: bool = False) -> None:
        points = [p for p in (_flush_point(plog, force) for plog in logs) if p is not None]
        if not points:
            return
        loop = asyncio.get_running_loop()
        durable_before = [point.log.durable_offset for point in points]
        errors, durations = await loop.run_in_executor(self._executor, _fdatasync_all, points)
        self.syncs += 1
        records = 0
        for point, error, before in zip(points, errors, durable_before, strict=True):
            if error is None:
                records += max(point.offset - before, 0)
                point.log.flushed(point)
            else:
                point.log.flush_failed(point, error)
        if self.observer is not None:
            self.observer.flushed(durations, records)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class _Waiter(NamedTuple):
    """A request waiting for ``plog`` to be durable up to ``target`` (its log end offset)."""

    plog: PartitionLog
    target: int
    future: asyncio.Future[None]


def _resolve(waiter: asyncio.Future[None], plog: PartitionLog) -> None:
    """Release ``waiter``: acknowledged, or KAFKA_STORAGE_ERROR if ``plog`` is offline."""
    try:
        plog.check_online()
    except KafkaError as exc:
        waiter.set_exception(exc)
    else:
        waiter.set_result(None)


def _flush_point(plog: PartitionLog, force: bool) -> FlushPoint | None:
    """What to sync for ``plog``: nothing once it is offline or closed (closing sealed it, or
    failed and the partition is not trusted); a log whose file cannot be taken fails alone."""
    if plog.offline is not None or plog.closed:
        return None
    try:
        return plog.flush_point(force)
    except OSError as exc:
        plog.take_offline(f"cannot sync: {exc}")
        return None


def _fdatasync_all(points: list[FlushPoint]) -> tuple[list[OSError | None], list[float]]:
    """fdatasync each point's file (and time it); one failure does not stop the others."""
    errors: list[OSError | None] = []
    durations: list[float] = []
    for point in points:
        started = time.perf_counter()
        try:
            point.sync()
        except OSError as exc:
            errors.append(exc)
        else:
            errors.append(None)
        durations.append(time.perf_counter() - started)
    return errors, durations
