"""Committed offsets survive restarts through the __consumer_offsets topic.

Also: the log cleaner compacts the topic and a replay still finds the same offsets (also with
transactional offset commits, Kafka's record-offset rule), existing topics get Kafka's
settings, and how storage failures are answered. A real broker process cleaning the topic:
``test_internal_topics_cleaning.py``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import TOPIC, ConsumerOffsetsTopic
from kayak.broker.group import CommittedOffset, GroupCoordinator, OffsetStoreError
from kayak.broker.log import FlushMode, GroupCommit, LogConfig, LogWriter, PartitionLog
from kayak.errors import ErrorCode, KafkaStorageError, RecordTooLargeError
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.delete_groups_response import DeleteGroupsResponse
from kayak.protocol.messages.group_coordinator.group_metadata_value import (
    GroupMetadataValue,
    MemberMetadata,
)
from kayak.protocol.records.scanner import scan_batches
from tests.broker.log_cleaner_support import assert_verified, inline_cleaner
from tests.broker.test_group_harness import FAST_CONFIG, call
from tests.broker.test_group_offsets import commit, commit_request


def open_store(
    data_dir: Path, max_message_bytes: int | None = None
) -> tuple[TopicCatalog, LogWriter, ConsumerOffsetsTopic]:
    data_dir.mkdir(exist_ok=True)
    config = (
        LogConfig() if max_message_bytes is None else LogConfig(max_message_bytes=max_message_bytes)
    )
    catalog = TopicCatalog(data_dir, config)
    catalog.open(clean_shutdown=False)
    commit = LogWriter(FlushMode.GROUP)
    return catalog, commit, ConsumerOffsetsTopic(catalog, commit)


def close(catalog: TopicCatalog, commit: LogWriter) -> None:
    catalog.close()
    commit.close()


def offsets_log(catalog: TopicCatalog) -> PartitionLog:
    return catalog.partition(TOPIC, 0).log


def records_on_disk(partition_dir: Path) -> int:
    """Records in the partition's segment files (control records included)."""
    return sum(
        header.record_count
        for path in sorted(partition_dir.glob("*.log"))
        for header in scan_batches(path.read_bytes())
    )


def clean(plog: PartitionLog) -> None:
    """Seal the active segment and clean the whole log now (Kafka's cleaner, inline)."""
    plog.roll()
    assert inline_cleaner().clean_now(plog) is not None
    assert_verified(plog.directory)


# -- restarts ------------------------------------------------------------------------------


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


def test_group_members_survive_a_restart_and_a_deletion_forgets_them(tmp_path: Path) -> None:
    catalog, commit, store = open_store(tmp_path)
    members = [
        MemberMetadata("m-1", None, "c1", "/127.0.0.1", 300_000, 45_000, b"sub-1", b"as-1"),
        MemberMetadata("m-2", "static-2", "c2", "/127.0.0.1", 300_000, 45_000, b"sub-2", b""),
    ]
    stable = GroupMetadataValue("consumer", 3, "cooperative-sticky", "m-1", 1000, members)
    later = GroupMetadataValue("consumer", 4, "cooperative-sticky", "m-2", 2000, members[1:])
    emptied = GroupMetadataValue("consumer", 7, None, None, 3000, [])

    async def write() -> None:
        await store.store_group("g1", stable)
        await store.store_group("g1", later)
        await store.store_group("g2", emptied)
        await store.store_group("g3", stable)
        await store.commit("g3", "orders", 0, 5, -1, "", 1003)
        await store.delete_group("g3")

    asyncio.run(write())
    close(catalog, commit)

    catalog, commit, store = open_store(tmp_path)
    expected = {"g1": later, "g2": emptied}
    assert store.stored_groups() == expected
    clean(offsets_log(catalog))  # the cleaner keeps each group's last record and tombstone
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert store.stored_groups() == expected
    close(catalog, commit)


def test_a_group_deleted_while_its_generation_is_being_stored_stays_deleted(
    tmp_path: Path,
) -> None:
    catalog, commit, store = open_store(tmp_path)
    emptied = GroupMetadataValue("consumer", 2, None, None, 1000, [])

    async def race() -> None:
        storing = asyncio.create_task(store.store_group("g", emptied))
        await asyncio.sleep(0)  # appended, waiting for the disk
        await store.delete_group("g")
        await storing

    asyncio.run(race())
    close(catalog, commit)
    catalog, commit, store = open_store(tmp_path)
    assert store.stored_groups() == {}
    close(catalog, commit)


# -- the log cleaner compacts the topic ----------------------------------------------------


