"""Committed offsets survive restarts through the __consumer_offsets topic.

Also: compaction at any number of live keys (batches under max.message.bytes), commits racing
a compaction, crashes (SIGKILL) in every step of one, and how storage failures are answered.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.broker import Broker, consumer_offsets
from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import TOPIC, ConsumerOffsetsTopic
from kayak.broker.group import GroupCoordinator, OffsetStoreError
from kayak.broker.log import FlushMode, GroupCommit, LogConfig, PartitionLog
from kayak.errors import ErrorCode, KafkaStorageError, RecordTooLargeError
from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.delete_groups_response import DeleteGroupsResponse
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse
from kayak.protocol.records import parse_batches
from kayak.protocol.records.scanner import scan_batches
from tests.broker.test_group_harness import FAST_CONFIG, call
from tests.broker.test_group_offsets import commit, commit_request
from tests.broker.wire import WireClient
from tests.security.acl_support import create_topic

COMPACTING = "compacting __consumer_offsets"


def open_store(
    data_dir: Path, max_message_bytes: int | None = None, **thresholds: int
) -> tuple[TopicCatalog, GroupCommit, ConsumerOffsetsTopic]:
    data_dir.mkdir(exist_ok=True)
    config = (
        LogConfig() if max_message_bytes is None else LogConfig(max_message_bytes=max_message_bytes)
    )
    catalog = TopicCatalog(data_dir, config)
    catalog.open(clean_shutdown=False)
    commit = GroupCommit(FlushMode.GROUP)
    return catalog, commit, ConsumerOffsetsTopic(catalog, commit, **thresholds)


def close(catalog: TopicCatalog, commit: GroupCommit) -> None:
    catalog.close()
    commit.close()


def offsets_log(catalog: TopicCatalog) -> PartitionLog:
    return catalog.partition(TOPIC, 0).log


def batches_on_disk(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(base offset, size, record count) of every batch in the partition's segment files."""
    found = []
    for path in sorted(partition_dir.glob("*.log")):
        for header in scan_batches(path.read_bytes()):
            found.append((header.base_offset, header.size, header.record_count))
    return found


