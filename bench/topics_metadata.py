"""bench/topics.py's (d): Metadata for one topic of many partitions, timed one request at a
time (and the first one after the topic's creation)."""

from __future__ import annotations

import asyncio
import time

from protocol_clients import PipelinedClient, split_bootstrap
from topics_creation import CREATE_VERSION, check_created, creatable

from kayak.protocol import ClientConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.create_partitions_response import CreatePartitionsResponse
from kayak.protocol.messages.create_topics_request import CreateTopicsRequest
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse
from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.messages.metadata_response import MetadataResponse

CREATE_PARTITIONS_VERSION = 3
METADATA_VERSION = 12
POLICY_VIOLATION = 44
LARGEST_STEP = 5_000  # partitions added per request when a broker refuses one big operation


async def create_wide(bootstrap: str, name: str, partitions: int) -> None:
    """One topic of ``partitions`` partitions. Apache Kafka's controller refuses an operation
    of more than 10,000 metadata records (POLICY_VIOLATION, "excessively large batch"; a topic
    of 10,000 partitions is 10,001): then the topic is created with ``LARGEST_STEP``
    partitions and grown by CreatePartitions, ``LARGEST_STEP`` at a time. Only Metadata on
    the topic is timed, not its creation."""
    client = await PipelinedClient.connect(bootstrap)
    try:
        request = CreateTopicsRequest(topics=[creatable(name, partitions)], timeout_ms=600_000)
        response = await client.request(request, CREATE_VERSION)
        assert isinstance(response, CreateTopicsResponse)
        if response.topics[0].error_code != POLICY_VIOLATION:
            check_created(response, 1)
            return
        step = CreateTopicsRequest(topics=[creatable(name, LARGEST_STEP)], timeout_ms=600_000)
        check_created(await client.request(step, CREATE_VERSION), 1)
        count = LARGEST_STEP
        while count < partitions:
            count = min(partitions, count + LARGEST_STEP)
            grow = CreatePartitionsRequest(
                topics=[CreatePartitionsTopic(name=name, count=count, assignments=None)],
                timeout_ms=600_000,
            )
            grown = await client.request(grow, CREATE_PARTITIONS_VERSION)
            assert isinstance(grown, CreatePartitionsResponse)
            result = grown.results[0]
            if result.error_code:
                raise RuntimeError(f"CreatePartitions {name} to {count}: error "
                                   f"{result.error_code} {result.error_message}")  # fmt: skip
    finally:
        await client.close()


async def metadata_latencies(
    bootstrap: str, topic: str, partitions: int, count: int
) -> list[float]:
    """Seconds from sending each Metadata request to having its whole response frame. The
    response is decoded (and checked) after the clock stops: decoding 10,000 partitions in
    Python costs this client more than the broker takes to answer."""
    reader, writer = await asyncio.open_connection(*split_bootstrap(bootstrap))
    protocol = ClientConnection(client_id="kayak-bench")
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    latencies: list[float] = []
    try:
        for _ in range(count):
            _, frame = protocol.send_request(request, METADATA_VERSION)
            start = time.perf_counter()
            writer.write(frame)
            size = await reader.readexactly(4)
            body = await reader.readexactly(int.from_bytes(size, "big"))
            latencies.append(time.perf_counter() - start)
            protocol.receive_data(size + body)
            event = protocol.next_event()
            assert event is not None
            check_metadata(event.response, topic, partitions)
    finally:
        writer.close()
    return latencies


def check_metadata(response: Message, topic: str, partitions: int) -> None:
    assert isinstance(response, MetadataResponse)
    found = response.topics[0]
    if found.error_code or len(found.partitions) != partitions:
        raise RuntimeError(
            f"Metadata {topic}: error {found.error_code}, {len(found.partitions)} "
            f"of {partitions} partitions"
        )


async def first_metadata(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds of the first Metadata answer showing every partition of a new topic (kayak
    builds and encodes it then; later answers reuse it). Tansu creates topics
    asynchronously: asked again until it shows them all."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return (await metadata_latencies(bootstrap, topic, partitions, 1))[0]
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
