"""``SyncFacade``: a blocking proxy for an asyncio object living on the shared loop.

Results are converted on the way out: an ``asyncio.Future`` becomes a
``concurrent.futures.Future``, an async iterator a blocking one (see :mod:`kayak.client.sync`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from kayak.client.sync.loop import LoopThread, forget_open, register_open, shared_loop

__all__ = ["BlockingIterator", "SyncFacade", "wrap"]

log = logging.getLogger(__name__)

T = TypeVar("T")
A = TypeVar("A")


# -- converting results --------------------------------------------------------------------


def _to_concurrent(future: asyncio.Future[T]) -> concurrent.futures.Future[T]:
    """A ``concurrent.futures.Future`` that completes with ``future`` (on its loop)."""
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def copy(done: asyncio.Future[T]) -> None:
        if done.cancelled():
            result.cancel()
        elif (exc := done.exception()) is not None:
            result.set_exception(exc)
        else:
            result.set_result(done.result())

    result.set_running_or_notify_cancel()
    future.add_done_callback(copy)
    return result


class BlockingIterator(Iterator[T]):
    """Iterates an async iterator on the loop, one blocking step at a time."""

    def __init__(self, loop: LoopThread, source: AsyncIterator[T]) -> None:
        self._loop = loop
        self._source = source

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> T:
        try:
            return self._loop.run(_anext(self._source))
        except StopAsyncIteration:
            raise StopIteration from None


async def _anext(source: AsyncIterator[T]) -> T:
    return await source.__anext__()


def _blocking_result(loop: LoopThread, value: Any) -> Any:
    """Futures become concurrent futures, async iterators blocking ones; others pass."""
    if isinstance(value, asyncio.Future):
        return _to_concurrent(value)
    if isinstance(value, AsyncIterator):
        return BlockingIterator(loop, value)
    return value


async def _invoke(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` on the loop; await what it returns unless that is a future to hand back."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value) and not isinstance(value, asyncio.Future):
        value = await value
    return value


# -- the generic facade --------------------------------------------------------------------


class SyncFacade(Generic[A]):
    """A blocking proxy for an asyncio object that lives on the shared loop.

    ``factory`` builds the asyncio object; it runs on the loop thread, so objects that need
    a running loop in ``__init__`` work. With ``start=True`` the object is started at once
    (its ``start()``, else ``__aenter__()``), so a facade is ready when constructed, as
    blocking Kafka clients are; if starting fails it is closed and the error raised.
    Public attributes not defined here are forwarded (see the module docstring).
    """

    def __init__(
        self, factory: Callable[[], A], *, start: bool = False, loop: LoopThread | None = None
    ) -> None:
        self._loop = loop or shared_loop()
        self._target: A = self._loop.call(factory)
        self._started = False
        self._closed = False
        register_open(self)
        if start:
            try:
                self.start()
            except BaseException:
                self._close_quietly()
                raise

    @property
    def async_client(self) -> A:
        """The wrapped asyncio object (use it only on the loop thread, e.g. in callbacks)."""
        return self._target

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self._target!r}>"

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the asyncio object's method ``name`` on the loop and wait for it."""
        method = getattr(self._target, name)
        return _blocking_result(self._loop, self._loop.run(_invoke(method, args, kwargs)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = self._loop.call(getattr, self._target, name)
        if not callable(value):
            return _blocking_result(self._loop, value)
        return functools.partial(self._call, name)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the asyncio client (``start()`` or ``__aenter__``), once."""
        if self._started:
            return
        if hasattr(self._target, "start"):
            self._call("start")
        elif hasattr(self._target, "__aenter__"):
            self._call("__aenter__")
        self._started = True

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the asyncio client (its ``close``, with these arguments); idempotent."""
        if self._closed:
            return
        self._closed = True
        forget_open(self)
        if hasattr(self._target, "close"):
            self._call("close", *args, **kwargs)
        elif hasattr(self._target, "__aexit__"):
            self._call("__aexit__", None, None, None)

    def _close_quietly(self) -> None:
        try:
            self.close()
        except Exception as exc:  # the start failure is the error worth raising
            log.debug("closing %r after a failed start: %s", self, exc)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        """Blocking iteration over an asyncio client that is an async iterator."""
        target: Any = self._target
        if not hasattr(target, "__aiter__"):
            raise TypeError(f"{type(target).__name__} cannot be iterated")
        source = self._loop.call(target.__aiter__)
        return BlockingIterator(self._loop, source)


def wrap(factory: Callable[[], T], *, start: bool = False) -> SyncFacade[T]:
    """A blocking facade for any asyncio object, built on the loop by ``factory``."""
    return SyncFacade(factory, start=start)
