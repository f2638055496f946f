"""The event loop thread every sync facade of a process shares, and closing them at exit.

One loop (uvloop when installed) runs in a daemon thread, ``kayak-sync``, started on first
use and again in a forked child; at exit the facades still open are closed and the loop
stopped (see :mod:`kayak.client.sync`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

__all__ = ["LoopThread", "forget_open", "register_open", "shared_loop"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

_CLOSE_AT_EXIT_S = 10.0


class _Closable(Protocol):
    def close(self) -> None: ...


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but optional in spirit
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    """An event loop running forever in a daemon thread, taking work from other threads."""

    def __init__(self, name: str = "kayak-sync") -> None:
        self.loop = _new_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self._shut_down()

    def _shut_down(self) -> None:
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its result arrives in the returned future."""
        if not self.alive:
            coro.close()
            raise RuntimeError("kayak's sync event loop has stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; cancels it if the wait is interrupted."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(
                "a kayak sync facade was called from its own event loop thread (a callback?), "
                "which would deadlock; use the asyncio client there (facade.async_client)"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call the plain function ``fn`` on the loop thread and return what it returns."""

        async def invoke() -> T:
            return fn(*args, **kwargs)

        return self.run(invoke())

    def stop(self, timeout: float = _CLOSE_AT_EXIT_S) -> None:
        """Stop the loop (cancelling what still runs on it) and wait for the thread."""
        if self.alive and not self.in_loop_thread():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)


_shared: LoopThread | None = None
_shared_lock = threading.Lock()
_open_facades: weakref.WeakSet[_Closable] = weakref.WeakSet()


def register_open(facade: _Closable) -> None:
    """Close ``facade`` at exit unless it is closed before (``forget_open``)."""
    _open_facades.add(facade)


def forget_open(facade: _Closable) -> None:
    """``facade`` is closed: nothing to do for it at exit."""
    _open_facades.discard(facade)


def shared_loop() -> LoopThread:
    """The process's loop thread, started on first use (again in a forked child)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive:
            _shared = LoopThread()
        return _shared


def _forget_after_fork() -> None:
    # The loop thread does not exist in the child; its loop object must not be touched.
    global _shared, _shared_lock, _open_facades
    _shared = None
    _shared_lock = threading.Lock()
    _open_facades = weakref.WeakSet()


def _close_at_exit() -> None:
    for facade in list(_open_facades):
        try:
            facade.close()
        except Exception as exc:  # at exit, report and go on closing the others
            log.warning("closing %r at exit failed: %s", facade, exc)
    if _shared is not None:
        _shared.stop()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_at_exit)