def records_after(plog: PartitionLog, start: int) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of every record at or after ``start``, in log order."""
    out: list[tuple[bytes, bytes | None]] = []
    offset = start
    while (found := plog.read(offset, 1 << 22)) is not None:
        batches = list(parse_batches(found.read()))
        for batch in batches:
            out += [(r.key, r.value) for r in batch if r.offset >= offset and r.key is not None]
        offset = batches[-1].next_offset
    return out


# -- restarts and the basic compaction ---------------------------------------------------


def test_commits_and_deletes_survive_a_restart(tmp_path: Path) -> None:
    catalog, commit, store = open_store(tmp_path)

    async def write() -> None:
        await store.commit("g1", "orders", 0, 42, 0, "meta", 1000)
        await store.commit("g1", "orders", 1, 7, -1, "", 1001)
        await store.commit("g1", "orders", 0, 43, 0, "later", 1002)
        await store.commit("g2", "orders", 0, 5, -1, "", 1003)
        await store.delete_group("g2")

    asyncio.run(write())
    close(catalog, commit)

    catalog, commit, store = open_store(tmp_path)
    assert catalog.get(TOPIC) is not None and catalog.get(TOPIC).internal  # type: ignore[union-attr]
    latest = store.fetch("g1", "orders", 0)
    assert latest is not None and (latest.offset, latest.metadata) == (43, "later")
    assert store.fetch("g1", "orders", 1).offset == 7  # type: ignore[union-attr]
    assert store.fetch_all("g2") == {}
    assert store.groups() == ["g1"]
    assert store.fetch("g3", "orders", 0) is None
    assert store.live_entries == 2
    close(catalog, commit)


def test_compaction_bounds_the_topic_and_keeps_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_offsets, "COMPACT_FLOOR_BYTES", 20_000)
    catalog, commit, store = open_store(tmp_path)

    async def write() -> None:
        for i in range(2000):
            await store.commit("g", f"t{i % 5}", i % 3, i, -1, "", i)

    asyncio.run(write())
    plog = catalog.partition(TOPIC, 0).log
    assert plog.log_start_offset > 0, "compaction never ran"
    assert plog.size_in_bytes < 60_000
    expected = store.fetch_all("g")
    assert len(expected) == 15
    close(catalog, commit)

    catalog, commit, store = open_store(tmp_path)
    assert store.fetch_all("g") == expected
    assert store.fetch("g", "t4", 2).offset == max(  # type: ignore[union-attr]
        i for i in range(2000) if i % 5 == 4 and i % 3 == 2
    )
    close(catalog, commit)


# -- compaction at any number of live keys -------------------------------------------------


def test_25000_live_keys_compact_in_batches_under_max_message_bytes(tmp_path: Path) -> None:
    limit = 64 * 1024
    catalog, commit, store = open_store(tmp_path, limit, compact_floor_bytes=1 << 40)
    groups, partitions = 50, 500

    async def write() -> None:
        for g in range(groups):
            await asyncio.gather(
                *(
                    store.commit(f"group-{g}", "orders", p, g * 1000 + p, -1, "", 1)
                    for p in range(partitions)
                )
            )
        assert store.live_entries == groups * partitions
        assert await store.compact()

    asyncio.run(write())
    plog = offsets_log(catalog)
    start = plog.log_start_offset
    assert start >= groups * partitions, "the prefix was not truncated"
    on_disk = batches_on_disk(plog.directory)
    assert on_disk and on_disk[0][0] >= start - 1
    assert max(size for _, size, _ in on_disk) <= limit
    assert sum(count for _, _, count in on_disk) == groups * partitions
    # size-aware: batches are filled, not cut at a fixed count
    assert len(on_disk) <= groups * partitions * 70 // limit + 2

    def check(store: ConsumerOffsetsTopic) -> None:
        for g in range(groups):
            got = store.fetch_all(f"group-{g}")
            assert {k: v.offset for k, v in got.items()} == {
                ("orders", p): g * 1000 + p for p in range(partitions)
            }

    check(store)
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path, limit)
    check(store)
    assert store.live_entries == groups * partitions
    close(catalog, commit)


def test_a_failed_compaction_fails_no_commit_and_is_retried_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    catalog, commit, store = open_store(tmp_path, compact_floor_bytes=5_000, compact_factor=1)
    plog = offsets_log(catalog)
    real_append = PartitionLog.append

    def copies_fail(self: PartitionLog, records: Any, *args: Any, **kwargs: Any) -> Any:
        # An injected full disk for the compaction's copies only (commits are one record).
        if sum(h.record_count for h in scan_batches(bytes(records))) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(self, records, *args, **kwargs)

    async def write(first: int, count: int) -> None:
        for i in range(first, first + count):
            await store.commit("g", "t", i % 40, i, -1, "m" * 100, 1)

    asyncio.run(write(0, 100))
    assert store.compactions >= 1
    start, compactions = plog.log_start_offset, store.compactions
    monkeypatch.setattr(PartitionLog, "append", copies_fail)
    with caplog.at_level(logging.WARNING, logger=consumer_offsets.__name__):
        asyncio.run(write(100, 200))  # every commit succeeds
    assert store.compactions > compactions
    failures = [r for r in caplog.records if "compaction of __consumer_offsets failed" in r.message]
    assert failures and "KAFKA_STORAGE_ERROR" in failures[0].message
    # retried once the log grew by the floor again, not on every commit
    assert store.compactions - compactions < 200 // 10
    assert plog.log_start_offset == start, "a failed compaction truncated the log"
    expected = {("t", p): max(i for i in range(300) if i % 40 == p) for p in range(40)}
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == expected

    monkeypatch.setattr(PartitionLog, "append", real_append)
    asyncio.run(write(300, 100))
    assert plog.log_start_offset > start, "compaction did not recover"
    expected = {("t", p): max(i for i in range(400) if i % 40 == p) for p in range(40)}
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == expected
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == expected
    close(catalog, commit)


# -- commits racing a compaction -----------------------------------------------------------


def test_a_commit_between_copy_batches_is_not_shadowed_by_its_older_copy(tmp_path: Path) -> None:
    # ~20 entries per batch: the compaction copies 300 keys in many batches, yielding between.
    catalog, commit, store = open_store(tmp_path, 2_000, compact_floor_bytes=1 << 40)
    plog = offsets_log(catalog)

    async def scenario() -> None:
        for p in range(300):
            await store.commit("g", "t", p, p, -1, "", 1)
        segments = len(plog.segments)

        async def race() -> None:
            # Right after the roll and the first copy batch: the last key is not copied yet.
            while not (len(plog.segments) > segments and plog.active.size > 0):
                await asyncio.sleep(0)
            assert store.compactions == 1
            await store.commit("g", "t", 299, 10_299, -1, "new", 2)
            await store.commit("g", "new-topic", 0, 77, -1, "", 2)

        done, _ = await asyncio.gather(store.compact(), race())
        assert done

    asyncio.run(scenario())
    start = plog.log_start_offset
    assert start > 0
    late = store.fetch("g", "t", 299)
    assert late is not None and (late.offset, late.metadata) == (10_299, "new")
    # After the roll the key has exactly one record: the commit, never an older copy.
    key = consumer_offsets.encode_key("g", "t", 299)
    assert [v for k, v in records_after(plog, start) if k == key] == [
        consumer_offsets.encode_value(late)
    ]
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert store.fetch("g", "t", 299).offset == 10_299  # type: ignore[union-attr]
    assert store.fetch("g", "new-topic", 0).offset == 77  # type: ignore[union-attr]
    assert {p: store.fetch("g", "t", p).offset for p in range(299)} == {p: p for p in range(299)}  # type: ignore[union-attr]
    close(catalog, commit)


def test_a_commit_appended_before_the_roll_and_not_yet_on_disk_is_kept(tmp_path: Path) -> None:
    catalog, commit, store = open_store(tmp_path, compact_floor_bytes=1 << 40)
    plog = offsets_log(catalog)

    async def scenario() -> None:
        for p in range(50):
            await store.commit("g", "t", p, p, -1, "", 1)
        # The commit is appended, then waits for its fsync while the compaction rolls and
        # copies: the copy must carry the new value, or truncation would lose the commit.
        await asyncio.gather(store.commit("g", "t", 7, 1007, -1, "", 2), store.compact())
        # Deleting a group whose only commit is still on its way to disk deletes that too.
        await asyncio.gather(
            store.commit("fresh", "t", 0, 1, -1, "", 2), store.delete_group("fresh")
        )

    asyncio.run(scenario())
    assert plog.log_start_offset > 0
    assert store.fetch("g", "t", 7).offset == 1007  # type: ignore[union-attr]
    assert store.fetch_all("fresh") == {}
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert store.fetch("g", "t", 7).offset == 1007  # type: ignore[union-attr]
    assert store.fetch_all("fresh") == {}
    assert store.live_entries == 50
    close(catalog, commit)


def test_concurrent_commits_past_the_threshold_start_exactly_one_compaction(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    catalog, commit, store = open_store(tmp_path, compact_floor_bytes=1 << 40)

    async def fill() -> None:
        for i in range(400):
            await store.commit("g", "t", i % 64, i, -1, "", 1)

    asyncio.run(fill())
    size = offsets_log(catalog).size_in_bytes
    close(catalog, commit)
    # Reopened with a floor the log is already past: every one of the commits below is due.
    catalog, commit, store = open_store(tmp_path, compact_floor_bytes=size // 2, compact_factor=1)

    async def burst() -> None:
        await asyncio.gather(*(store.commit("g", "t", p, 5000 + p, -1, "", 2) for p in range(64)))

    with caplog.at_level(logging.INFO, logger=consumer_offsets.__name__):
        asyncio.run(burst())
    assert store.compactions == 1
    assert sum(COMPACTING in r.getMessage() for r in caplog.records) == 1
    assert offsets_log(catalog).log_start_offset > 0
    expected = {("t", p): 5000 + p for p in range(64)}
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == expected
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == expected
    close(catalog, commit)


# -- storage failures and the codes they are answered with ---------------------------------


@pytest.mark.parametrize(
    ("cause", "commit_error", "delete_error"),
    [
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
        (
            ErrorCode.MESSAGE_TOO_LARGE,
            ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ),
        (
            ErrorCode.RECORD_LIST_TOO_LARGE,
            ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ),
        (
            ErrorCode.UNKNOWN_SERVER_ERROR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ),
    ],
)
def test_store_error_causes_map_as_kafka_does(
    cause: ErrorCode, commit_error: ErrorCode, delete_error: ErrorCode
) -> None:
    error = OffsetStoreError("failed", cause)
    assert (error.commit_error, error.delete_error) == (commit_error, delete_error)
    assert (
        OffsetStoreError.wrapping("x", OSError(errno.EIO, "EIO")).cause
        is ErrorCode.KAFKA_STORAGE_ERROR
    )
    assert (
        OffsetStoreError.wrapping("x", RecordTooLargeError()).commit_error
        is ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    )
    assert OffsetStoreError("no cause given").commit_error is ErrorCode.COORDINATOR_NOT_AVAILABLE


def _warnings_naming(caplog: pytest.LogCaptureFixture, group: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and group in r.getMessage()
    ]


def test_storage_failures_are_answered_with_kafkas_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    catalog, group_commit, store = open_store(tmp_path)
    coord = GroupCoordinator(FAST_CONFIG, store)
    real_append = PartitionLog.append
    real_sync = GroupCommit.sync

    def broken_disk(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    async def failing_sync(self: GroupCommit, plog: PartitionLog) -> None:
        raise KafkaStorageError(f"{plog.directory.name} is offline: fdatasync failed")

    async def scenario() -> None:
        ok = await commit(coord, commit_request("g", -1, "", {("t", 0): 5}), 8)
        assert ok == {("t", 0): ErrorCode.NONE}

        caplog.clear()
        monkeypatch.setattr(PartitionLog, "append", broken_disk)
        answer = await commit(coord, commit_request("g", -1, "", {("t", 0): 6, ("t", 1): 1}), 8)
        assert answer == {("t", 0): ErrorCode.NOT_COORDINATOR, ("t", 1): ErrorCode.NOT_COORDINATOR}
        # one line per failure, naming the group (no multi-line traceback)
        lines = _warnings_naming(caplog, "group g ")
        assert len(lines) == 2 and all("NOT_COORDINATOR" in line for line in lines)
        assert all(r.exc_info is None for r in caplog.records)
        deleted: DeleteGroupsResponse = await call(
            coord.delete_groups, DeleteGroupsRequest(["g"]), 2
        )
        assert deleted.results[0].error_code == ErrorCode.NOT_COORDINATOR
        assert _warnings_naming(caplog, "group g ")[-1].startswith("Could not delete")

        monkeypatch.setattr(PartitionLog, "append", real_append)
        monkeypatch.setattr(GroupCommit, "sync", failing_sync)
        answer = await commit(coord, commit_request("g", -1, "", {("t", 0): 7}), 8)
        assert answer == {("t", 0): ErrorCode.NOT_COORDINATOR}

        # nothing failed is shown, and the store is not stuck once the fault is gone
        assert store.fetch("g", "t", 0).offset == 5  # type: ignore[union-attr]
        assert store.fetch("g", "t", 1) is None
        monkeypatch.setattr(GroupCommit, "sync", real_sync)
        answer = await commit(coord, commit_request("g", -1, "", {("t", 0): 8}), 8)
        assert answer == {("t", 0): ErrorCode.NONE}
        assert store.fetch("g", "t", 0).offset == 8  # type: ignore[union-attr]

        # A record over the topic's max.message.bytes: the commit is too large.
        offsets_log(catalog).config = LogConfig(max_message_bytes=200)
        big = commit_request("g", -1, "", {("t", 2): 1}, metadata="m" * 300)
        assert await commit(coord, big, 8) == {("t", 2): ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
        await coord.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    close(catalog, group_commit)


# -- 25,000 keys through the wire, an in-process broker, a restart --------------------------


class AsyncWire:
    """Kafka over one asyncio connection with kayak's sans-I/O ClientConnection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ClientConnection(client_id="offsets-test")

    @classmethod
    async def connect(cls, port: int) -> AsyncWire:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, message: Message, version: int) -> Any:
        _, frame = self.protocol.send_request(message, version)
        self.writer.write(frame)
        while (event := self.protocol.next_event()) is None:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def offset_commit(group: str, topic: str, offsets: dict[int, int]) -> OffsetCommitRequest:
    partitions = [OffsetCommitRequestPartition(p, o, -1, -1, "") for p, o in offsets.items()]
    return OffsetCommitRequest(
        group, -1, "", None, -1, [OffsetCommitRequestTopic(topic, partitions)]
    )


