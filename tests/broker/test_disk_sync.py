"""Where the group commit's fdatasync calls run: the native threads (``_disk_sync.c``) and the
Python pool they replace give the same answers, for real files and real failures (a pipe, a
closed descriptor: the kernel's own EINVAL and EBADF, no patched syscall), and refuse bad
input with an exception naming it."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kayak.broker.log import FlushMode, GroupCommit, LogConfig, PartitionLog
from kayak.broker.log.disk_sync import (
    DiskSync,
    NativeDiskSync,
    SyncFile,
    SyncResult,
    ThreadedDiskSync,
    disk_sync,
    native_disk_sync,
)
from kayak.protocol.records import build_record_batch

NATIVE = native_disk_sync()
REPO = Path(__file__).resolve().parents[2]


def make_native(threads: int) -> DiskSync:
    assert NATIVE is not None
    return NativeDiskSync(threads, NATIVE)


IMPLEMENTATIONS: dict[str, Callable[[int], DiskSync]] = {
    "native": make_native,
    "python": ThreadedDiskSync,
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def disk(request: pytest.FixtureRequest) -> Iterator[DiskSync]:
    made = IMPLEMENTATIONS[request.param](2)
    yield made
    made.close()


def written_file(path: Path, size: int = 8192) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, os.urandom(size))
    return fd


def test_the_extension_is_built_where_tests_run() -> None:
    """``make test`` installs kayak with its C extensions: the native threads are what runs."""
    assert NATIVE is not None, "kayak/broker/log/_disk_sync.c was not built"
    chosen = disk_sync(2)
    try:
        assert isinstance(chosen, NativeDiskSync)
    finally:
        chosen.close()


def test_pure_python_selects_the_pool() -> None:
    code = (
        "from kayak.broker.log.disk_sync import disk_sync, ThreadedDiskSync\n"
        "d = disk_sync(2); print(type(d).__name__); d.close()\n"
    )
    env = {**os.environ, "KAYAK_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "ThreadedDiskSync"


def test_rounds_of_real_files_succeed_in_order(tmp_path: Path, disk: DiskSync) -> None:
    fds = [written_file(tmp_path / f"{i}.log") for i in range(3)]
    path = os.fsencode(tmp_path / "by-name.log")
    os.close(written_file(tmp_path / "by-name.log"))

    async def main() -> list[list[tuple[int, float]]]:
        rounds = [disk.fdatasync([*fds[: i % 3 + 1], path], owner=None) for i in range(200)]
        return await asyncio.gather(*rounds)

    try:
        results = asyncio.run(main())
    finally:
        for fd in fds:
            os.close(fd)
    assert len(results) == 200
    for i, result in enumerate(results):
        assert len(result) == i % 3 + 2, "one result per file, for this round's own files"
        assert all(error == 0 and seconds >= 0 for error, seconds in result), result


def test_failures_are_the_kernel_s_errno_and_do_not_stop_the_round(
    tmp_path: Path, disk: DiskSync
) -> None:
    good = written_file(tmp_path / "good.log")
    reader, writer = os.pipe()  # fdatasync of a pipe: EINVAL
    closed = os.sysconf("SC_OPEN_MAX") - 1  # the highest descriptor: not open, EBADF
    with pytest.raises(OSError):
        os.fstat(closed)
    gone = os.fsencode(tmp_path / "deleted-meanwhile.log")

    async def main() -> list[tuple[int, float]]:
        return await disk.fdatasync([reader, good, closed, gone, good], owner=None)

    try:
        result = asyncio.run(main())
    finally:
        for fd in (good, reader, writer):
            os.close(fd)
    assert [error for error, _ in result] == [errno.EINVAL, 0, errno.EBADF, 0, 0]


def test_one_instance_serves_successive_event_loops(tmp_path: Path, disk: DiskSync) -> None:
    fd = written_file(tmp_path / "a.log")
    try:
        for _ in range(3):  # each asyncio.run is a new loop; the eventfd follows it
            assert asyncio.run(disk.fdatasync([fd], owner=None))[0][0] == 0
    finally:
        os.close(fd)


def test_a_caller_that_stops_waiting_leaves_the_round_to_finish(
    tmp_path: Path, disk: DiskSync
) -> None:
    fd = written_file(tmp_path / "a.log")

    async def main() -> int:
        waiting = asyncio.ensure_future(disk.fdatasync([fd] * 50, owner=fd))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Later rounds still work, and the abandoned one is collected without an error.
        return (await disk.fdatasync([fd], owner=None))[0][0]

    try:
        assert asyncio.run(main()) == 0
    finally:
        os.close(fd)


def forget_frames(error: BaseException | None) -> None:
    """Clear the frames in ``error``'s tracebacks (and its causes'): a finished coroutine's
    frame there would keep its arguments alive, whoever else holds them."""
    while error is not None:
        traceback.clear_frames(error.__traceback__)
        error = error.__context__


class Owner:
    """Stands for what keeps a round's descriptors open (the group commit's flush points)."""


def test_the_owner_outlives_its_round_when_the_waiter_goes_away(
    tmp_path: Path, disk: DiskSync
) -> None:
    """A round whose waiter is cancelled still holds what keeps its files open until it is
    done: otherwise a descriptor could close, and its number be reused, mid-round. The round
    is held up for real: opening a FIFO for reading waits until a writer opens it."""
    fifo = tmp_path / "held.fifo"
    os.mkfifo(fifo)
    held = [Owner()]  # handed to the round and dropped here, so only the round can keep it
    alive = weakref.ref(held[0])
    released = threading.Event()

    def release() -> None:
        """Open the FIFO for writing: the round's open returns (then fdatasync: EINVAL)."""
        if released.is_set():
            return
        released.set()
        try:  # non-blocking: a reader waiting in open() counts; none means nothing to free
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise

    async def main() -> None:
        waiting = asyncio.ensure_future(disk.fdatasync([os.fsencode(fifo)], held.pop()))
        await asyncio.sleep(0.2)  # the round is in its open() now
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError as exc:
            forget_frames(exc)
        else:
            raise AssertionError("the cancelled waiter returned")
        del waiting
        gc.collect()
        assert alive() is not None, "the owner was let go while its round still ran"
        await asyncio.to_thread(release)
        for _ in range(500):  # then it goes, once the round is done
            gc.collect()
            if alive() is None:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the owner was kept after its round was done")

    try:
        asyncio.run(main())
    finally:
        release()


