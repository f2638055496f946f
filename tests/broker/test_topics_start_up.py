"""A start on many partitions that never had a segment: each gets its first segment, and they
are made durable together before the broker serves (one syncfs of the data directory's file
system, or a directory fsync each where there is none), not one journal commit after each.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kayak.broker.catalog import TopicCatalog
from kayak.broker.log import LogConfig, local_log, partition_open
from kayak.protocol.records import build_record_batch

SEGMENT = "00000000000000000000.log"


def catalog_with_empty_partitions(data: Path, partitions: int) -> None:
    """A stopped data directory listing ``partitions`` partitions, none opened yet."""
    data.mkdir()
    catalog = TopicCatalog(data, LogConfig())
    catalog.create("wide", partitions)
    assert catalog.close()
    assert not list(data.glob(f"wide-*/{SEGMENT}"))


def segments_on_disk(data: Path) -> int:
    return len(list(data.glob(f"wide-*/{SEGMENT}")))


class Syncs:
    """What the start synced, and how many first segments existed at each sync."""

    def __init__(self, data: Path, monkeypatch: pytest.MonkeyPatch, syncfs: bool) -> None:
        self.at_each_fsync: list[int] = []
        self.at_syncfs: list[int] = []

        def fsync_directory(directory: Path) -> None:
            self.at_each_fsync.append(segments_on_disk(data))

        def fake_syncfs(directory: Path) -> bool:
            self.at_syncfs.append(segments_on_disk(data))
            return syncfs

        monkeypatch.setattr(partition_open, "fsync_directory", fsync_directory)
        monkeypatch.setattr(partition_open, "_syncfs", fake_syncfs)
        monkeypatch.setattr(local_log, "fsync_directory", fsync_directory)


def open_again(data: Path) -> TopicCatalog:
    catalog = TopicCatalog(data, LogConfig())
    catalog.open(clean_shutdown=True)
    return catalog


def test_a_start_makes_all_new_first_segments_durable_with_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    catalog_with_empty_partitions(data, 300)
    syncs = Syncs(data, monkeypatch, syncfs=True)
    catalog = open_again(data)
    try:
        assert segments_on_disk(data) == 300
        # One sync, once every segment existed; none per segment.
        assert syncs.at_syncfs == [300]
        assert syncs.at_each_fsync == []
    finally:
        catalog.close()


def test_without_syncfs_each_directory_is_synced_after_all_were_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    catalog_with_empty_partitions(data, 100)
    syncs = Syncs(data, monkeypatch, syncfs=False)
    catalog = open_again(data)
    try:
        assert syncs.at_syncfs == [100]
        assert syncs.at_each_fsync == [100] * 100
    finally:
        catalog.close()


def test_a_few_new_partitions_are_synced_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    catalog_with_empty_partitions(data, 5)
    syncs = Syncs(data, monkeypatch, syncfs=True)
    catalog = open_again(data)
    try:
        assert syncs.at_syncfs == []
        assert syncs.at_each_fsync == [5] * 5
    finally:
        catalog.close()


def test_partitions_opened_after_the_start_sync_their_first_segment_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a start (a partition opened on first use), nothing is deferred."""
    data = tmp_path
    catalog = TopicCatalog(data, LogConfig())
    catalog.open(clean_shutdown=True)
    try:
        catalog.create("late", 1)
        synced: list[bool] = []

        def fsync_directory(directory: Path) -> None:
            synced.append((directory / SEGMENT).exists())

        monkeypatch.setattr(local_log, "fsync_directory", fsync_directory)
        partition = catalog.partition("late", 0)
        assert synced == [True]
        partition.log.append(build_record_batch([b"x"]))
    finally:
        catalog.close()


def test_the_real_syncfs_succeeds_on_the_data_directory(tmp_path: Path) -> None:
    assert partition_open._syncfs(tmp_path) is (os.uname().sysname == "Linux")
