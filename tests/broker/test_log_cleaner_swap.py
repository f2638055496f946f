"""The broker's swap of a cleaned group: its fsyncs in the cleaner's thread, the event loop free
meanwhile, and what a roll, DeleteRecords or a cancellation on the loop meanwhile leaves."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.log import PartitionLog
from kayak.broker.log.cleaner import swap
from kayak.broker.log.cleaner.manager import CleanerConfig, LogCleaner
from kayak.broker.log.cleaner.rewrite import segment_path
from kayak.broker.log.files import write_atomically
from kayak.broker.log.loader import read_sealed_segments
from tests.broker.log_cleaner_support import (
    Read,
    assert_verified,
    compact_config,
    inline_cleaner,
    keyed,
    read_all,
)
from tests.broker.test_log_cleaner import NOW, fill, latest

FSYNC_DELAY_S = 0.2


def thread_cleaner() -> LogCleaner:
    """The broker's path: the rewrite and the durable steps of each swap in a thread."""
    return LogCleaner(CleanerConfig(backoff_ms=0, executor="thread"))


def leftovers(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]


class Crash(Exception):
    pass


class SwapPause:
    """Holds the cleaner's thread at one step of the swap until the test on the loop has done
    what it races with the swap; optionally "crashes" at a later step."""

    def __init__(self, loop: asyncio.AbstractEventLoop, at: str, crash_at: str = "") -> None:
        self.loop, self.at, self.crash_at = loop, at, crash_at
        self.reached = asyncio.Event()
        self.release = threading.Event()
        self.thread_names: list[str] = []

    def __call__(self, step: str) -> None:
        if step == self.at:
            self.thread_names.append(threading.current_thread().name)
            self.loop.call_soon_threadsafe(self.reached.set)
            assert self.release.wait(10), "the loop never released the swap"
        if step == self.crash_at:
            raise Crash(step)


def run_racing(
    plog: PartitionLog,
    monkeypatch: pytest.MonkeyPatch,
    at: str,
    meanwhile: Callable[[asyncio.Task[Any]], object],
    crash_at: str = "",
) -> asyncio.Task[Any]:
    """Clean ``plog`` with the thread held at step ``at`` while ``meanwhile`` runs on the
    loop; returns the finished cleaning task (its outcome for the test to look at)."""

    async def main() -> asyncio.Task[Any]:
        pause = SwapPause(asyncio.get_running_loop(), at, crash_at)
        monkeypatch.setattr(swap, "crash_point", pause)
        cleaning = asyncio.create_task(thread_cleaner().clean(plog, NOW))
        await asyncio.wait_for(pause.reached.wait(), 30)
        assert pause.thread_names[0].startswith("kayak-cleaner")  # not the loop's thread
        try:
            meanwhile(cleaning)
        finally:
            pause.release.set()
        await asyncio.wait([cleaning], timeout=30)
        assert cleaning.done()
        return cleaning

    return asyncio.run(main())


# -- the event loop stays free ------------------------------------------------------------------


def test_the_event_loop_keeps_ticking_while_a_swap_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fsync takes 200 ms (a slow disk): none of them may run on the event loop, where
    a coroutine ticking every 10 ms must never wait that long."""
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    expected = fill(plog, rounds=4, keys=12)
    sealed = len(plog.segments) - 1
    real_fsync = os.fsync
    fsyncs: dict[str, int] = {}

    def slow_fsync(fd: int) -> None:
        name = threading.current_thread().name
        fsyncs[name] = fsyncs.get(name, 0) + 1
        threading.Event().wait(FSYNC_DELAY_S)
        real_fsync(fd)

    async def main() -> tuple[float, object]:
        loop = asyncio.get_running_loop()
        done, gaps = asyncio.Event(), [0.0]

        async def tick() -> None:
            last = loop.time()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = loop.time()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.05)
        result = await thread_cleaner().clean(plog, NOW)
        done.set()
        await ticker
        return max(gaps), result

    monkeypatch.setattr(os, "fsync", slow_fsync)
    longest, result = asyncio.run(main())
    monkeypatch.undo()
    assert result is not None
    assert len(plog.segments) == 2 and sealed == 4  # four segments became one
    assert latest(read_all(plog)[0]) == expected
    assert fsyncs.get(threading.main_thread().name, 0) == 0, fsyncs
    # the record, the two commit renames, the settle, and the rewrite's files: all slow
    assert sum(fsyncs.values()) >= 4
    assert longest < FSYNC_DELAY_S * 0.75, f"the event loop stalled {longest * 1000:.0f} ms"
    assert not leftovers(plog.directory)
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", compact_config(), clean_shutdown=True)
    assert latest(read_all(reopened)[0]) == expected
    reopened.close()
    assert_verified(tmp_path / "t-0")


# -- what the loop does meanwhile ---------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True])
def test_a_roll_during_the_commit_never_vouches_for_the_replaced_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool
) -> None:
    """The thread has durably written the record without the replaced segments; a roll on the
    loop writes it again before the commit ends. It must leave them out too: a start after a
    crash must not trust their old facts for the cleaned file at the same base offset."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    expected = fill(plog, rounds=3, keys=8)
    replaced = [s.base_offset for s in plog.segments[:-1]]
    rolled: list[int] = []

    def roll(_: asyncio.Task[Any]) -> None:
        result = plog.append(keyed([(b"key-1", b"during")]))
        expected[b"key-1"] = Read(result.base_offset, b"key-1", b"during")
        rolled.append(plog.active.base_offset)
        plog.roll()
        # what the roll wrote, before the swap goes on
        assert rolled[0] in read_sealed_segments(directory)
        assert not set(replaced) & set(read_sealed_segments(directory))

    cleaning = run_racing(
        plog, monkeypatch, "companions-swapped", roll, crash_at="log-swapped" if crash else ""
    )
    record = read_sealed_segments(directory)
    if crash:
        assert isinstance(cleaning.exception(), Crash)
        assert not set(replaced) & set(record)  # committed, not yet swapped in
        assert rolled[0] in record
    else:
        assert cleaning.result() is not None
        assert [s.base_offset for s in plog.segments] == [0, rolled[0], plog.active.base_offset]
        assert set(record) == {0, rolled[0]}
        assert record[0] == plog.segments[0].facts()
        assert latest(read_all(plog)[0]) == expected
        plog.close()
    # The process ends here (a crash: nothing more of this PartitionLog runs).
    reopened = PartitionLog.open(directory, compact_config(), clean_shutdown=not crash)
    assert reopened.offline is None
    assert latest(read_all(reopened)[0]) == expected
    assert len(reopened.segments) == 3  # the cleaned group, the rolled one, the active one
    assert not leftovers(directory)
    reopened.close()
    assert_verified(directory)


