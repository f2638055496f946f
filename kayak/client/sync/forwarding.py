"""Typed forwarding: class attributes of a facade that call the asyncio method of the same
name on the loop (``blocking``, ``on_loop``, ``future_of``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from kayak.client.sync.facade import SyncFacade

__all__ = ["blocking", "future_of", "on_loop"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class _Forward:
    """Forwards to the asyncio method of the same name through ``SyncFacade._call``."""

    def __init__(self, method: Callable[..., Any]) -> None:
        self._name = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    def _bound(self, facade: SyncFacade[Any]) -> Callable[..., Any]:
        return functools.partial(facade._call, self._name)


class blocking(_Forward, Generic[P, R]):
    """A coroutine method, blocking: ``create_topics = blocking(AsyncAdmin.create_topics)``
    in a ``SyncFacade`` subclass takes the same arguments and returns the result."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        super().__init__(method)

    @overload
    def __get__(self, facade: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, facade: SyncFacade[Any], owner: type | None = None) -> Callable[P, R]: ...
    def __get__(
        self, facade: SyncFacade[Any] | None, owner: type | None = None
    ) -> Self | Callable[P, R]:
        return self if facade is None else self._bound(facade)


class on_loop(_Forward, Generic[P, R]):
    """A plain method, run on the loop thread (the asyncio objects are not thread-safe)."""

    def __init__(self, method: Callable[Concatenate[Any, P], R]) -> None:
        super().__init__(method)

    @overload
    def __get__(self, facade: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, facade: SyncFacade[Any], owner: type | None = None) -> Callable[P, R]: ...
    def __get__(
        self, facade: SyncFacade[Any] | None, owner: type | None = None
    ) -> Self | Callable[P, R]:
        return self if facade is None else self._bound(facade)


class future_of(_Forward, Generic[P, T]):
    """A coroutine method whose result is an ``asyncio.Future``: blocks while the coroutine
    runs (a send waiting for buffer space), then returns a ``concurrent.futures.Future``."""

    def __init__(
        self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, asyncio.Future[T]]]
    ) -> None:
        super().__init__(method)

    @overload
    def __get__(self, facade: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(
        self, facade: SyncFacade[Any], owner: type | None = None
    ) -> Callable[P, concurrent.futures.Future[T]]: ...
    def __get__(
        self, facade: SyncFacade[Any] | None, owner: type | None = None
    ) -> Self | Callable[P, concurrent.futures.Future[T]]:
        return self if facade is None else self._bound(facade)
