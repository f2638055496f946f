"""The idempotent producer through a faulty network (to kayak's broker and to Apache Kafka) and
a partition that moves between kayak's shards: every acknowledged record is stored exactly
once, in order.

``FaultyProxy`` sits between the producer and the broker and, for a bounded time, drops
connections (before a request goes through, or after, so that its outcome is unknown),
delays frames, and cuts responses off in the middle. It reads the frames going through so it
can rewrite Metadata answers: the producer must keep talking to the proxy, not to the broker
behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.client.producer import Producer, RecordMetadata
from kayak.protocol.headers import response_header_version
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.metadata_response import MetadataResponse
from kayak.protocol.messages.response_header import ResponseHeader
from tests.broker.conftest import BrokerProcess
from tests.client.test_producer_support import create_topic, read_back, run, unique
from tests.fixtures.jvm import ApacheKafka

pytestmark = pytest.mark.timeout(90)

_INT32 = 4


class FaultyProxy:
    """A TCP proxy to one broker that misbehaves at random until ``calm_after`` seconds."""

    def __init__(self, upstream: tuple[str, int], *, seed: int, calm_after: float) -> None:
        self.upstream = upstream
        self.port = 0
        self.rng = random.Random(seed)
        self.calm_after = calm_after
        self.faults: dict[str, int] = {"lost": 0, "drop": 0, "delay": 0, "cut": 0}
        self._started = 0.0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def misbehaving(self) -> bool:
        return time.monotonic() - self._started < self.calm_after

    async def __aenter__(self) -> FaultyProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def start_faults(self) -> None:
        self._started = time.monotonic()

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await asyncio.gather(
                self._requests(reader, up_writer, pending),
                self._responses(up_reader, writer, pending),
            )
        except (ConnectionError, OSError, asyncio.IncompleteReadError, _Dropped):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            up_writer.close()

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            api_key = int.from_bytes(frame[4:6], "big", signed=True)
            version = int.from_bytes(frame[6:8], "big", signed=True)
            correlation = int.from_bytes(frame[8:12], "big", signed=True)
            pending[correlation] = (api_key, version)
            await self._maybe_delay()
            if api_key == ApiKey.PRODUCE and self._roll("lost", 0.02):
                raise _Dropped  # the request never reaches the broker
            writer.write(frame)
            if api_key == ApiKey.PRODUCE and self._roll("drop", 0.03):
                # The request reached the broker; its answer never reaches the producer.
                await asyncio.sleep(0.01)
                raise _Dropped

    async def _responses(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            correlation = int.from_bytes(frame[4:8], "big", signed=True)
            api_key, version = pending.pop(correlation, (-1, -1))
            if api_key == ApiKey.METADATA:
                frame = self._rewrite_metadata(frame, version)
            await self._maybe_delay()
            if api_key == ApiKey.PRODUCE and self._roll("cut", 0.03):
                writer.write(frame[: len(frame) // 2])
                await writer.drain()
                raise _Dropped
            writer.write(frame)

    def _rewrite_metadata(self, frame: bytes, version: int) -> bytes:
        """Point every broker in a Metadata answer at this proxy."""
        header_version = response_header_version(ApiKey.METADATA, version)
        header, pos = ResponseHeader.read(frame, _INT32, header_version)
        response, _ = MetadataResponse.read(frame, pos, version)
        for broker in response.brokers:
            broker.host, broker.port = "127.0.0.1", self.port
        out = bytearray(_INT32)
        header.write(out, header_version)
        response.write(out, version)
        out[:_INT32] = (len(out) - _INT32).to_bytes(_INT32, "big")
        return bytes(out)

    def _roll(self, fault: str, chance: float) -> bool:
        if self.misbehaving() and self.rng.random() < chance:
            self.faults[fault] += 1
            return True
        return False

    async def _maybe_delay(self) -> None:
        if self._roll("delay", 0.05):
            await asyncio.sleep(self.rng.uniform(0.001, 0.05))


class _Dropped(Exception):
    """The proxy decided to break this connection."""


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    prefix = await reader.readexactly(_INT32)
    return prefix + await reader.readexactly(int.from_bytes(prefix, "big"))


@pytest.fixture(params=["kayak", "apache-kafka"])
def upstream(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """What the proxy forwards to: a kayak broker of the test's own, or the run's shared
    Apache Kafka (whose sequence checks are the reference for kayak's)."""
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        yield kafka.bootstrap_servers
        return
    broker = BrokerProcess(tmp_path / "data", extra_args=["--flush", "never"]).start()
    yield broker.bootstrap_servers
    broker.stop()


def _check_exactly_once_in_order(
    sent: dict[int, list[bytes]], acked: list[RecordMetadata], stored_values: dict[int, list[bytes]]
) -> None:
    for partition, values in sent.items():
        stored = stored_values.get(partition, [])
        assert len(stored) == len(set(stored)), f"partition {partition}: a record stored twice"
        position = {value: index for index, value in enumerate(values)}
        indexes = [position[v] for v in stored]
        assert indexes == sorted(indexes), f"partition {partition}: records out of order"
    acked_offsets = {(m.partition, m.offset) for m in acked}
    assert len(acked_offsets) == len(acked), "two records acknowledged at one offset"


def test_faults_between_producer_and_broker_lose_and_duplicate_nothing(upstream: str) -> None:
    """Three seconds of dropped connections, delays and answers cut in half, while an
    idempotent producer sends to two partitions with five requests in flight."""
    topic = create_topic(upstream, unique("faults"), 2)
    host, port = upstream.rsplit(":", 1)
    sent: dict[int, list[bytes]] = {0: [], 1: []}

    async def main() -> tuple[list[RecordMetadata], dict[str, int]]:
        async with FaultyProxy((host, int(port)), seed=7, calm_after=3.0) as proxy:
            producer = Producer(
                {"bootstrap.servers": proxy.bootstrap},
                linger_ms=2,
                batch_size=2048,
                request_timeout_ms=3_000,
                delivery_timeout_ms=60_000,
                retry_backoff_ms=20,
                retry_backoff_max_ms=200,
                reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200,
            )
            async with producer:
                proxy.start_faults()
                futures: list[asyncio.Future[RecordMetadata]] = []
                bulks = []
                i = 0
                while proxy.misbehaving():
                    partition = i % 2
                    if i % 50 == 0:
                        values = [b"p%d-%06d-bulk%d" % (partition, i, j) for j in range(20)]
                        sent[partition].extend(values)
                        bulks.append(await producer.send_batch(topic, values, partition=partition))
                    else:
                        value = b"p%d-%06d" % (partition, i)
                        sent[partition].append(value)
                        futures.append(await producer.send(topic, value, partition=partition))
                    i += 1
                    if i % 20 == 0:
                        await asyncio.sleep(0.002)
                await producer.flush(timeout=60)
                acked = [await f for f in futures]
                for bulk in bulks:
                    acked.extend(await bulk)
            return acked, proxy.faults

    acked, faults = run(main(), timeout=80)
    assert faults["lost"] + faults["drop"] + faults["cut"] >= 10, faults
    total = sum(len(v) for v in sent.values())
    assert len(acked) == total  # with retries and idempotence, everything gets through
    stored = read_back(upstream, topic, 2, total)
    by_partition: dict[int, list[bytes]] = {0: [], 1: []}
    for record in stored:
        assert record.value is not None
        by_partition[record.partition].append(record.value)
    _check_exactly_once_in_order(sent, acked, by_partition)
    for partition in (0, 1):
        assert by_partition[partition] == sent[partition]
    placed = {(s.partition, s.offset): s.value for s in stored}
    assert all(placed[(m.partition, m.offset)] is not None for m in acked)


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--shards", "2", "--flush", "never"]
    ).start()
    deadline = time.monotonic() + 30
    found: dict[str, list[object]] = {}
    while time.monotonic() < deadline and len(found) < 2:
        path = broker.data_dir / "shards.json"
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            found = json.loads(path.read_text())["shards"]
        time.sleep(0.05)
    assert len(found) == 2, broker.log_text()[-2000:]
    yield broker, [f"{found[str(n)][0]}:{found[str(n)][1]}" for n in range(2)]
    broker.stop()


