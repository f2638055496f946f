"""Storage faults: a failing or slow ``fdatasync``, in an in-process broker with
``os.fdatasync`` patched (an EIO from the disk, an fsync that takes its time, cannot be made
real). The patch reaches the group commit's Python thread pool, which these tests pin (the
native sync threads call the C library's fdatasync; tests/broker/test_disk_sync.py gives them
real failures). A failed fdatasync takes the partition offline until a restart and
acknowledges nothing it did not make durable; the high watermark is the last durable offset
(``--flush group`` and ``always``) or the log end (``never``)."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kayak.broker import Broker
from kayak.broker.log import FlushMode, disk_sync
from kayak.protocol.records import build_record_batch
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    LATEST,
    STORAGE_ERROR,
    Records,
    ack_all,
    check_contiguous,
    decode,
    fetch,
    init_producer_id,
    list_offset,
    one_batch,
    produce,
    read_records,
)
from tests.broker.wire import WireClient


@pytest.fixture(autouse=True)
def python_sync_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group commit syncs through ``os.fdatasync``, where the faults are injected."""
    monkeypatch.setattr(disk_sync, "native_disk_sync", lambda: None)


class FailingFdatasync:
    """``os.fdatasync`` that raises EIO while ``failing`` is set (a disk that lost a write)."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.failing = False
        self.failures = 0

    def __call__(self, fd: int) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "injected fdatasync failure")
        self.real(fd)


class BlockingFdatasync:
    """``os.fdatasync`` that, while ``armed``, waits for ``release`` (a slow disk)."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.armed:
            self.entered.set()
            self.release.wait(30)
        self.real(fd)


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking client call without blocking the in-process broker's event loop."""
    return await asyncio.to_thread(fn, *args)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS], ids=lambda m: m.value)
def test_failed_fdatasync_takes_the_partition_offline_until_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: FlushMode
) -> None:
    fdatasync = FailingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    data_dir = tmp_path / "data"
    failed_values = {b"idem-0", b"failed-1"}  # may or may not survive the restart

    async def while_failing() -> tuple[Records, bytes]:
        async with Broker(data_dir, port=0, flush=mode) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "bad")
            await in_thread(create_topic, bootstrap, "good")
            wire: WireClient = await in_thread(WireClient, bootstrap)
            acked = await in_thread(ack_all, wire, "bad", [b"acked-%d" % i for i in range(5)])
            producer_id, epoch = await in_thread(init_producer_id, wire)
            idempotent = build_record_batch(
                [b"idem-0"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0
            )

            fdatasync.failing = True
            first = await in_thread(produce, wire, "bad", idempotent)
            assert first.error_code == STORAGE_ERROR, f"fsync failed, produce answered {first}"
            second = await in_thread(produce, wire, "bad", one_batch(b"failed-1"))
            assert second.error_code == STORAGE_ERROR, f"second produce answered {second}"
            fdatasync.failing = False
            assert fdatasync.failures >= 1

            # The disk works again, but the partition lost a write it cannot account for.
            retry = await in_thread(produce, wire, "bad", idempotent)
            assert retry.error_code == STORAGE_ERROR, (
                f"the idempotent retry of a never-durable batch answered {retry}"
            )
            later = await in_thread(produce, wire, "bad", one_batch(b"rejected-offline"))
            assert later.error_code == STORAGE_ERROR, f"produce to an offline partition: {later}"
            data = await in_thread(fetch, wire, "bad", 0)
            assert data.error_code == STORAGE_ERROR, f"fetch from an offline partition: {data}"

            good = await in_thread(ack_all, wire, "good", [b"good-%d" % i for i in range(3)])
            assert await in_thread(read_records, wire, "good") == good
            wire.close()
            return acked, idempotent

    async def after_restart(acked: Records, idempotent: bytes) -> None:
        async with Broker(data_dir, port=0, flush=mode) as broker:
            wire: WireClient = await in_thread(WireClient, broker.bootstrap_servers)
            stored = await in_thread(read_records, wire, "bad")
            check_contiguous(stored)
            assert stored[: len(acked)] == acked, "an acknowledged record is missing"
            extra = [value for _, value in stored[len(acked) :]]
            assert set(extra) <= failed_values and len(extra) == len(set(extra)), extra

            retry = await in_thread(produce, wire, "bad", idempotent)
            assert retry.error_code == 0, f"after the restart the retry answered {retry}"
            fresh = await in_thread(ack_all, wire, "bad", [b"fresh"])
            stored = await in_thread(read_records, wire, "bad")
            check_contiguous(stored)
            values = [value for _, value in stored]
            assert values.count(b"idem-0") == 1, "the idempotent batch is stored twice or never"
            assert b"rejected-offline" not in values
            assert stored[-1] == fresh[0]
            wire.close()

    acked, idempotent = asyncio.run(while_failing())
    monkeypatch.setattr(os, "fdatasync", fdatasync.real)
    asyncio.run(after_restart(acked, idempotent))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS], ids=lambda m: m.value)
def test_high_watermark_is_the_durable_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: FlushMode
) -> None:
    fdatasync = BlockingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def scenario() -> None:
        async with Broker(tmp_path / "data", port=0, flush=mode) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "hw")
            reader: WireClient = await in_thread(WireClient, bootstrap)
            writer: WireClient = await in_thread(WireClient, bootstrap)
            synced = await in_thread(ack_all, reader, "hw", [b"synced-%d" % i for i in range(10)])

            fdatasync.armed = True
            ack = asyncio.ensure_future(in_thread(produce, writer, "hw", one_batch(b"unsynced")))
            try:
                assert await in_thread(fdatasync.entered.wait, 10), "no fdatasync started"
                data = await in_thread(fetch, reader, "hw", 0)
                assert data.error_code == 0
                assert decode(0, data.records) == synced, (
                    "a fetch returned a record not yet on disk"
                )
                assert data.high_watermark == 10, f"high watermark {data.high_watermark}"
                at_end = await in_thread(fetch, reader, "hw", 10)
                assert (at_end.error_code, decode(10, at_end.records)) == (0, []), at_end
                assert await in_thread(list_offset, reader, "hw", LATEST) == (0, 10)
                assert not ack.done(), "acknowledged before its fdatasync finished"
            finally:
                fdatasync.armed = False
                fdatasync.release.set()
            result = await ack
            assert (result.error_code, result.base_offset) == (0, 10), result
            data = await in_thread(fetch, reader, "hw", 0)
            assert decode(0, data.records) == [*synced, (10, b"unsynced")]
            assert data.high_watermark == 11
            assert await in_thread(list_offset, reader, "hw", LATEST) == (0, 11)
            reader.close()
            writer.close()

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_flush_never_high_watermark_is_the_log_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fdatasync = BlockingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def scenario() -> None:
        async with Broker(tmp_path / "data", port=0, flush=FlushMode.NEVER) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "hw")
            wire: WireClient = await in_thread(WireClient, bootstrap)
            fdatasync.armed = True  # a disk that never syncs must not hold anything up
            try:
                acked = await in_thread(ack_all, wire, "hw", [b"v-%d" % i for i in range(5)])
                data = await in_thread(fetch, wire, "hw", 0)
                assert decode(0, data.records) == acked
                assert data.high_watermark == 5
                assert await in_thread(list_offset, wire, "hw", LATEST) == (0, 5)
            finally:
                fdatasync.armed = False
                fdatasync.release.set()
            wire.close()

    asyncio.run(scenario())
