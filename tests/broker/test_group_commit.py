"""Group commit: appends waiting together share fdatasync rounds; modes behave as named."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from kayak.broker.log import FlushMode, GroupCommit, LogConfig, PartitionLog, disk_sync
from kayak.broker.log.disk_sync import DiskSync, SyncFile, SyncResult
from kayak.protocol.records import build_record_batch


class SlowDisk:
    """A disk whose every round of syncs takes ``seconds`` longer than the real one's."""

    def __init__(self, disk: DiskSync, seconds: float) -> None:
        self.disk, self.seconds = disk, seconds

    async def fdatasync(self, files: Sequence[SyncFile], owner: object) -> list[SyncResult]:
        await asyncio.sleep(self.seconds)
        return await self.disk.fdatasync(files, owner)

    def close(self) -> None:
        self.disk.close()


def logs(tmp_path: Path, n: int) -> list[PartitionLog]:
    return [PartitionLog.open(tmp_path / f"t-{i}", LogConfig()) for i in range(n)]


async def produce(commit: GroupCommit, plog: PartitionLog, value: bytes) -> None:
    plog.append(build_record_batch([value]))
    await commit.sync(plog)


@pytest.mark.timeout(30)
def test_concurrent_appends_share_syncs(tmp_path: Path) -> None:
    plogs = logs(tmp_path, 4)

    async def main() -> GroupCommit:
        commit = GroupCommit(FlushMode.GROUP)
        await asyncio.gather(*(produce(commit, plogs[i % 4], b"%d" % i) for i in range(200)))
        return commit

    commit = asyncio.run(main())
    # 200 waiting appends over 4 logs: the first round goes alone, the rest ride along.
    assert 1 <= commit.syncs <= 10
    assert all(p.flush_point() is None for p in plogs), "something was acknowledged unflushed"
    assert sum(p.log_end_offset for p in plogs) == 200
    commit.close()


@pytest.mark.timeout(30)
def test_an_append_after_a_round_started_waits_for_the_next_round(tmp_path: Path) -> None:
    (plog,) = logs(tmp_path, 1)

    async def main() -> list[int]:
        commit = GroupCommit(FlushMode.GROUP)
        seen: list[int] = []

        async def late() -> None:
            await asyncio.sleep(0)  # the first round has started by now
            plog.append(build_record_batch([b"late"]))
            await commit.sync(plog)
            seen.append(plog.durable_offset)  # its own data is on disk, not just the first

        await asyncio.gather(produce(commit, plog, b"first"), late())
        commit.close()
        return seen

    # Not acknowledged by the first round: a second one (which may overlap the first's
    # fsync) made the late append durable.
    assert asyncio.run(main()) == [2]
    assert plog.flush_point() is None


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("mode", "expected"), [(FlushMode.ALWAYS, 50), (FlushMode.NEVER, 0)])
def test_always_syncs_per_request_and_never_not_at_all(
    tmp_path: Path, mode: FlushMode, expected: int
) -> None:
    (plog,) = logs(tmp_path, 1)

    async def main() -> int:
        commit = GroupCommit(mode)
        await asyncio.gather(*(produce(commit, plog, b"x") for _ in range(50)))
        commit.close()
        return commit.syncs

    assert asyncio.run(main()) == expected


@pytest.mark.timeout(30)
def test_always_never_acks_before_its_own_fsync_finished(tmp_path: Path) -> None:
    """Request B must not ride on request A's fsync that started before B's append."""
    (plog,) = logs(tmp_path, 1)

    async def main() -> tuple[dict[str, float], int]:
        commit = GroupCommit(FlushMode.ALWAYS, SlowDisk(disk_sync.disk_sync(2), 0.2))
        loop = asyncio.get_running_loop()
        started = loop.time()
        acked: dict[str, float] = {}
        # Both requests append before either sync runs, as when two pipelined requests are
        # dispatched in one loop iteration.
        plog.append(build_record_batch([b"A"]))
        plog.append(build_record_batch([b"B"]))

        async def ack(name: str) -> None:
            await commit.sync(plog)
            acked[name] = loop.time() - started

        await asyncio.gather(ack("A"), ack("B"))
        commit.close()
        return acked, commit.syncs

    acked, syncs = asyncio.run(main())
    assert syncs == 2, "always must pay one fsync per request"
    assert min(acked.values()) >= 0.19, f"acknowledged before any fsync finished: {acked}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS])
def test_data_nobody_waits_for_still_becomes_durable_and_readable(
    tmp_path: Path, mode: FlushMode
) -> None:
    """acks=0 appends, and appends whose waiter went away, must not stay invisible."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), visible_after_flush=True)

    async def main() -> None:
        commit = GroupCommit(mode)
        plog.append(build_record_batch([b"fire-and-forget"]))
        commit.schedule(plog)
        plog.append(build_record_batch([b"abandoned"]))
        waiter = asyncio.ensure_future(_await(commit.sync(plog)))
        waiter.cancel()  # the connection closed before the ack
        for _ in range(200):
            if plog.high_watermark == 2:
                break
            await asyncio.sleep(0.01)
        commit.close()

    asyncio.run(main())
    assert plog.high_watermark == plog.durable_offset == 2


async def _await(awaitable: object) -> None:
    await awaitable  # type: ignore[misc]


def test_a_log_closed_while_its_appends_wait_fails_nobody_else(tmp_path: Path) -> None:
    """DeleteTopics (or a handoff) closes a log whose appends wait for the next round: that
    close seals them, so they are acknowledged, and appends to other logs in the same round
    are unaffected."""

    async def main() -> list[str]:
        closing, other = logs(tmp_path, 2)
        commit = GroupCommit(FlushMode.GROUP)
        try:
            closing.append(build_record_batch([b"x"]))
            first = commit.sync(closing)  # round 1 starts
            await asyncio.sleep(0)
            closing.append(build_record_batch([b"y"]))
            other.append(build_record_batch([b"z"]))
            waiting = [first, commit.sync(closing), commit.sync(other)]  # round 2
            assert closing.close()
            results = await asyncio.gather(*waiting, return_exceptions=True)
            assert other.durable_offset == 1
            other.close()
            return [repr(r) for r in results]
        finally:
            commit.close()

    assert asyncio.run(main()) == ["None", "None", "None"]
