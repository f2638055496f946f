"""Committed offsets survive restarts through the __consumer_offsets topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kayak.broker import consumer_offsets
from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import TOPIC, ConsumerOffsetsTopic
from kayak.broker.log import FlushMode, GroupCommit, LogConfig


def open_store(data_dir: Path) -> tuple[TopicCatalog, GroupCommit, ConsumerOffsetsTopic]:
    data_dir.mkdir(exist_ok=True)
    catalog = TopicCatalog(data_dir, LogConfig())
    catalog.open(clean_shutdown=False)
    commit = GroupCommit(FlushMode.GROUP)
    return catalog, commit, ConsumerOffsetsTopic(catalog, commit)


def close(catalog: TopicCatalog, commit: GroupCommit) -> None:
    catalog.close()
    commit.close()


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
    assert store.fetch("g3", "orders", 0) is None
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