def test_the_cleaner_compacts_the_topic_and_a_restart_finds_the_latest_offsets(
    tmp_path: Path,
) -> None:
    catalog, writer, store = open_store(tmp_path)
    plog = offsets_log(catalog)

    async def write() -> None:
        for i in range(600):
            await store.commit("g", f"t{i % 5}", i % 3, i, -1, "m", i)
            if i % 100 == 99:
                plog.roll()  # many sealed segments, as segment.bytes would make
        await store.commit("gone", "t0", 0, 1, -1, "", 1)
        await store.delete_group("gone")

    asyncio.run(write())
    expected = store.fetch_all("g")
    assert len(expected) == 15
    before = plog.size_in_bytes
    clean(plog)
    # 15 live keys (and one tombstone, kept delete.retention.ms) of 602 records
    assert records_on_disk(plog.directory) <= 16
    assert plog.size_in_bytes < before // 10
    close(catalog, writer)

    catalog, writer, store = open_store(tmp_path)
    assert store.fetch_all("g") == expected
    assert store.fetch("g", "t4", 2).offset == max(  # type: ignore[union-attr]
        i for i in range(600) if i % 5 == 4 and i % 3 == 2
    )
    assert store.groups() == ["g"] and store.live_entries == 15
    close(catalog, writer)


def _txn_commit(
    store: ConsumerOffsetsTopic, plog: PartitionLog, pid: int, offset: int, commit: bool
) -> None:
    """TxnOffsetCommit of ``g``'s t-0 by producer ``pid``, then its marker."""

    async def run() -> None:
        await store.commit_transactional(
            "g", pid, 0, [("t", 0, CommittedOffset(offset, -1, "", 1))]
        )
        plog.append_marker(pid, 0, commit, 0)
        store.marker_written(0, pid, commit)

    asyncio.run(run())


def test_aborted_and_committed_transactional_offsets_through_cleaning_and_restart(
    tmp_path: Path,
) -> None:
    catalog, writer, store = open_store(tmp_path)
    plog = offsets_log(catalog)
    asyncio.run(store.commit("g", "t", 0, 10, -1, "", 1))
    _txn_commit(store, plog, 1000, 20, commit=True)
    _txn_commit(store, plog, 1001, 99, commit=False)  # aborted: never counts
    asyncio.run(store.commit("g", "t", 1, 5, -1, "", 1))
    assert store.fetch("g", "t", 0).offset == 20  # type: ignore[union-attr]
    clean(plog)
    close(catalog, writer)

    catalog, writer, store = open_store(tmp_path)
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == {("t", 0): 20, ("t", 1): 5}
    assert not store.pending_transactional("g", "t", 0)
    close(catalog, writer)


def test_a_transactional_offset_older_than_the_committed_one_does_not_win(
    tmp_path: Path,
) -> None:
    """Kafka's record-offset rule: a transaction's offset whose record is older than the
    record of the offset committed meanwhile does not replace it at COMMIT, so removing that
    older record (the cleaner's job) changes nothing."""
    catalog, writer, store = open_store(tmp_path)
    plog = offsets_log(catalog)

    async def run() -> None:
        await store.commit_transactional("g", 7, 0, [("t", 0, CommittedOffset(20, -1, "", 1))])
        await store.commit("g", "t", 0, 30, -1, "", 2)  # a later record of the key
        # A tombstone drops the transaction's (older) offset of its key: no resurrection.
        await store.commit_transactional("g", 7, 0, [("t", 1, CommittedOffset(40, -1, "", 1))])
        await store.delete_offsets("g", [("t", 1)])
        plog.append_marker(7, 0, True, 0)
        store.marker_written(0, 7, True)

    asyncio.run(run())
    live = {k: v.offset for k, v in store.fetch_all("g").items()}
    assert live == {("t", 0): 30}
    close(catalog, writer)
    catalog, writer, store = open_store(tmp_path)  # replay before any cleaning
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == live
    clean(offsets_log(catalog))
    close(catalog, writer)
    catalog, writer, store = open_store(tmp_path)  # and after
    assert {k: v.offset for k, v in store.fetch_all("g").items()} == live
    close(catalog, writer)


def test_the_topic_has_kafkas_settings_and_an_existing_one_gets_them(tmp_path: Path) -> None:
    catalog, writer, _ = open_store(tmp_path / "new")
    topic = catalog.get(TOPIC)
    assert topic is not None and topic.internal
    assert topic.overrides == {"cleanup.policy": "compact", "segment.bytes": "104857600"}
    assert offsets_log(catalog).config.segment_bytes == 100 * 1024 * 1024
    close(catalog, writer)

    # A data directory from before: the topic has only cleanup.policy, and a chosen setting.
    old = tmp_path / "old"
    old.mkdir()
    catalog = TopicCatalog(old, LogConfig())
    catalog.open(clean_shutdown=False)
    catalog.create(TOPIC, 1, {"cleanup.policy": "compact", "delete.retention.ms": "1000"},
                   internal=True, owners=[0])  # fmt: skip
    catalog.close()
    catalog, writer, store = open_store(old)
    assert catalog.get(TOPIC).overrides == {  # type: ignore[union-attr]
        "cleanup.policy": "compact",
        "delete.retention.ms": "1000",
        "segment.bytes": "104857600",
    }
    assert offsets_log(catalog).config.segment_bytes == 100 * 1024 * 1024
    asyncio.run(store.commit("g", "t", 0, 1, -1, "", 1))
    close(catalog, writer)


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

    async def failing_sync(self: GroupCommit, plog: PartitionLog, **_: object) -> None:
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