@pytest.mark.kayak_only("moves a partition between kayak's shards with `kayak partitions move`")
def test_a_partition_moving_to_another_shard_mid_produce(
    shards: tuple[BrokerProcess, list[str]],
) -> None:
    """NOT_LEADER_OR_FOLLOWER from the old shard: the producer refreshes metadata, re-routes
    the partition's batches to the new leader, and stores each record once, in order."""
    broker, addresses = shards
    topic = create_topic(addresses[0], unique("moving"), 2)
    sent: list[bytes] = []

    async def main() -> tuple[list[RecordMetadata], set[int]]:
        async with Producer(
            {"bootstrap.servers": addresses[0]},
            linger_ms=2,
            batch_size=1024,
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
        ) as producer:
            futures: list[asyncio.Future[RecordMetadata]] = []
            leaders: set[int] = set()

            async def keep_sending(stop: asyncio.Event) -> None:
                i = 0
                while not stop.is_set():
                    value = b"m%06d" % i
                    sent.append(value)
                    futures.append(await producer.send(topic, value, partition=0))
                    i += 1
                    if i % 10 == 0:
                        await asyncio.sleep(0.001)
                        leaders.add(producer._cluster.leader(topic, 0))

            stop = asyncio.Event()
            sender = asyncio.ensure_future(keep_sending(stop))
            await asyncio.sleep(0.7)
            moved = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "kayak", "partitions", "move", topic, "0", "--to", "1",
                 "--data-dir", str(broker.data_dir)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert moved.returncode == 0, moved.stderr
            await asyncio.sleep(0.7)
            stop.set()
            await sender
            await producer.flush(timeout=30)
            return [await f for f in futures], leaders

    acked, leaders = run(main(), timeout=80)
    # -1: a metadata refresh during the handoff (LEADER_NOT_AVAILABLE, no leader), as Kafka
    # reports a partition between leaders; the producer must wait it out, not fail.
    assert leaders - {-1} == {0, 1}, "the producer saw the partition move"
    assert [m.offset for m in acked] == list(range(len(sent)))
    stored = read_back(addresses[1], topic, 2, len(sent))
    assert [s.value for s in stored if s.partition == 0] == sent
