"""Every produced batch is checked record by record before it is stored.

A real broker (in-process, on the test's loop) and Produce requests over a socket: a batch
whose header contradicts its records (compressed or not, CRC recomputed so that only the
record checks can catch it) gets CORRUPT_MESSAGE, a null key on a compacted topic gets
INVALID_RECORD, and either way the log is exactly as it was: same log end, same records. Valid
batches of every codec are stored and read back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kayak.broker import Broker
from kayak.errors import ErrorCode
from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import Codec, build_record_batch, parse_batches
from tests.records.test_validation_fuzz import ForgedBatch, ForgedRecord

pytestmark = pytest.mark.timeout(60)


class Wire:
    """One Kafka connection on the running loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ClientConnection(client_id="validation-tests")

    async def request(self, message: Message, version: int) -> Any:
        _, frame = self.protocol.send_request(message, version)
        self.writer.write(frame)
        while (event := self.protocol.next_event()) is None:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    async def create(self, topic: str, **configs: str) -> None:
        wanted = CreatableTopic(
            topic, 1, 1, configs=[CreatableTopicConfig(k, v) for k, v in configs.items()]
        )
        response = await self.request(CreateTopicsRequest(topics=[wanted]), 5)
        assert response.topics[0].error_code == ErrorCode.NONE

    async def produce(self, topic: str, records: bytes) -> tuple[int, str | None]:
        data = TopicProduceData(topic, [PartitionProduceData(0, records)])
        request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data])
        result = (await self.request(request, 9)).responses[0].partition_responses[0]
        return result.error_code, result.error_message

    async def log_end(self, topic: str) -> int:
        wanted = ListOffsetsTopic(topic, [ListOffsetsPartition(0, timestamp=-1)])
        response = await self.request(ListOffsetsRequest(replica_id=-1, topics=[wanted]), 4)
        partition = response.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE
        return int(partition.offset)

    async def records(self, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of everything in the partition."""
        wanted = FetchTopic(
            topic=topic, partitions=[FetchPartition(0, partition_max_bytes=1 << 22)]
        )
        response = await self.request(FetchRequest(max_wait_ms=0, topics=[wanted]), 12)
        partition = response.responses[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE
        return [(r.offset, r.key, r.value) for b in parse_batches(partition.records) for r in b]


def run(tmp_path: Path, body: Callable[[Wire], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            try:
                await body(Wire(reader, writer))
            finally:
                writer.close()

    asyncio.run(main())


async def refused_and_nothing_changed(
    wire: Wire, topic: str, batch: bytes, code: ErrorCode, why: str
) -> None:
    before = (await wire.log_end(topic), await wire.records(topic))
    error, message = await wire.produce(topic, batch)
    assert error == code and message is not None and why in message, (error, message)
    assert (await wire.log_end(topic), await wire.records(topic)) == before


def test_gzip_batch_claiming_ten_records_but_holding_one_is_refused(tmp_path: Path) -> None:
    async def body(wire: Wire) -> None:
        await wire.create("counted")
        assert await wire.produce("counted", build_record_batch([b"first"])) == (0, None)
        lying = ForgedBatch((ForgedRecord(0, value=b"only"),), codec=Codec.GZIP, count=10)
        await refused_and_nothing_changed(
            wire, "counted", lying.encode(), ErrorCode.CORRUPT_MESSAGE, "record"
        )
        assert await wire.log_end("counted") == 1
        # The same lie uncompressed, and a batch holding more records than it says.
        plain = ForgedBatch((ForgedRecord(0),), count=10).encode()
        more = ForgedBatch((ForgedRecord(0), ForgedRecord(1)), codec=Codec.GZIP, count=1).encode()
        for batch in (plain, more):
            await refused_and_nothing_changed(
                wire, "counted", batch, ErrorCode.CORRUPT_MESSAGE, "record"
            )
        assert await wire.produce("counted", build_record_batch([b"second"])) == (0, None)
        assert [v for _, _, v in await wire.records("counted")] == [b"first", b"second"]

    run(tmp_path, body)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_offset_deltas_zero_and_seven_under_a_count_of_two_are_refused(
    tmp_path: Path, codec: Codec
) -> None:
    async def body(wire: Wire) -> None:
        await wire.create("gappy")
        assert await wire.produce("gappy", build_record_batch([b"a", b"b"])) == (0, None)
        lying = ForgedBatch((ForgedRecord(0), ForgedRecord(7)), codec=codec)
        await refused_and_nothing_changed(
            wire, "gappy", lying.encode(), ErrorCode.CORRUPT_MESSAGE, "offset delta 7"
        )
        assert await wire.log_end("gappy") == 2

    run(tmp_path, body)


def test_a_record_without_a_key_on_a_compacted_topic_is_an_invalid_record(
    tmp_path: Path,
) -> None:
    async def body(wire: Wire) -> None:
        await wire.create("compacted", **{"cleanup.policy": "compact"})
        await wire.create("deleting")
        keyed = build_record_batch([b"v1"], keys=[b"k1"])
        assert await wire.produce("compacted", keyed) == (0, None)
        for codec in (Codec.NONE, Codec.LZ4):
            missing = build_record_batch([b"v2", b"v3"], keys=[b"k2", None], codec=codec)
            await refused_and_nothing_changed(
                wire, "compacted", missing, ErrorCode.INVALID_RECORD, "without a key"
            )
            # The same batch is fine where nothing is compacted.
            assert (await wire.produce("deleting", missing))[0] == ErrorCode.NONE
        assert await wire.records("compacted") == [(0, b"k1", b"v1")]

    run(tmp_path, body)


def test_a_gzip_bomb_is_refused_and_not_stored(tmp_path: Path) -> None:
    async def body(wire: Wire) -> None:
        await wire.create("bombed")
        # 80 MiB of zeros in a few hundred KiB, under max.message.bytes.
        bomb = build_record_batch([bytes(80 << 20)], codec=Codec.GZIP, compression_level=1)
        assert len(bomb) < 1 << 20
        await refused_and_nothing_changed(wire, "bombed", bomb, ErrorCode.CORRUPT_MESSAGE, "limit")
        assert await wire.log_end("bombed") == 0

    run(tmp_path, body)


def test_valid_batches_of_every_codec_are_stored(tmp_path: Path) -> None:
    async def body(wire: Wire) -> None:
        await wire.create("codecs")
        await wire.create("codecs-compacted", **{"cleanup.policy": "compact,delete"})
        expected: list[tuple[bytes | None, bytes | None]] = []
        for codec in Codec:
            values: list[bytes | None] = [b"%s-%d" % (codec.name.encode(), i) for i in range(50)]
            values[3] = None  # a tombstone is fine, even on a compacted topic
            keys: list[bytes | None] = [b"k%d" % i for i in range(50)]
            timestamps = [1_700_000_000_000 + (-1) ** i * i for i in range(50)]  # out of order
            batch = build_record_batch(values, keys=keys, codec=codec, timestamp=timestamps)
            for topic in ("codecs", "codecs-compacted"):
                assert await wire.produce(topic, batch) == (0, None), (codec, topic)
            expected += zip(keys, values, strict=True)
        for topic in ("codecs", "codecs-compacted"):
            stored = await wire.records(topic)
            assert [o for o, _, _ in stored] == list(range(50 * len(Codec)))
            assert [(k, v) for _, k, v in stored] == expected

    run(tmp_path, body)
