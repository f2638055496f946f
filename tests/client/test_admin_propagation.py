"""Creating topics or partitions returns once the broker's metadata shows them (and deleting
topics once it no longer does).

A KRaft Apache Kafka acknowledges CreateTopics and CreatePartitions when its controller has
recorded them; its broker learns of them from the metadata log a moment later, and until then
answers Metadata with UNKNOWN_TOPIC_OR_PARTITION (or the old partition count). Found against
Apache Kafka as a list_offsets or describe_configs right after create_topics failing with
"topic does not exist" now and then. ``LaggingBroker`` makes that moment long and certain:
its Metadata answers show a change only from the third request after it.
"""

from __future__ import annotations

import asyncio

import pytest

from kayak.client.admin import Admin, NewTopic
from kayak.protocol.connection import ServerConnection
from kayak.protocol.events import RequestReceived, UnsupportedRequest
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from kayak.protocol.messages.create_partitions_request import CreatePartitionsRequest
from kayak.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from kayak.protocol.messages.create_topics_request import CreateTopicsRequest
from kayak.protocol.messages.create_topics_response import (
    CreatableTopicResult,
    CreateTopicsResponse,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicsRequest
from kayak.protocol.messages.delete_topics_response import (
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

pytestmark = pytest.mark.timeout(30)

ADVERTISED = {
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_TOPICS: (0, 6),
}
LAG = 2  # Metadata answers that still show the old state after a change


class LaggingBroker:
    """One node whose metadata catches up with its controller ``LAG`` requests late."""

    def __init__(self) -> None:
        self.port = 0
        self.partitions: dict[str, int] = {}  # what the broker's metadata shows
        self._pending: dict[str, tuple[int, int]] = {}  # topic -> (partitions, answers left)
        self.metadata_requests = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> LaggingBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = ServerConnection()
        try:
            while data := await reader.read(1 << 16):
                server.receive_data(data)
                while (event := server.next_event()) is not None:
                    assert not isinstance(event, UnsupportedRequest), event
                    writer.write(self._answer(server, event))
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def _answer(self, server: ServerConnection, event: RequestReceived) -> bytes:
        request = event.request
        response: Message
        if isinstance(request, MetadataRequest):
            response = self._metadata(request)
        elif isinstance(request, CreateTopicsRequest):
            for topic in request.topics if not request.validate_only else ():
                self._pending[topic.name] = (topic.num_partitions, LAG)
            response = CreateTopicsResponse(
                topics=[
                    CreatableTopicResult(
                        name=t.name, num_partitions=t.num_partitions, replication_factor=1
                    )
                    for t in request.topics
                ]
            )
        elif isinstance(request, CreatePartitionsRequest):
            for grown in request.topics:
                self._pending[grown.name] = (grown.count, LAG)
            response = CreatePartitionsResponse(
                results=[CreatePartitionsTopicResult(name=t.name) for t in request.topics]
            )
        elif isinstance(request, DeleteTopicsRequest):
            names = [t.name for t in request.topics] or list(request.topic_names)
            for name in names:
                self._pending[name] = (0, LAG)  # 0 partitions: gone
            response = DeleteTopicsResponse(
                responses=[DeletableTopicResult(name=name) for name in names]
            )
        else:
            keys = [ApiVersion(k, low, high) for k, (low, high) in sorted(ADVERTISED.items())]
            response = ApiVersionsResponse(api_keys=keys)
        return bytes(
            server.send_response(event.correlation_id, event.api_key, event.api_version, response)
        )

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        self.metadata_requests += 1
        for name, (count, left) in list(self._pending.items()):
            if left == 0:
                self.partitions[name] = count
                if count == 0:
                    del self.partitions[name]
                del self._pending[name]
            else:
                self._pending[name] = (count, left - 1)
        names = [t.name for t in request.topics] if request.topics else list(self.partitions)
        topics = [self._topic(name) for name in names if name is not None]
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
            cluster_id="lagging",
            controller_id=0,
            topics=topics,
        )

    def _topic(self, name: str) -> MetadataResponseTopic:
        if name not in self.partitions:
            return MetadataResponseTopic(error_code=3, name=name)  # UNKNOWN_TOPIC_OR_PARTITION
        partitions = [
            MetadataResponsePartition(
                partition_index=p, leader_id=0, replica_nodes=[0], isr_nodes=[0]
            )
            for p in range(self.partitions[name])
        ]
        return MetadataResponseTopic(name=name, partitions=partitions)


def test_created_topics_and_partitions_are_in_metadata_when_the_call_returns() -> None:
    async def main() -> LaggingBroker:
        async with LaggingBroker() as broker:
            config = {"bootstrap.servers": f"127.0.0.1:{broker.port}", "retry.backoff.ms": 10}
            async with Admin(config) as admin:
                await admin.create_topics([NewTopic("fresh", 2, 1)])
                described = await admin.describe_topics(["fresh"])
                assert described["fresh"].partition_count == 2
                await admin.create_partitions({"fresh": 3})
                described = await admin.describe_topics(["fresh"])
                assert described["fresh"].partition_count == 3
                # validate_only changes nothing, so there is nothing to wait for.
                before = broker.metadata_requests
                await admin.create_topics([NewTopic("dry", 1, 1)], validate_only=True)
                assert broker.metadata_requests == before
                await admin.create_topics([NewTopic("brief", 1, 1)])
                await admin.delete_topics(["brief"])
                assert "brief" not in await admin.list_topics()
            return broker

    broker = asyncio.run(asyncio.wait_for(main(), 20))
    assert broker.partitions == {"fresh": 3}