def test_delete_records_during_the_commit_takes_the_swap_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords deletes the first replaced segment while the thread commits: the log no
    longer has the segments the cleaned copy replaces, so the commit is undone and the rest
    of them stay as they were, on disk and after a restart."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    fill(plog, rounds=3, keys=8)
    second = plog.segments[1].base_offset
    before = [r for r in read_all(plog)[0] if r.offset >= second]

    def delete_records(_: asyncio.Task[Any]) -> None:
        assert os.path.exists(segment_path(directory, 0, ".log.swap"))  # committed
        assert plog.delete_records_before(second) == second

    cleaning = run_racing(plog, monkeypatch, "log-swapped", delete_records)
    assert cleaning.result() is not None
    assert [s.base_offset for s in plog.segments[:-1]] == [second, 16]
    assert read_all(plog)[0] == before  # not cleaned: the swap was taken back
    assert not leftovers(directory)
    reopened = PartitionLog.open(directory, compact_config(), clean_shutdown=False)
    assert reopened.offline is None and reopened.log_start_offset == second
    assert read_all(reopened)[0] == before
    reopened.close()
    assert_verified(directory)


def test_a_cancelled_cleaning_still_finishes_a_committed_swap_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker stops (the cleaner's task is cancelled) while the thread commits: the task
    waits for the thread and finishes the swap before it ends cancelled, so nothing changes
    the files after the log is closed."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    expected = fill(plog, rounds=3, keys=8)

    cleaning = run_racing(plog, monkeypatch, "log-swapped", lambda task: task.cancel())
    assert cleaning.cancelled()
    assert len(plog.segments) == 2
    assert latest(read_all(plog)[0]) == expected and len(read_all(plog)[0]) == 8
    assert not leftovers(directory)
    plog.close()
    reopened = PartitionLog.open(directory, compact_config(), clean_shutdown=True)
    assert latest(read_all(reopened)[0]) == expected
    reopened.close()
    assert_verified(directory)


# -- the files ----------------------------------------------------------------------------------


def test_without_hard_links_the_swap_renames_after_an_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without hard links refuses ``os.link``: B.log.swap is renamed over B.log
    as before, after the deletions are made durable."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    expected = fill(plog, rounds=3, keys=8)

    def no_link(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted", src)

    monkeypatch.setattr(os, "link", no_link)
    assert inline_cleaner().clean_now(plog, NOW) is not None
    assert latest(read_all(plog)[0]) == expected and len(plog.segments) == 2
    assert not leftovers(directory)
    plog.close()
    assert_verified(directory)


def test_a_start_after_the_link_drops_the_second_name(tmp_path: Path) -> None:
    """B.log.swap and B.log one file (a crash after step 3): the start keeps the file."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    expected = fill(plog, rounds=3, keys=8)
    inline_cleaner().clean_now(plog, NOW)
    plog.close()
    log_file = segment_path(directory, 0)
    os.link(log_file, log_file + swap.SWAP)
    reopened = PartitionLog.open(directory, compact_config(), clean_shutdown=False)
    assert reopened.offline is None and latest(read_all(reopened)[0]) == expected
    assert os.path.exists(log_file) and not leftovers(directory)
    reopened.close()


def test_the_loop_and_a_thread_replace_the_same_file_atomically(tmp_path: Path) -> None:
    """The cleaner's thread writes sealed-segments while a roll on the loop does: each write
    must use a temporary file of its own."""
    path = tmp_path / "sealed-segments"
    errors: list[BaseException] = []

    def write_many(text: str) -> None:
        try:
            for _ in range(300):
                write_atomically(path, text, durable=False)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write_many, args=(t * 2000,)) for t in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert path.read_text() in ("a" * 2000, "b" * 2000)