@pytest.mark.skipif(NATIVE is None, reason="checked by test_the_extension_is_built_where_tests_run")
def test_native_threads_refuse_bad_input(tmp_path: Path) -> None:
    assert NATIVE is not None
    with pytest.raises(ValueError, match="threads must be between 1 and 16"):
        NATIVE(0)
    with pytest.raises(ValueError, match="threads must be between 1 and 16"):
        NATIVE(17)
    threads = NATIVE(1)
    with pytest.raises(TypeError, match=r"descriptor \(int\) or a path \(bytes\), not str"):
        threads.submit(1, ["a.log"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not a file descriptor: -1"):
        threads.submit(1, [-1])
    with pytest.raises(ValueError, match="NUL"):
        threads.submit(1, [b"a\0b"])
    with pytest.raises(TypeError, match="sequence of descriptors or paths"):
        threads.submit(1, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not one path"):
        threads.submit(1, b"a.log")
    with pytest.raises(TypeError, match="not bool"):
        threads.submit(1, [True])
    with pytest.raises(RuntimeError, match="already initialised"):
        threads.__init__(1)  # type: ignore[misc]
    threads.close()
    threads.close()  # again: nothing
    with pytest.raises(RuntimeError, match="closed"):
        threads.submit(1, [])
    with pytest.raises(RuntimeError, match="closed"):
        threads.fileno()
    unstarted = NATIVE.__new__(NATIVE)
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        unstarted.submit(1, [])
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        unstarted.completed()


@pytest.mark.skipif(NATIVE is None, reason="checked by test_the_extension_is_built_where_tests_run")
def test_rounds_finished_before_close_stay_for_completed(tmp_path: Path) -> None:
    assert NATIVE is not None
    fd = written_file(tmp_path / "a.log")
    threads = NATIVE(1)
    try:
        threads.submit(7, [fd])
        threads.close()  # joins the thread: round 7 is finished, not yet collected
        assert [token for token, _ in threads.completed()] == [7]
        assert threads.completed() == []
    finally:
        os.close(fd)


@pytest.mark.skipif(NATIVE is None, reason="checked by test_the_extension_is_built_where_tests_run")
def test_closing_finishes_every_queued_round(tmp_path: Path) -> None:
    assert NATIVE is not None
    fd = written_file(tmp_path / "a.log")
    threads = NATIVE(2)
    try:
        for token in range(100):
            threads.submit(token, [fd, fd])
        threads.close()
        done = threads.completed()
    finally:
        os.close(fd)
    assert sorted(token for token, _ in done) == list(range(100))
    assert all(len(results) == 2 and results[0][0] == 0 for _, results in done)


@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS], ids=lambda m: m.value)
@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_group_commit_makes_every_append_durable_through_either(
    tmp_path: Path, mode: FlushMode, implementation: str
) -> None:
    plogs = [PartitionLog.open(tmp_path / f"t-{i}", LogConfig()) for i in range(3)]

    async def main() -> GroupCommit:
        commit = GroupCommit(mode, IMPLEMENTATIONS[implementation](2))

        async def produce(i: int) -> None:
            plog = plogs[i % 3]
            plog.append(build_record_batch([b"%d" % i]))
            await commit.sync(plog)

        await asyncio.gather(*(produce(i) for i in range(300)))
        commit.close()
        return commit

    commit = asyncio.run(main())
    assert commit.syncs >= 1
    assert [plog.durable_offset for plog in plogs] == [100, 100, 100]
    assert all(plog.offline is None for plog in plogs)
    for plog in plogs:
        plog.close()


def test_a_failed_native_sync_takes_the_partition_offline(tmp_path: Path) -> None:
    """A real failure through the native threads: the round's descriptor is a pipe."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())

    class PipeDisk:
        """Syncs a pipe in place of each file: the kernel answers EINVAL."""

        def __init__(self) -> None:
            self.disk = disk_sync(2)
            self.reader, self.writer = os.pipe()

        async def fdatasync(self, files: list[SyncFile], owner: object) -> list[SyncResult]:
            return await self.disk.fdatasync([self.reader] * len(files), owner)

        def close(self) -> None:
            self.disk.close()
            os.close(self.reader)
            os.close(self.writer)

    async def main() -> None:
        commit = GroupCommit(FlushMode.GROUP, PipeDisk())
        plog.append(build_record_batch([b"x"]))
        try:
            with pytest.raises(Exception, match="Invalid argument") as failure:
                await commit.sync(plog)
            assert type(failure.value).__name__ == "KafkaStorageError"
        finally:
            commit.close()

    asyncio.run(main())
    assert plog.offline is not None and "Invalid argument" in plog.offline
    assert plog.durable_offset == 0, "nothing acknowledged as durable"
