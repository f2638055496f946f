"""The blocking facade machinery, on a small fake asyncio client (no broker needed)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kayak.client import sync
from kayak.client.sync import BlockingIterator, SyncFacade, blocking, future_of, on_loop

pytestmark = pytest.mark.timeout(30)


class FakeClient:
    """An asyncio client: coroutines, a future-returning send, plain methods, an iterator."""

    def __init__(self, fail_start: bool = False) -> None:
        self.loop = asyncio.get_running_loop()  # constructed on a running loop
        self.fail_start = fail_start
        self.started = self.closed = 0
        self.pending: list[asyncio.Future[int]] = []
        self.seen_threads: set[str] = set()
        self.size = 3

    async def start(self) -> None:
        if self.fail_start:
            raise ConnectionError("no broker")
        self.started += 1

    async def close(self, reason: str = "") -> None:
        self.closed += 1
        self.reason = reason

    async def double(self, x: int) -> int:
        await asyncio.sleep(0)
        self.seen_threads.add(threading.current_thread().name)
        return 2 * x

    async def fail(self) -> None:
        raise KeyError("nope")

    async def send(self, value: int) -> asyncio.Future[int]:
        future: asyncio.Future[int] = self.loop.create_future()
        self.pending.append(future)
        return future

    def deliver(self) -> None:
        for i, future in enumerate(self.pending):
            if i == 1:
                future.set_exception(ValueError("rejected"))
            else:
                future.set_result(i)

    def where(self) -> str:
        return threading.current_thread().name

    async def sleep_forever(self) -> None:
        await asyncio.sleep(3600)

    def stream(self) -> AsyncIterator[int]:
        return self._items()

    async def _items(self) -> AsyncIterator[int]:
        for i in range(self.size):
            yield i

    def __aiter__(self) -> AsyncIterator[int]:
        return self._items()


class FakeFacade(SyncFacade[FakeClient]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(lambda: FakeClient(**kwargs), start=True)

    double = blocking(FakeClient.double)
    send = future_of(FakeClient.send)
    where = on_loop(FakeClient.where)


def test_calls_run_on_the_shared_loop_thread_and_block() -> None:
    with FakeFacade() as fake:
        assert fake.async_client.started == 1  # started when constructed, once
        assert fake.double(21) == 42
        assert fake.where() == "kayak-sync"
        assert fake.async_client.seen_threads == {"kayak-sync"}
        with pytest.raises(KeyError, match="nope"):
            fake.fail()  # forwarded by __getattr__, raised in the caller's thread
        assert fake.size == 3  # plain attributes are read through
        other = FakeFacade()
        assert other._loop is fake._loop  # one loop per process
        other.close()
    assert fake.closed and fake.async_client.closed == 1
    fake.close()  # idempotent
    assert fake.async_client.closed == 1


def test_futures_become_concurrent_futures() -> None:
    fake = FakeFacade()
    try:
        sent = [fake.send(i) for i in range(3)]
        assert all(isinstance(f, concurrent.futures.Future) for f in sent)
        assert not any(f.done() for f in sent)
        fake.deliver()
        assert sent[0].result(5) == 0 and sent[2].result(5) == 2
        with pytest.raises(ValueError, match="rejected"):
            sent[1].result(5)
    finally:
        fake.close("bye")
    assert fake.async_client.reason == "bye"


def test_async_iterators_become_blocking_iterators() -> None:
    with FakeFacade() as fake:
        stream = fake.stream()
        assert isinstance(stream, BlockingIterator)
        assert list(stream) == [0, 1, 2]
        assert list(fake) == [0, 1, 2]  # the client itself is async-iterable


def test_failed_start_closes_the_client() -> None:
    with pytest.raises(ConnectionError, match="no broker"):
        FakeFacade(fail_start=True)


def test_calling_from_the_loop_thread_raises_instead_of_deadlocking() -> None:
    fake = FakeFacade()
    try:
        outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def callback() -> None:
            try:
                outcome.set_result(fake.double(1))
            except RuntimeError as exc:
                outcome.set_exception(exc)

        fake._loop.loop.call_soon_threadsafe(callback)
        with pytest.raises(RuntimeError, match="would deadlock"):
            outcome.result(5)
    finally:
        fake.close()


def test_interrupted_wait_cancels_the_call() -> None:
    fake = FakeFacade()
    loop = fake._loop
    try:
        with pytest.raises(concurrent.futures.TimeoutError):
            loop.run(fake.async_client.sleep_forever(), timeout=0.1)
        tasks = loop.call(lambda: [t for t in asyncio.all_tasks() if not t.done()])
        assert not any("sleep_forever" in repr(t) for t in tasks)
    finally:
        fake.close()


def test_wrap_any_asyncio_object() -> None:
    facade = sync.wrap(FakeClient)
    assert facade.double(5) == 10
    assert not facade.async_client.started  # wrap does not start unless asked
    facade.close()


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_gets_its_own_loop() -> None:
    with FakeFacade() as fake:
        assert fake.double(1) == 2
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the parent's loop thread is gone, a new one starts
            code = 1
            try:
                child = FakeFacade()
                ok = child.double(4) == 8 and child._loop is not fake._loop
                child.close()
                code = 0 if ok else 1
            finally:
                os.write(write, bytes([code]))
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 1) == b"\x00" and os.waitstatus_to_exitcode(status) == 0
        assert fake.double(2) == 4  # the parent's loop is unaffected
