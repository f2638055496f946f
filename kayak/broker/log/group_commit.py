"""Group commit: many waiting appends made durable by one fdatasync.

Kafka acknowledges ``acks=all`` before anything reaches the disk; with fsync-before-ack its
throughput collapses as writers spread over more connections, because each request pays for
its own fsync. Here an append that arrives while a sync is running joins the *next* sync, so
one ``fdatasync`` per dirty file covers every append that queued behind it, across all
connections and partitions, and the event loop never blocks on the disk.
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

    A sync that fails takes its partition offline (see :class:`PartitionLog`), and every
    request waiting on that partition gets KAFKA_STORAGE_ERROR, never an acknowledgement.
    """

    def __init__(self, mode: FlushMode = FlushMode.GROUP) -> None:
        self.mode = mode
        # One thread: syncs are serialised, which is what makes batching them pay off.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kayak-fsync")
        self._dirty: set[PartitionLog] = set()
        self._running: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        self.syncs = 0  # fdatasync rounds run, for tests and metrics

    async def sync(self, plog: PartitionLog) -> None:
        """Return once everything appended to ``plog`` before this call is durable.

        Raises KAFKA_STORAGE_ERROR if the partition is (or goes) offline.
        """
        if self.mode is FlushMode.NEVER:
            plog.check_online()
            return
        if self.mode is FlushMode.ALWAYS:
            # Its own fsync, even if another request's round already covers this data: that
            # fsync may not have finished yet.
            await self._run([plog], force=True)
        else:
            await self._join_round(plog)
        plog.check_online()

    async def _join_round(self, plog: PartitionLog) -> None:
        self._dirty.add(plog)
        if self._running is None:
            self._running = self._start_round()
            await asyncio.shield(self._running)
            return
        # A round is already on disk-time; what we appended may have missed it.
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._next)

    def _start_round(self) -> asyncio.Future[None]:
        logs, self._dirty = list(self._dirty), set()
        task = asyncio.ensure_future(self._run(logs))
        task.add_done_callback(self._round_done)
        return task

    def _round_done(self, finished: asyncio.Future[None]) -> None:
        waiting, self._next = self._next, None
        if waiting is None:
            self._running = None
            return
        self._running = self._start_round()
        self._running.add_done_callback(lambda done: _settle(waiting, done))

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


def _settle(waiter: asyncio.Future[None], done: asyncio.Future[None]) -> None:
    if waiter.done():
        return
    exc = done.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(None)
