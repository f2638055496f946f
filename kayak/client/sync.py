"""Blocking facades over kayak's asyncio clients: ``Producer``, ``Consumer`` and ``Admin``.

For scripts, Spark executors and other code without an event loop::

    from kayak.client.sync import Admin

    with Admin(bootstrap_servers="localhost:9092") as admin:
        admin.create_topics(["orders"])

**One event loop per process.** Every facade runs its asyncio client on a single event loop
(uvloop when installed) in a daemon thread, ``kayak-sync``, started on first use. Clients
are still separate (own connections, own state); only the loop is shared, so a process with
many short-lived clients (a Spark executor running many tasks) keeps one extra thread. The
cost is that a callback that blocks the loop (a producer's delivery callback doing slow I/O,
say) stalls every facade of the process: keep callbacks short. After ``fork()`` the child
starts its own loop on first use (the parent's thread does not survive a fork). At exit the
facades still open are closed and the loop stopped.

**Calls.** A facade is connected (its client started) when constructed, like other blocking
Kafka clients; ``with`` closes it at the end. A facade method runs the asyncio method on the
loop and blocks the calling thread until it is done, returning its result or raising its
exception; Ctrl-C cancels it. Where the asyncio method hands back an ``asyncio.Future``
(``Producer.send``), the facade returns a ``concurrent.futures.Future`` that completes with
it, so sends can be pipelined; an async iterator becomes a blocking iterator. The main
methods are typed wrappers; anything else is forwarded by ``__getattr__`` the same way, so
new methods of the asyncio clients work here at once. Calling a facade from the loop thread
itself (inside a callback) would deadlock and raises ``RuntimeError``: use the asyncio
client (``facade.async_client``) there.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from kayak.client.admin import Admin as AsyncAdmin
from kayak.client.config import AdminConfig, ConsumerConfig
from kayak.client.consumer import Consumer as AsyncConsumer
from kayak.client.consumer import ConsumerRecord
from kayak.client.consumer.iteration import Handout
from kayak.client.producer import Producer as AsyncProducer
from kayak.client.producer.threaded import ThreadedProduce
from kayak.client.types import TopicPartition

__all__ = [
    "Admin",
    "BlockingIterator",
    "Consumer",
    "LoopThread",
    "Producer",
    "SyncFacade",
    "blocking",
    "future_of",
    "on_loop",
    "shared_loop",
    "wrap",
]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A")

_CLOSE_AT_EXIT_S = 10.0


# -- the loop thread -----------------------------------------------------------------------


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
_open_facades: weakref.WeakSet[SyncFacade[Any]] = weakref.WeakSet()


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
        _open_facades.add(self)
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
        _open_facades.discard(self)
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


# -- typed forwarding ----------------------------------------------------------------------


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


# -- the facades ---------------------------------------------------------------------------


class Admin(SyncFacade[AsyncAdmin]):
    """Blocking ``kayak.client.admin.Admin``, connected when constructed: same methods and
    arguments, results returned."""

    def __init__(
        self, config: AdminConfig | Mapping[str, object] | None = None, /, **kwargs: object
    ) -> None:
        super().__init__(lambda: AsyncAdmin(config, **kwargs), start=True)

    create_topics = blocking(AsyncAdmin.create_topics)
    delete_topics = blocking(AsyncAdmin.delete_topics)
    create_partitions = blocking(AsyncAdmin.create_partitions)
    list_topics = blocking(AsyncAdmin.list_topics)
    describe_topics = blocking(AsyncAdmin.describe_topics)
    describe_cluster = blocking(AsyncAdmin.describe_cluster)
    list_groups = blocking(AsyncAdmin.list_groups)
    describe_groups = blocking(AsyncAdmin.describe_groups)
    delete_groups = blocking(AsyncAdmin.delete_groups)
    list_group_offsets = blocking(AsyncAdmin.list_group_offsets)
    group_lag = blocking(AsyncAdmin.group_lag)
    list_offsets = blocking(AsyncAdmin.list_offsets)
    delete_records = blocking(AsyncAdmin.delete_records)
    describe_configs = blocking(AsyncAdmin.describe_configs)
    alter_configs = blocking(AsyncAdmin.alter_configs)
    statistics = on_loop(AsyncAdmin.statistics)


class Producer(SyncFacade[AsyncProducer]):
    """Blocking ``kayak.client.producer.Producer``, connected when constructed.

    ``send(...)`` returns a ``concurrent.futures.Future`` of the record's ``RecordMetadata``
    at once (blocking only while the asyncio ``send`` blocks, for buffer space or metadata),
    so many sends are in flight; ``flush()`` waits for all of them; ``close()`` delivers
    what is buffered and disconnects.

    ``produce(topic, value, key=None, headers=None, partition=None, timestamp=None,
    on_delivery=None)`` is confluent-kafka's: it returns at once, and ``on_delivery(error,
    metadata)`` runs in the caller's thread, in ``poll(timeout)`` or ``flush()``
    (:mod:`kayak.client.producer.threaded`).
    """

    def __init__(self, config: Mapping[str, object] | None = None, /, **kwargs: Any) -> None:
        super().__init__(lambda: AsyncProducer(config, **kwargs), start=True)
        self._threaded = ThreadedProduce(self._target, self._loop.loop)
        self._loop.call(self._threaded.attach)
        self.produce = self._threaded.produce
        self.poll = self._threaded.poll

    # produce(topic, value, key=None, headers=None, partition=None, timestamp=None,
    # on_delivery=None) and poll(timeout=None): see kayak.client.producer.threaded.
    produce: Callable[..., None]
    poll: Callable[..., int]

    send = future_of(AsyncProducer.send)
    send_batch = future_of(AsyncProducer.send_batch)
    send_and_wait = blocking(AsyncProducer.send_and_wait)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything ``produce``d or sent so far, wait until it is delivered (or failed),
        calling ``produce``'s delivery callbacks in this thread meanwhile, as confluent-kafka's
        ``flush`` does. Raises ``KafkaTimeoutError`` after ``timeout`` seconds."""
        self._threaded.wait_serving(self._loop.submit(self._threaded.flush(timeout)))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered (``produce``d records too), call the delivery callbacks
        due, and disconnect; idempotent."""
        if self.closed:
            return
        self._threaded.closed = True
        try:
            self._loop.run(self._threaded.hand_over_all(timeout))
        finally:
            future = self._loop.submit(self._target.close(timeout))
            self._closed = True
            _open_facades.discard(self)
            self._threaded.wait_serving(future)

    partitions_for = blocking(AsyncProducer.partitions_for)
    statistics = on_loop(AsyncProducer.statistics)
    init_transactions = blocking(AsyncProducer.init_transactions)
    begin_transaction = on_loop(AsyncProducer.begin_transaction)
    send_offsets_to_transaction = blocking(AsyncProducer.send_offsets_to_transaction)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the transaction, ``produce``d records included (they are delivered first;
        their callbacks run here); as ``kayak.client.producer.Producer.commit_transaction``."""
        self._loop.run(self._threaded.hand_over_all(timeout))
        self._threaded.wait_serving(self._loop.submit(self._target.commit_transaction(timeout)))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records ``produce``d into it fail (their callbacks run
        here with ``TransactionAbortedError``)."""
        self._loop.run(self._threaded.hand_over_all(timeout))
        self._threaded.wait_serving(self._loop.submit(self._target.abort_transaction(timeout)))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """``with producer.transaction():`` begins a transaction, commits it when the block
        ends, or aborts it if the block raises (and re-raises)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            manager = self._target._transaction
            if manager is not None and manager.can_abort:
                self.abort_transaction()
            raise
        self.commit_transaction()


