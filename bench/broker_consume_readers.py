"""bench/broker_consume.py's readers, each reading the whole partition once and returning its
bytes/second: confluent-kafka, Kafka's ConsumerPerformance, and kayak's pipelined fetch loop
(up to ``depth`` fetches in flight, each response received straight into a buffer of its size
and decoded in place; the next offsets predicted, a wrong guess detected and re-requested)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import cast

import confluent_kafka
from broker_consume_load import PERF, TOPIC, Log, Settings
from kafka_peer import parse_consumer_performance, run_tool
from peers import MiB
from protocol_clients import run_async, split_bootstrap

from kayak.protocol import ClientConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse
from kayak.protocol.records import scan_batches

FETCH_VERSION = 12  # flexible, topics by name: both brokers answer it
SMALL_READ = 64 * 1024  # the kayak loop's reads between frames


# -- readers -------------------------------------------------------------------------------


def perf_read(bootstrap: str, log: Log, settings: Settings) -> float:
    """Bytes/second of ConsumerPerformance reading every record (its fetch time: after the
    group join), with a fresh group that starts from the earliest offset."""
    args = [
        "--bootstrap-server", bootstrap, "--topic", TOPIC, "--num-records", str(log.records),
        "--group", f"bench-{uuid.uuid4()}", "--fetch-size", str(settings.fetch_bytes),
        "--timeout", str(int(settings.timeout * 1000)), "--hide-header",
        "--reporting-interval", str(int(settings.timeout * 1000)),
        "--command-property", f"fetch.max.bytes={settings.fetch_bytes}",
    ]  # fmt: skip
    done = run_tool("kafka-consumer-perf-test", args, None, timeout=settings.timeout + 120)
    summary = parse_consumer_performance(done.stdout)
    if summary.records < log.records:
        raise RuntimeError(f"{PERF} read {summary.records} of {log.records} records")
    return log.log_bytes / summary.fetch_seconds


def confluent_read(bootstrap: str, log: Log, settings: Settings) -> float:
    """Bytes/second for librdkafka to hand every record of the partition to Python."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": settings.fetch_bytes,
            "max.partition.fetch.bytes": settings.fetch_bytes,
            "receive.message.max.bytes": settings.fetch_bytes + MiB,
            "queued.max.messages.kbytes": 1024 * 1024,
            "queued.min.messages": 1_000_000,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        received = 0
        started = time.perf_counter()
        deadline = started + settings.timeout
        while received < log.records and time.perf_counter() < deadline:
            # consume() waits for all num_messages (or the timeout): never ask past the end.
            wanted = min(10_000, log.records - received)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error():
                    raise RuntimeError(f"consume failed: {message.error()}")
                received += 1
                len(message)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if received != log.records:
        raise RuntimeError(f"confluent-kafka read {received} of {log.records} records")
    return log.log_bytes / elapsed


