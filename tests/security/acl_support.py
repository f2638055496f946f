"""Pieces the ACL and internal-topic tests share: an asyncio Kafka connection speaking through
kayak's sans-I/O client protocol, and request builders. Holds no tests."""

from __future__ import annotations

import asyncio
from typing import Any

from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.records import build_record_batch


class AsyncWire:
    """One Kafka connection on the running loop (to an in-process broker)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ClientConnection(client_id="acl-tests")

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


def produce(topic: str, records: bytes, partition: int = 0, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, records)])],
    )


def one_record(value: bytes = b"v") -> bytes:
    return build_record_batch([value], [b"k"])


def create_topic(name: str, partitions: int = 1) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(name, partitions, 1)], timeout_ms=5000)


def latest_offset(topic: str, partition: int = 0) -> ListOffsetsRequest:
    wanted = ListOffsetsPartition(partition, -1, -1)
    return ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(topic, [wanted])])


def offset_commit(group: str, topic: str, offsets: dict[int, int]) -> OffsetCommitRequest:
    partitions = [OffsetCommitRequestPartition(p, o, -1, -1, "") for p, o in offsets.items()]
    return OffsetCommitRequest(
        group, -1, "", None, -1, [OffsetCommitRequestTopic(topic, partitions)]
    )


def offset_fetch_all(group: str) -> OffsetFetchRequest:
    return OffsetFetchRequest(group, None)


def partition_errors(response: Any) -> set[int]:
    """Every partition's error code in a Produce/ListOffsets/OffsetCommit/... response."""
    topics = getattr(response, "responses", None) or getattr(response, "topics", None) or []
    found: set[int] = set()
    for topic in topics:
        parts = getattr(topic, "partition_responses", None) or getattr(topic, "partitions", [])
        found.update(p.error_code for p in parts)
    return found
