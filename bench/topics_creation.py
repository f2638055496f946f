"""bench/topics.py's (a), (b) and (c): topics created one request each over several
connections, with a producer and a consumer timed beside the creation (and alone, idle); and
topics created all in one request."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from protocol_clients import PipelinedClient

from kayak.protocol.message import Message
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch, iter_records

CREATE_VERSION = 5
PRODUCE_VERSION = 9
FETCH_VERSION = 12
PROBE_TOPIC = "probe"
_STAMP = struct.Struct(">d")


# -- requests ------------------------------------------------------------------------------


def creatable(name: str, partitions: int = 1) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)


def check_created(response: Message, expected: int) -> None:
    assert isinstance(response, CreateTopicsResponse)
    failed = [(t.name, t.error_code, t.error_message) for t in response.topics if t.error_code]
    if failed or len(response.topics) != expected:
        raise RuntimeError(f"CreateTopics: {len(failed)} failed, first {failed[:3]}")


# -- (a) + (b): many creations, and a producer and consumer beside them ---------------------


async def create_one_per_request(bootstrap: str, names: list[str], connections: int) -> float:
    """Seconds to create ``names``, one request each, over ``connections`` connections."""
    clients = [await PipelinedClient.connect(bootstrap) for _ in range(connections)]
    queue = list(reversed(names))

    async def creator(client: PipelinedClient) -> None:
        while queue:
            name = queue.pop()
            request = CreateTopicsRequest(topics=[creatable(name)], timeout_ms=60_000)
            check_created(await client.request(request, CREATE_VERSION), 1)

    start = time.perf_counter()
    await asyncio.gather(*(creator(c) for c in clients))
    elapsed = time.perf_counter() - start
    for client in clients:
        await client.close()
    return elapsed


@dataclass
class Probe:
    """A producer sending one record every ``interval`` and a consumer reading them."""

    bootstrap: str
    interval: float
    round_trips: list[float] = field(default_factory=list)
    end_to_end: list[float] = field(default_factory=list)
    _running: bool = True

    async def run_until(self, done: asyncio.Future[Any]) -> None:
        producer = await PipelinedClient.connect(self.bootstrap)
        consumer = await PipelinedClient.connect(self.bootstrap)
        reading = asyncio.get_running_loop().create_task(self._consume(consumer))
        try:
            while not done.done():  # bounded by the creation it runs beside
                await self._produce_one(producer)
                await asyncio.sleep(self.interval)
        finally:
            self._running = False
            await asyncio.wait_for(reading, timeout=30)
            await producer.close()
            await consumer.close()

    async def _produce_one(self, client: PipelinedClient) -> None:
        batch = build_record_batch([_STAMP.pack(time.perf_counter()) + bytes(92)])
        data = TopicProduceData(name=PROBE_TOPIC, partition_data=[PartitionProduceData(0, batch)])
        request = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[data])
        start = time.perf_counter()
        response = await client.request(request, PRODUCE_VERSION)
        self.round_trips.append(time.perf_counter() - start)
        assert isinstance(response, ProduceResponse)
        result = response.responses[0].partition_responses[0]
        if result.error_code:
            raise RuntimeError(f"probe produce failed: error {result.error_code}")

    async def _consume(self, client: PipelinedClient) -> None:
        offset = await self._start_offset(client)
        while self._running:
            partition = FetchPartition(partition=0, fetch_offset=offset,
                                       partition_max_bytes=1 << 20)  # fmt: skip
            request = FetchRequest(
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=1 << 20,
                topics=[FetchTopic(topic=PROBE_TOPIC, partitions=[partition])],
            )
            response = await client.request(request, FETCH_VERSION)
            arrived = time.perf_counter()
            assert isinstance(response, FetchResponse)
            if not response.responses or not response.responses[0].partitions:
                continue
            records = response.responses[0].partitions[0].records
            for record in iter_records(bytes(records or b"")):
                if record.offset >= offset:
                    self.end_to_end.append(arrived - _STAMP.unpack_from(record.value or b"")[0])
                    offset = record.offset + 1

    async def _start_offset(self, client: PipelinedClient) -> int:
        """The high watermark now: only records produced from here on are timed."""
        partition = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)
        request = FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1,
            topics=[FetchTopic(topic=PROBE_TOPIC, partitions=[partition])],
        )
        response = await client.request(request, FETCH_VERSION)
        assert isinstance(response, FetchResponse)
        if not response.responses:
            return 0
        return int(response.responses[0].partitions[0].high_watermark)


async def probe_alone(bootstrap: str, seconds: float, interval: float) -> Probe:
    probe = Probe(bootstrap, interval)
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(seconds, done.set_result, None)
    await probe.run_until(done)
    return probe


async def create_beside_probe(
    bootstrap: str, names: list[str], connections: int, interval: float
) -> tuple[float, Probe]:
    probe = Probe(bootstrap, interval)
    loop = asyncio.get_running_loop()
    creation = loop.create_task(create_one_per_request(bootstrap, names, connections))
    await probe.run_until(creation)
    return await creation, probe


# -- (c) -----------------------------------------------------------------------------------


async def create_in_one_request(bootstrap: str, names: list[str], partitions: int = 1) -> float:
    client = await PipelinedClient.connect(bootstrap)
    request = CreateTopicsRequest(
        topics=[creatable(n, partitions) for n in names], timeout_ms=600_000
    )
    start = time.perf_counter()
    response = await client.request(request, CREATE_VERSION)
    elapsed = time.perf_counter() - start
    await client.close()
    check_created(response, len(names))
    return elapsed