def create_orders(port: int, partitions: int) -> None:
    """The topic the commits name: OffsetCommit for a topic that does not exist is refused."""
    client = WireClient(f"127.0.0.1:{port}")
    response = client.request(create_topic("orders", partitions), 5)
    client.close()
    assert [t.error_code for t in response.topics] == [ErrorCode.NONE]


async def commit_over_wire(port: int, group: str, offsets: dict[int, int]) -> None:
    wire = await AsyncWire.connect(port)
    response: OffsetCommitResponse = await wire.request(offset_commit(group, "orders", offsets), 8)
    await wire.close()
    errors = {p.error_code for t in response.topics for p in t.partitions}
    assert errors == {ErrorCode.NONE}, f"{group}: {errors}"


async def fetch_over_wire(port: int, groups: list[str]) -> dict[str, dict[int, int]]:
    wire = await AsyncWire.connect(port)
    found: dict[str, dict[int, int]] = {}
    for group in groups:
        response: OffsetFetchResponse = await wire.request(OffsetFetchRequest(group, None), 7)
        assert response.error_code == ErrorCode.NONE
        found[group] = {
            p.partition_index: p.committed_offset for t in response.topics for p in t.partitions
        }
    await wire.close()
    return found


def test_25000_keys_committed_over_the_wire_compact_and_survive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Two passes of 25,000 commits (~3 MB each); compaction is due once the log is past 4 MB,
    # halfway through the second pass, with all 25,000 keys live.
    monkeypatch.setattr(consumer_offsets, "COMPACT_FLOOR_BYTES", 4 * 1024 * 1024)
    monkeypatch.setattr(consumer_offsets, "COMPACT_FACTOR", 2)
    groups = [f"group-{g:02}" for g in range(50)]
    partitions = range(500)
    data = tmp_path / "data"

    async def run() -> dict[str, dict[int, int]]:
        async with Broker(data, port=0) as broker:
            await asyncio.to_thread(create_orders, broker.port, len(partitions))
            for round_ in (1, 2):
                await asyncio.gather(
                    *(
                        commit_over_wire(
                            broker.port, g, {p: round_ * 10_000 + i * 500 + p for p in partitions}
                        )
                        for i, g in enumerate(groups)
                    )
                )
            return await fetch_over_wire(broker.port, groups)

    expected = {g: {p: 20_000 + i * 500 + p for p in partitions} for i, g in enumerate(groups)}
    with caplog.at_level(logging.INFO):
        assert asyncio.run(run()) == expected
    messages = [r.getMessage() for r in caplog.records]
    assert any(COMPACTING in m and "25000 live entries" in m for m in messages), "no compaction"
    assert not [m for m in messages if "MESSAGE_TOO_LARGE" in m or "failed" in m]

    partition_dir = data / f"{TOPIC}-0"
    start = int((partition_dir / "log-start-offset").read_text())
    assert start > 25_000
    on_disk = batches_on_disk(partition_dir)
    limit = LogConfig().max_message_bytes
    assert max(size for _, size, _ in on_disk) <= limit
    copies = [count for base, _, count in on_disk if base >= start and count > 1]
    assert len(copies) >= 2, "the live entries should need more than one batch"

    async def after_restart() -> dict[str, dict[int, int]]:
        async with Broker(data, port=0) as broker:
            return await fetch_over_wire(broker.port, groups)

    assert asyncio.run(after_restart()) == expected


