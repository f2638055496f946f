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
from concurrent.futures import ThreadPoolExecutor

from kayak.broker.log.partition import FlushPoint, PartitionLog

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
        self._round_ended: asyncio.Future[None] | None = None
        self.syncs = 0  # fdatasync rounds run, for tests and metrics

    def sync(self, plog: PartitionLog) -> asyncio.Future[None]:
        """Start making everything appended to ``plog`` so far durable; await the result.

        The work starts in this call, not when the result is awaited, so a waiter that goes
        away (a closed connection) does not leave appended data unsynced and unreadable.
        The awaitable raises KAFKA_STORAGE_ERROR if the partition is (or goes) offline.
        """
        if self.mode is FlushMode.NEVER:
            return asyncio.ensure_future(_checked(plog))
        if self.mode is FlushMode.ALWAYS:
            # Its own fsync, even if another request's round already covers this data: that
            # fsync may not have finished yet.
            flush = asyncio.ensure_future(self._run([plog], force=True))
            return asyncio.ensure_future(self._wait_for(plog, flush))
        target = plog.log_end_offset
        self.schedule(plog)
        return asyncio.ensure_future(self._wait_until_durable(plog, target))

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

    async def _wait_until_durable(self, plog: PartitionLog, target: int) -> None:
        while plog.durable_offset < target and plog.offline is None:
            if self._running is None:  # defensive: a round must be coming for us
                self.schedule(plog)
            if self._round_ended is None:
                self._round_ended = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._round_ended)
        plog.check_online()

    def _start_round(self) -> None:
        logs, self._dirty = list(self._dirty), set()
        self._running = asyncio.ensure_future(self._run(logs))
        self._running.add_done_callback(self._round_done)

    def _round_done(self, finished: asyncio.Future[None]) -> None:
        self._running = None
        ended, self._round_ended = self._round_ended, None
        if ended is not None and not ended.done():
            exc = None if finished.cancelled() else finished.exception()
            if exc is not None:
                ended.set_exception(exc)
            else:
                ended.set_result(None)
        if self._dirty:
            self._start_round()

    async def _run(self, logs: list[PartitionLog], force: bool = False) -> None:
        points = [p for p in (_flush_point(plog, force) for plog in logs) if p is not None]
        if not points:
            return
        loop = asyncio.get_running_loop()
        errors = await loop.run_in_executor(self._executor, _fdatasync_all, points)
        self.syncs += 1
        for point, error in zip(points, errors, strict=True):
            if error is None:
                point.log.flushed(point)
            else:
                point.log.flush_failed(point, error)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


async def _checked(plog: PartitionLog) -> None:
    plog.check_online()


def _flush_point(plog: PartitionLog, force: bool) -> FlushPoint | None:
    return None if plog.offline is not None else plog.flush_point(force)


def _fdatasync_all(points: list[FlushPoint]) -> list[OSError | None]:
    """fdatasync each point's file; one failure does not stop the others."""
    errors: list[OSError | None] = []
    for point in points:
        try:
            point.sync()
        except OSError as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors
