"""A damaged record in ``__consumer_offsets`` or ``_schemas`` never stops the broker starting.

The broker rebuilds committed offsets and the schema registry by replaying those topics. The
test stores real state through a running broker, stops it, and appends damage straight to
both topics' segment files as it could have got there (a client's produce before internal
topics refused them, an older kayak, another tool): records that are not the broker's own
(garbage keys and values, unknown key versions, JSON nested past Python's recursion limit), a
gzip bomb, a batch whose header claims ten records and holds one; CRCs all valid, so the log
layer keeps them. Valid records follow the damage. After a restart (with recovery, as after a
crash), every valid offset and schema is back, including those after the damage, and each
damaged record or batch was reported in exactly one warning naming partition and offset.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from kayak.broker import Broker
from kayak.broker.consumer_offsets import TOPIC as OFFSETS
from kayak.broker.consumer_offsets import encode_group_key, encode_key, encode_value
from kayak.broker.group.offsets import CommittedOffset
from kayak.broker.registry.store import TOPIC as SCHEMAS
from kayak.broker.registry.store import schema_key
from kayak.broker.server import clean_shutdown_marker
from kayak.errors import ErrorCode
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.records import Codec, build_record_batch
from kayak.protocol.records.scanner import assign_offsets, scan_batches
from kayak.serde import SchemaRegistryClient
from tests.broker.test_batch_validation import Wire
from tests.records.test_validation_fuzz import ForgedBatch, ForgedRecord

pytestmark = pytest.mark.timeout(60)

GROUP, TOPIC = "g", "orders"
BOMB_SIZE = 80 << 20  # past the 64 MiB a stored batch may decompress to


def commit_record(partition: int, offset: int) -> tuple[bytes, bytes]:
    return encode_key(GROUP, TOPIC, partition), encode_value(CommittedOffset(offset, -1, "", 1))


def append_to_segment(partition_dir: Path, batches: list[bytes]) -> list[int]:
    """Append ``batches`` to the partition's last segment file, bypassing the broker's checks
    as damage on disk does; returns the base offset each got."""
    segment = sorted(partition_dir.glob("*.log"))[-1]
    headers = list(scan_batches(segment.read_bytes()))
    next_offset = headers[-1].next_offset if headers else int(segment.stem)
    bases = []
    with open(segment, "ab") as out:
        for batch in batches:
            buf = bytearray(batch)
            bases.append(next_offset)
            next_offset = assign_offsets(buf, next_offset, validate=False)
            out.write(buf)
    return bases


def gzip_bomb(value: bytes, key: bytes) -> bytes:
    """A record whose value is ``value`` and 80 MiB of zeros, in a few hundred KiB."""
    return build_record_batch(
        [value + bytes(BOMB_SIZE)], keys=[key], codec=Codec.GZIP, compression_level=1
    )


def offset_damage() -> tuple[list[bytes], list[str]]:
    """Batches for ``__consumer_offsets`` and what each one's warning says."""
    key, _ = commit_record(1, 5)
    bomb_key, bomb_value = commit_record(3, 9)
    later_key, later_value = commit_record(2, 77)
    batches = [
        build_record_batch([b"x"], keys=[b"\xff"]),  # a key too short for its version
        build_record_batch([b"x"], keys=[b"\x00\x09" + key[2:]]),  # an unknown key version
        build_record_batch([b"\x00\x03\xff"], keys=[key]),  # a value that does not decode
        build_record_batch([b"x"], keys=[b"\x00\x01\x7f\xff"]),  # a string running past the end
        # A group's stored generation that does not decode: the group rejoins, nothing else.
        build_record_batch([b"\x00\x03\xff"], keys=[encode_group_key("broken")]),
        gzip_bomb(bomb_value, bomb_key),
        ForgedBatch((ForgedRecord(0, key=key),), codec=Codec.GZIP, count=10).encode(),
        build_record_batch([later_value], keys=[later_key]),  # valid, after the damage
    ]
    problems = ["not an offset commit"] * 5 + ["skipping damaged batch"] * 2
    return batches, problems