# -- SIGKILL at every step of a compaction -------------------------------------------------

# A broker process with a low compaction threshold and small max.message.bytes (many copy
# batches). KILL_AT makes it SIGKILL itself at one step of its first compaction.
BROKER_SCRIPT = """
import asyncio, logging, os, signal, sys
from kayak.broker import Broker, consumer_offsets
from kayak.broker.consumer_offsets import ConsumerOffsetsTopic
from kayak.broker.log import LogConfig, PartitionLog

consumer_offsets.COMPACT_FLOOR_BYTES = 300_000
consumer_offsets.COMPACT_FACTOR = 1
kill_at = os.environ.get("KILL_AT", "")
copies = 0

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def after(cls, name, step, when=lambda *a: True):
    real = getattr(cls, name)
    def hooked(*args, **kwargs):
        result = real(*args, **kwargs)
        if kill_at == step and when(*args):
            die()
        return result
    setattr(cls, name, hooked)

after(ConsumerOffsetsTopic, "_start_compaction", "after-roll")
after(PartitionLog, "_write_checkpoint", "after-checkpoint",
      lambda plog: plog.directory.name.startswith("__consumer_offsets"))

real_copy = ConsumerOffsetsTopic._copy
async def copy(self, plog, batch):
    global copies
    await real_copy(self, plog, batch)
    copies += 1
    if kill_at == f"after-copy-{copies}":
        die()
ConsumerOffsetsTopic._copy = copy

real_truncate = ConsumerOffsetsTopic._truncate
def truncate(self, plog, start):
    if kill_at == "before-truncate":
        die()
    real_truncate(self, plog, start)
ConsumerOffsetsTopic._truncate = truncate

async def main():
    config = LogConfig(max_message_bytes=8_000)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Broker(sys.argv[1], port=0, log=config, group_initial_rebalance_delay_ms=0):
        await stop.wait()

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
asyncio.run(main())
"""