class Consumer(SyncFacade[AsyncConsumer]):
    """Blocking ``kayak.client.consumer.Consumer``, connected when constructed.

    ``poll(timeout_ms)`` returns ``{TopicPartition: [ConsumerRecord, ...]}`` (empty if
    nothing came in time); ``for record in consumer`` blocks for each next record.
    Rebalance listeners and commit callbacks run on the loop thread.
    """

    def __init__(
        self, config: Mapping[str, object] | ConsumerConfig | None = None, /, **kwargs: Any
    ) -> None:
        # Set before the facade starts the consumer (start goes through _call).
        self._handout: Handout | None = None
        super().__init__(lambda: AsyncConsumer(config, **kwargs), start=True)
        self._handout = Handout(self._target, self._loop.run)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        # Records the iterator peeked and handed out are taken first (see
        # kayak.client.consumer.iteration), so every other call sees per-record positions.
        if self._handout is not None:
            self._handout.settle_pending()
        return super()._call(name, *args, **kwargs)

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, waiting up to ``timeout_ms`` for some (``getmany``)."""
        return self.getmany(timeout_ms=timeout_ms, max_records=max_records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """One record per step, as ``async for`` gives them; records already buffered are
        handed out without a trip to the loop thread per record."""
        assert self._handout is not None
        return _RecordIterator(self._handout)

    getmany = blocking(AsyncConsumer.getmany)
    getmany_values = blocking(AsyncConsumer.getmany_values)
    getone = blocking(AsyncConsumer.getone)
    commit = blocking(AsyncConsumer.commit)
    committed = blocking(AsyncConsumer.committed)
    position = blocking(AsyncConsumer.position)
    beginning_offsets = blocking(AsyncConsumer.beginning_offsets)
    end_offsets = blocking(AsyncConsumer.end_offsets)
    topics = blocking(AsyncConsumer.topics)
    partitions_for_topic = blocking(AsyncConsumer.partitions_for_topic)
    subscribe = on_loop(AsyncConsumer.subscribe)
    unsubscribe = on_loop(AsyncConsumer.unsubscribe)
    assign = on_loop(AsyncConsumer.assign)
    assignment = on_loop(AsyncConsumer.assignment)
    subscription = on_loop(AsyncConsumer.subscription)
    seek = on_loop(AsyncConsumer.seek)
    seek_to_beginning = on_loop(AsyncConsumer.seek_to_beginning)
    seek_to_end = on_loop(AsyncConsumer.seek_to_end)
    pause = on_loop(AsyncConsumer.pause)
    resume = on_loop(AsyncConsumer.resume)
    paused = on_loop(AsyncConsumer.paused)
    highwater = on_loop(AsyncConsumer.highwater)
    last_stable_offset = on_loop(AsyncConsumer.last_stable_offset)
    group_metadata = on_loop(AsyncConsumer.group_metadata)
    statistics = on_loop(AsyncConsumer.statistics)


class _RecordIterator(Iterator[ConsumerRecord]):
    def __init__(self, handout: Handout) -> None:
        self._next = handout.next

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ConsumerRecord:
        return self._next()


def wrap(factory: Callable[[], T], *, start: bool = False) -> SyncFacade[T]:
    """A blocking facade for any asyncio object, built on the loop by ``factory``."""
    return SyncFacade(factory, start=start)
