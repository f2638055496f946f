"""The one storage layer (``LogWriter``): every writer appends, waits until its data is durable
and visible, and fetchers are woken only once there is something to read.

Real segment files and fsyncs in a temporary directory; the stores are the broker's own
(``__consumer_offsets``, ``_schemas``) on a real catalog.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import TOPIC as OFFSETS_TOPIC
from kayak.broker.consumer_offsets import ConsumerOffsetsTopic
from kayak.broker.log import FlushMode, LogConfig, LogWriter, PartitionLog
from kayak.broker.registry.store import TOPIC as SCHEMAS_TOPIC
from kayak.broker.registry.store import SchemaStore
from kayak.errors import KafkaStorageError
from kayak.protocol.records import build_record_batch, parse_batches
from kayak.registry.schema import AvroSchema, parse_avro


def open_catalog(data_dir: Path, mode: FlushMode) -> TopicCatalog:
    """A catalog as the broker opens one for ``mode`` (reads see only durable data when the
    mode syncs)."""
    data_dir.mkdir(exist_ok=True)
    catalog = TopicCatalog(data_dir, LogConfig(), visible_after_flush=mode.syncs)
    catalog.open(clean_shutdown=False)
    return catalog


def values_from(plog: PartitionLog, offset: int) -> list[bytes | None]:
    """The record values a fetch at ``offset`` gets right now."""
    found = plog.read(offset, 1 << 20)
    if found is None:
        return []
    return [r.value for batch in parse_batches(found.read()) for r in batch if r.offset >= offset]


def no_check(_schema: AvroSchema, _live: list[tuple[int, AvroSchema]]) -> list[str]:
    return []


def schema(name: str) -> AvroSchema:
    return parse_avro(json.dumps({"type": "record", "name": name, "fields": []}))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS, FlushMode.NEVER])
def test_a_long_poll_on_schemas_wakes_only_once_the_new_schema_is_readable(
    tmp_path: Path, mode: FlushMode
) -> None:
    catalog = open_catalog(tmp_path, mode)
    writer = LogWriter(mode)
    store = SchemaStore.open(catalog, writer)

    async def scenario() -> list[list[bytes | None]]:
        await store.register("first", schema("First"), no_check)  # creates _schemas
        partition = catalog.partition(SCHEMAS_TOPIC, 0)
        plog = partition.log
        end = plog.high_watermark
        seen_at_wake: list[list[bytes | None]] = []
        # What a long-polling Fetch at the end of _schemas would read the moment it is woken.
        waiter = partition.wait_for_data()
        waiter.add_done_callback(lambda _: seen_at_wake.append(values_from(plog, end)))
        await store.register("second", schema("Second"), no_check)
        await asyncio.wait_for(waiter, 10)
        await asyncio.sleep(0)  # the callback has run
        assert plog.durable_offset == plog.log_end_offset, "answered before it is on disk"
        return seen_at_wake

    try:
        seen = asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()
    assert len(seen) == 1
    assert len(seen[0]) == 1 and b'"subject":"second"' in (seen[0][0] or b""), (
        f"the long poll was woken with {seen[0]} to read: before the new schema was visible"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS, FlushMode.NEVER])
def test_an_offset_commit_is_answered_only_once_on_disk_and_readable(
    tmp_path: Path, mode: FlushMode
) -> None:
    """As the module says, whatever ``--flush`` says: under ``never`` too (it was answered
    with its record only in the page cache)."""
    catalog = open_catalog(tmp_path, mode)
    writer = LogWriter(mode)
    store = ConsumerOffsetsTopic(catalog, writer)
    plog = catalog.partition(OFFSETS_TOPIC, 0).log

    async def scenario() -> None:
        for offset in (10, 11, 12):
            await store.commit("g", "orders", 0, offset, -1, "", 1000)
            assert plog.durable_offset == plog.log_end_offset, (
                f"commit of {offset} answered at durable offset {plog.durable_offset}, "
                f"log end {plog.log_end_offset}"
            )
            assert plog.flush_point() is None, "something acknowledged is not synced"
            assert plog.high_watermark == plog.log_end_offset, "answered before it is visible"
            assert store.fetch("g", "orders", 0).offset == offset  # type: ignore[union-attr]

    try:
        asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()
    assert writer.syncs >= 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS])
def test_write_resolves_once_durable_and_visible_and_wakes_nobody_early(
    tmp_path: Path, mode: FlushMode
) -> None:
    catalog = open_catalog(tmp_path, mode)
    catalog.create("t", 1, {})
    partition = catalog.partition("t", 0)
    plog = partition.log
    writer = LogWriter(mode)
    woken_with: list[int] = []

    async def scenario() -> None:
        for i in range(20):
            waiter = partition.wait_for_data()
            waiter.add_done_callback(lambda _: woken_with.append(plog.high_watermark))
            result = await writer.write(plog, build_record_batch([b"v%d" % i]))
            assert plog.high_watermark > result.last_offset
            assert plog.durable_offset > result.last_offset
            assert values_from(plog, result.base_offset) == [b"v%d" % i]
            await asyncio.sleep(0)

    try:
        asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()
    assert woken_with == list(range(1, 21)), "a fetcher was woken before its data was visible"
    if mode is FlushMode.ALWAYS:
        assert writer.syncs == 20, "always: one fsync per write, not more"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS])
def test_an_append_nobody_waits_for_still_becomes_durable_and_visible(
    tmp_path: Path, mode: FlushMode
) -> None:
    """acks=0, or a waiter that went away: the append itself starts the sync."""
    catalog = open_catalog(tmp_path, mode)
    catalog.create("t", 1, {})
    partition = catalog.partition("t", 0)
    writer = LogWriter(mode)

    async def scenario() -> None:
        writer.append(partition.log, build_record_batch([b"fire-and-forget"]))
        assert partition.log.high_watermark == 0
        await asyncio.wait_for(partition.wait_for_data(), 10)
        assert values_from(partition.log, 0) == [b"fire-and-forget"]

    try:
        asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()


@pytest.mark.timeout(60)
def test_one_round_covers_every_partition_appended_in_the_same_turn(tmp_path: Path) -> None:
    """A Produce to several partitions waits for one fsync round, not one per partition."""
    catalog = open_catalog(tmp_path, FlushMode.GROUP)
    catalog.create("t", 4, {})
    plogs = [catalog.partition("t", i).log for i in range(4)]
    writer = LogWriter(FlushMode.GROUP)

    async def scenario() -> None:
        for plog in plogs:
            writer.append(plog, build_record_batch([b"x"]))
        await asyncio.gather(*(writer.durable(plog) for plog in plogs))

    try:
        asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()
    assert writer.syncs == 1
    assert all(plog.high_watermark == 1 for plog in plogs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS, FlushMode.NEVER])
def test_durable_raises_a_storage_error_once_the_partition_is_offline(
    tmp_path: Path, mode: FlushMode
) -> None:
    catalog = open_catalog(tmp_path, mode)
    catalog.create("t", 1, {})
    plog = catalog.partition("t", 0).log
    writer = LogWriter(mode)

    async def scenario() -> None:
        writer.append(plog, build_record_batch([b"x"]))
        plog.take_offline("a test took it offline")
        with pytest.raises(KafkaStorageError):
            await writer.durable(plog, on_disk=True)

    try:
        asyncio.run(scenario())
    finally:
        catalog.close()
        writer.close()
