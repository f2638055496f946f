"""Clients over kayak's sans-I/O protocol layer, for the broker benchmarks (not one itself).

* :class:`BlockingClient`: one request at a time, for set-up and checks (create a topic, ask
  for the log end offset or the high watermark), never timed;
* :class:`PipelinedClient`: many requests in flight on one asyncio connection;
* :func:`run_async`: a coroutine on uvloop, as kayak's broker runs.

Every address is on 127.0.0.1; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kayak.errors import ErrorCode
from kayak.protocol import ClientConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreateTopicsRequest,
)
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse
from kayak.protocol.messages.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from kayak.protocol.messages.fetch_response import FetchResponse
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.list_offsets_response import ListOffsetsResponse

LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset

T = TypeVar("T")


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


class BlockingClient:
    """One request at a time on a blocking socket (set-up and checks, never timed)."""

    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap), timeout=timeout)
        self.protocol = ClientConnection(client_id="kayak-bench")

    def request(self, message: Message, version: int) -> Message:
        _, frame = self.protocol.send_request(message, version)
        self.sock.sendall(frame)
        while (event := self.protocol.next_event()) is None:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Create ``name`` (one replica); an existing topic is fine."""
    request = CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=30_000,
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 5)
    assert isinstance(response, CreateTopicsResponse)
    for result in response.topics:
        if result.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"create topic {name}: error {result.error_code}")
    wait_for_leader(bootstrap, name)


def wait_for_leader(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Until ListOffsets on partition 0 succeeds (some brokers create topics lazily)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            end_offset(bootstrap, topic)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's log end offset (ListOffsets, latest)."""
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsPartition(partition_index=partition, timestamp=LATEST_TIMESTAMP)
                ],
            )
        ],
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 5)
    assert isinstance(response, ListOffsetsResponse)
    result = response.topics[0].partitions[0]
    if result.error_code:
        raise RuntimeError(f"ListOffsets {topic}-{partition}: error {result.error_code}")
    return int(result.offset)


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's high watermark, from a one-byte Fetch.

    Used to check what a broker holds: Tansu 0.6's ListOffsets (latest) answers the last
    batch's base offset + 1 rather than the log end offset. Tansu also answers a Fetch with
    ``max_wait_ms=0`` with no partitions at all, hence the wait.
    """
    fetch_partition = FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1)
    request = FetchRequest(
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1,
        topics=[FetchTopic(topic=topic, partitions=[fetch_partition])],
    )
    with BlockingClient(bootstrap) as client:
        response = client.request(request, 12)
    assert isinstance(response, FetchResponse)
    if not response.responses:
        raise RuntimeError(f"Fetch {topic}-{partition}: empty response")
    data = response.responses[0].partitions[0]
    if data.error_code:
        raise RuntimeError(f"Fetch {topic}-{partition}: error {data.error_code}")
    return int(data.high_watermark)


class PipelinedClient:
    """Many requests in flight on one asyncio connection; each ``request`` awaits its answer.

    Responses come back in request order (the protocol's rule), so a deque of futures pairs
    them; the sans-I/O ``ClientConnection`` checks the correlation ids.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._protocol = ClientConnection(client_id="kayak-bench")
        self._waiting: dict[int, asyncio.Future[Message]] = {}
        self._reading = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def connect(cls, bootstrap: str) -> PipelinedClient:
        reader, writer = await asyncio.open_connection(*split_bootstrap(bootstrap))
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def request(self, message: Message, version: int) -> asyncio.Future[Message]:
        correlation_id, frame = self._protocol.send_request(message, version)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        self._writer.write(frame)
        return future

    async def _read_responses(self) -> None:
        try:
            while data := await self._reader.read(1 << 20):
                self._protocol.receive_data(data)
                while (event := self._protocol.next_event()) is not None:
                    self._waiting.pop(event.correlation_id).set_result(event.response)
            raise ConnectionError("the broker closed the connection")
        except Exception as exc:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(exc)
            self._waiting.clear()

    async def close(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop (kayak's broker runs on it too), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