class FrameReader(asyncio.BufferedProtocol):
    """Receives each size-prefixed frame straight into one reused buffer of the announced size
    (one copy, from the kernel), then hands a view of it to :meth:`frame_received`."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self.transport: asyncio.Transport | None = None
        self._scratch = memoryview(bytearray(SMALL_READ))  # reads between frames
        self._prefix = bytearray()
        self._frame = memoryview(bytearray(0))  # grows to the largest frame seen
        self._size = -1  # size of the frame being filled; -1 between frames
        self._filled = 0

    def frame_received(self, frame: memoryview) -> None:
        raise NotImplementedError

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._size >= 0:
            return self._frame[self._filled : self._size]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._size < 0:
            self._split(self._scratch[:nbytes])
            return
        self._filled += nbytes
        if self._filled == self._size:
            self._complete()

    def _split(self, data: memoryview) -> None:
        """Bytes read between frames: size prefixes, small whole frames, a big frame's start."""
        pos = 0
        while pos < len(data):  # every pass consumes bytes or completes a frame
            if self._size < 0:
                take = min(4 - len(self._prefix), len(data) - pos)
                self._prefix += data[pos : pos + take]
                pos += take
                if len(self._prefix) < 4:
                    return
                self._start_frame(int.from_bytes(self._prefix, "big"))
            take = min(self._size - self._filled, len(data) - pos)
            self._frame[self._filled : self._filled + take] = data[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == self._size:
                self._complete()

    def _start_frame(self, size: int) -> None:
        if not 0 <= size <= self.max_frame_size:
            raise ConnectionError(f"frame of {size} bytes (limit {self.max_frame_size})")
        self._prefix.clear()
        if len(self._frame) < size:
            self._frame = memoryview(bytearray(size))
        self._size, self._filled = size, 0

    def _complete(self) -> None:
        frame, self._size = self._frame[: self._size], -1
        self.frame_received(frame)


class PipelinedFetch(FrameReader):
    """Reads one partition from offset 0 to ``end`` with up to ``depth`` fetches in flight."""

    def __init__(self, end: int, settings: Settings, depth: int, done: asyncio.Future[int]):
        super().__init__(settings.fetch_bytes + MiB)
        self.end = end
        self.depth = depth
        self.fetch_bytes = settings.fetch_bytes
        self.done = done
        self.protocol = ClientConnection("kayak-bench")
        self.next_offset = 0  # first offset not yet delivered
        self.frontier: int | None = 0  # where the next request starts; None: wait and see
        self.span = 0  # offsets per response, learned from the last one
        self.in_flight = 0
        self.delivered = 0  # bytes of batches delivered, each batch once
        self.received = 0  # bytes of batches received, overlaps of wrong guesses included
        self.requests = 0

    # transport callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's quacks like one
        self._send_more()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            super().buffer_updated(nbytes)
            self._send_more()
        except Exception as exc:
            self._finish(exc)

    def frame_received(self, frame: memoryview) -> None:
        self.in_flight -= 1
        self._deliver(self.protocol.receive_frame(frame).response)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc or ConnectionError("the broker closed the connection"))

    # the loop

    def _send_more(self) -> None:
        if self.next_offset >= self.end:
            self._finish(None)
            return
        if not self.in_flight:
            self.frontier = self.next_offset  # no request out can cover what is missing
        limit = self.depth if self.span else 1
        while self.in_flight < limit and self.frontier is not None and self.frontier < self.end:
            self._fetch(self.frontier)
            self.frontier = self.frontier + self.span if self.span else None

    def _fetch(self, offset: int) -> None:
        partition = FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=self.fetch_bytes
        )
        request = FetchRequest(
            max_wait_ms=500,  # the data is there: kayak answers at once; Tansu needs > 0
            min_bytes=1,
            max_bytes=self.fetch_bytes,
            topics=[FetchTopic(topic=TOPIC, partitions=[partition])],
        )
        _, frame = self.protocol.send_request(request, FETCH_VERSION)
        assert self.transport is not None
        self.transport.write(frame)
        self.in_flight += 1
        self.requests += 1

    def _deliver(self, response: Message) -> None:
        """Take the batches that continue the partition; learn the offsets per response."""
        assert isinstance(response, FetchResponse)
        data = response.responses[0].partitions[0]
        if data.error_code:
            raise RuntimeError(f"fetch failed: error {data.error_code}")
        records = data.records
        if not isinstance(records, bytes | bytearray | memoryview):
            records = b""  # None: no records
        first = last = -1
        gap = False
        for header in scan_batches(records):
            self.received += header.size
            if first < 0:
                first = header.base_offset
            last = header.next_offset
            if gap or header.next_offset <= self.next_offset:
                continue  # a speculative request overlapped what we already have
            if header.base_offset > self.next_offset:
                gap = True  # guessed past where the previous response ended
                continue
            self.next_offset = header.next_offset
            self.delivered += header.size
        if first >= 0:
            self.span = last - first
        if gap or self.frontier is None or self.frontier < self.next_offset:
            self.frontier = self.next_offset

    def _finish(self, exc: BaseException | None) -> None:
        if self.done.done():
            return
        if exc is None:
            self.done.set_result(self.delivered)
        else:
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


async def _kayak_loop(bootstrap: str, log: Log, settings: Settings, depth: int) -> float:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    host, port = split_bootstrap(bootstrap)
    started = time.perf_counter()
    _, fetcher = await loop.create_connection(
        lambda: PipelinedFetch(log.records, settings, depth, done), host, port
    )
    delivered = await asyncio.wait_for(done, settings.timeout)
    elapsed = time.perf_counter() - started
    if delivered != log.log_bytes:
        raise RuntimeError(f"kayak loop read {delivered} of {log.log_bytes} bytes")
    wasted = fetcher.received - fetcher.delivered
    if wasted:
        print(
            f"    (depth {depth}: {wasted / fetcher.received:.1%} of fetched bytes were "
            f"overlaps of mispredicted offsets; {fetcher.requests} requests)"
        )
    return log.log_bytes / elapsed


def kayak_loop(depth: int) -> Callable[[str, Log, Settings], float]:
    def read(bootstrap: str, log: Log, settings: Settings) -> float:
        return run_async(_kayak_loop(bootstrap, log, settings, depth))

    return read