_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


class ScriptBroker:
    """The broker of BROKER_SCRIPT as a process of its own, logging to a file."""

    def __init__(self, data_dir: Path, kill_at: str = "") -> None:
        self.log_path = data_dir.parent / "broker.log"
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BROKER_SCRIPT, str(data_dir)],
                stdout=log,
                stderr=log,
                env={**os.environ, "KILL_AT": kill_at},
            )
        deadline = time.monotonic() + 30
        while not (found := _LISTENING.findall(self.log_path.read_bytes()[start:].decode())):
            assert self.process.poll() is None, self.log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.05)
        self.port = int(found[-1])

    def log_text(self) -> str:
        return self.log_path.read_text()

    def kill_when_compacting(self) -> threading.Thread:
        """SIGKILL the process as soon as its log says a compaction started."""

        def watch() -> None:
            while self.process.poll() is None:
                if COMPACTING in self.log_text():
                    os.kill(self.process.pid, signal.SIGKILL)
                    return
                time.sleep(0.001)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        return watcher

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


def commit_rounds(
    port: int, groups: int, partitions: int
) -> Iterator[tuple[str, dict[int, int], bool]]:
    """Commit round 1 then round 2 for every group, one request each: (group, offsets, acked).

    Stops after the first request the broker does not answer (it died).
    """
    for round_ in (1, 2):
        for g in range(groups):
            offsets = {p: round_ * 100_000 + g * 1000 + p for p in range(partitions)}
            try:
                client = WireClient(f"127.0.0.1:{port}")
                response = client.request(offset_commit(f"g{g}", "orders", offsets), 8)
                client.close()
            except OSError:
                yield f"g{g}", offsets, False
                return
            assert isinstance(response, OffsetCommitResponse)
            assert {p.error_code for t in response.topics for p in t.partitions} == {0}
            yield f"g{g}", offsets, True


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kill_at",
    [
        "after-roll",
        "after-copy-1",
        "after-copy-5",
        "before-truncate",
        "after-checkpoint",
        "external",
    ],
)
def test_a_sigkilled_compaction_replays_to_the_same_committed_offsets(
    tmp_path: Path, kill_at: str
) -> None:
    groups, partitions = 20, 100
    data = tmp_path / "data"
    broker = ScriptBroker(data, "" if kill_at == "external" else kill_at)
    watcher = broker.kill_when_compacting() if kill_at == "external" else None

    # What each key may read after the crash: the last acknowledged value, or, for the
    # request that was cut off, that value or the new one.
    allowed: dict[tuple[str, int], set[int]] = {}
    answered = True
    create_orders(broker.port, partitions)
    for group, offsets, acked in commit_rounds(broker.port, groups, partitions):
        for p, offset in offsets.items():
            allowed[(group, p)] = {offset} if acked else allowed.get((group, p), {-1}) | {offset}
        answered = acked
    assert not answered, "the broker was not killed"
    assert broker.process.wait(30) == -signal.SIGKILL
    if watcher is not None:
        watcher.join(5)
    assert COMPACTING in broker.log_text()
    assert "compacted __consumer_offsets" not in broker.log_text() or kill_at == "external"

    broker = ScriptBroker(data)
    try:
        client = WireClient(f"127.0.0.1:{broker.port}")
        for g in range(groups):
            response = client.request(OffsetFetchRequest(f"g{g}", None), 7)
            assert isinstance(response, OffsetFetchResponse)
            got = {
                p.partition_index: p.committed_offset for t in response.topics for p in t.partitions
            }
            for p in range(partitions):
                assert got.get(p, -1) in allowed[(f"g{g}", p)], (f"g{g}", p, got.get(p))
        client.close()
    finally:
        assert broker.stop() == 0
