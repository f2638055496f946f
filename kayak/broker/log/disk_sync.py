"""Where the group commit's fdatasync calls run, off the event loop.

:class:`NativeDiskSync` runs them in native threads that never take the GIL (``_disk_sync.c``,
an optional C extension built by ``pip install``), and learns of each finished round through
an eventfd the event loop watches. :class:`ThreadedDiskSync`, a Python thread pool, is the
reference and the fallback when the extension is not built or ``KAYAK_PURE_PYTHON=1``.

Why native: a pool thread whose fdatasync returns needs the GIL to go on, and under load the
event loop's thread holds it nearly all the time, dropping it for a moment at each system
call. The waiting thread was woken at every such drop and lost the race again: perf on the
broker at 128 connections (``--flush group``) counted 27,000 futex calls and 10,000 context
switches a second, and 12 % of its cycles in the scheduler, against 2 % under ``--flush never``.

A file to sync is an open descriptor, or a path (bytes) opened for the moment its sync takes
(a file deleted meanwhile has nothing left to keep, which is not an error). A round's result
is one ``(errno, seconds)`` per file, errno 0 where the sync succeeded.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kayak.broker.log._disk_sync import SyncThreads

__all__ = [
    "DiskSync",
    "NativeDiskSync",
    "SyncFile",
    "SyncResult",
    "ThreadedDiskSync",
    "disk_sync",
    "native_disk_sync",
    "sync_file",
]

SyncFile = int | bytes
"""An open descriptor, or the path of a file to open for the moment of its sync."""

SyncResult = tuple[int, float]
"""One file's sync: errno (0 if it succeeded) and the seconds it took."""


class DiskSync(Protocol):
    """Runs rounds of fdatasync calls off the event loop."""

    async def fdatasync(self, files: Sequence[SyncFile], owner: object) -> list[SyncResult]:
        """fdatasync each of ``files`` in order; ``owner`` (what keeps the descriptors open)
        is held until the round is done, even if the caller stops waiting for it."""
        ...

    def close(self) -> None:
        """Finish the rounds started, then stop."""
        ...


def sync_file(file: SyncFile) -> None:
    """fdatasync one file (blocking); raises OSError as ``os.fdatasync`` does."""
    if isinstance(file, int):
        os.fdatasync(file)
        return
    try:
        fd = os.open(file, os.O_RDONLY)
    except FileNotFoundError:
        return  # deleted meanwhile (retention, DeleteRecords): nothing left to keep
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _sync_each(files: Sequence[SyncFile], owner: object = None) -> list[SyncResult]:
    """fdatasync each file; ``owner`` rides along so that what keeps the descriptors open
    lives until the round is done, even if its waiter stopped waiting."""
    del owner
    results: list[SyncResult] = []
    for file in files:
        started = time.perf_counter()
        try:
            sync_file(file)
        except OSError as exc:
            results.append((exc.errno or errno.EIO, time.perf_counter() - started))
        else:
            results.append((0, time.perf_counter() - started))
    return results


class ThreadedDiskSync:
    """The reference: a Python thread pool (each thread needs the GIL between syncs)."""

    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kayak-fsync")

    async def fdatasync(self, files: Sequence[SyncFile], owner: object) -> list[SyncResult]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, _sync_each, tuple(files), owner)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class NativeDiskSync:
    """Native threads that fdatasync without the GIL; an eventfd wakes the event loop."""

    def __init__(self, threads: int, code: type[SyncThreads]) -> None:
        self._threads = code(threads)
        self._tokens = itertools.count()
        # token -> (the waiting future, the owner of its descriptors)
        self._waiting: dict[int, tuple[asyncio.Future[list[SyncResult]], object]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def fdatasync(self, files: Sequence[SyncFile], owner: object) -> list[SyncResult]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._watch(loop)
        token = next(self._tokens)
        future: asyncio.Future[list[SyncResult]] = loop.create_future()
        self._threads.submit(token, files)
        self._waiting[token] = (future, owner)
        return await asyncio.shield(future)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the eventfd from ``loop`` (a new loop, as each ``asyncio.run`` makes)."""
        self._unwatch()
        loop.add_reader(self._threads.fileno(), self._collect)
        self._loop = loop

    def _unwatch(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._threads.fileno())
        self._loop = None

    def _collect(self) -> None:
        for token, results in self._threads.completed():
            future, _owner = self._waiting.pop(token, (None, None))
            if future is not None and not future.done() and not future.get_loop().is_closed():
                future.set_result(list(results))

    def close(self) -> None:
        try:
            self._unwatch()
        finally:
            self._threads.close()  # finishes every queued round first
            self._collect()


def native_disk_sync() -> type[SyncThreads] | None:
    """The C extension's thread type, or None when the Python pool runs."""
    if os.environ.get("KAYAK_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from kayak.broker.log._disk_sync import SyncThreads
    except ImportError:  # not built (no compiler at install time): the Python pool runs
        return None
    return SyncThreads


def disk_sync(threads: int) -> DiskSync:
    """The native threads when the extension is built, the Python pool otherwise."""
    code = native_disk_sync()
    return ThreadedDiskSync(threads) if code is None else NativeDiskSync(threads, code)