def schema_damage(schema_id: int) -> tuple[list[bytes], list[str]]:
    """Batches for ``_schemas`` and what each one's warning says."""
    later = json.dumps(
        {"subject": "later", "version": 1, "id": schema_id + 1, "schema": '"int"'}
    ).encode()
    batches = [
        build_record_batch([b"{}"], keys=[b"not json"]),
        build_record_batch([b"[" * 100_000], keys=[schema_key("orders-value", 2)]),  # too deep
        build_record_batch([b"{}"], keys=[b'{"keytype":"SOMETHING_ELSE"}']),
        gzip_bomb(b"", b"{}"),
        ForgedBatch((ForgedRecord(0, key=b"{}"),), codec=Codec.ZSTD, count=10).encode(),
        build_record_batch([later], keys=[schema_key("later", 1)]),  # valid, after the damage
    ]
    problems = ["not the registry's"] * 3 + ["skipping damaged batch"] * 2
    return batches, problems


def test_damaged_internal_records_are_skipped_and_the_broker_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"

    async def store_state() -> int:
        async with Broker(data, port=0, schema_registry_port=0) as broker:
            assert broker.schema_registry_url is not None
            registry = SchemaRegistryClient(broker.schema_registry_url)
            schema_id = await asyncio.to_thread(registry.register, "orders-value", '"string"')
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            wire = Wire(reader, writer)
            await wire.create(TOPIC)
            partitions = [OffsetCommitRequestPartition(0, 42, -1, -1, "m")]
            commit = OffsetCommitRequest(
                GROUP, topics=[OffsetCommitRequestTopic(TOPIC, partitions)]
            )
            response = await wire.request(commit, 8)
            assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
            writer.close()
        return schema_id

    schema_id = asyncio.run(store_state())
    offsets_batches, offsets_problems = offset_damage()
    schemas_batches, schemas_problems = schema_damage(schema_id)
    damaged_offsets = append_to_segment(data / f"{OFFSETS}-0", offsets_batches)[:-1]
    damaged_schemas = append_to_segment(data / f"{SCHEMAS}-0", schemas_batches)[:-1]
    clean_shutdown_marker(data, 0, 1).unlink()  # start as after a crash: recovery scans

    async def restart() -> None:
        async with Broker(data, port=0, schema_registry_port=0) as broker:
            assert broker.schema_registry_url is not None
            registry = SchemaRegistryClient(broker.schema_registry_url)
            latest = await asyncio.to_thread(registry.latest_version, "orders-value")
            assert (latest.schema_id, latest.version) == (schema_id, 1)
            later = await asyncio.to_thread(registry.latest_version, "later")
            assert later.schema_id == schema_id + 1
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            fetched = await Wire(reader, writer).request(OffsetFetchRequest(GROUP, None), 7)
            writer.close()
            committed = {
                (t.name, p.partition_index): p.committed_offset
                for t in fetched.topics
                for p in t.partitions
            }
            assert committed == {(TOPIC, 0): 42, (TOPIC, 2): 77}

    with caplog.at_level(logging.WARNING):
        asyncio.run(restart())

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for partition, offsets, problems in (
        (f"{OFFSETS}-0", damaged_offsets, offsets_problems),
        (f"{SCHEMAS}-0", damaged_schemas, schemas_problems),
    ):
        for offset, problem in zip(offsets, problems, strict=True):
            starts = (f"{partition} offset {offset}:", f"{partition}: skipping damaged batch at "
                      f"offset {offset} (")  # fmt: skip
            about = [w for w in warnings if w.startswith(starts)]
            assert len(about) == 1, (partition, offset, warnings)
            assert problem in about[0], about
    assert any("00000000000000000000.log byte" in w for w in warnings), warnings
