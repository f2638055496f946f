"""bench/broker_consume.py's load: its settings, the log written to the one partition (records,
offsets, stored bytes), filling a broker's partition with it through kayak's protocol layer,
and the same bytes in one plain file for the machine limit."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka_peer import KAFKA, KAYAK
from kafka_peer import start_broker as start_named_broker
from peers import BrokerProcess, MiB
from protocol_clients import PipelinedClient, create_topic, high_watermark, run_async

from kayak.protocol.message import Message
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch

TOPIC = "consume"
PRODUCE_VERSION = 9
FILL_IN_FLIGHT = 8
DISTINCT_BATCHES = 16
LIMIT = "machine limit (sendfile -> loopback -> recv_into)"
CONFLUENT, PERF = "confluent-kafka", "ConsumerPerformance"


@dataclass(frozen=True)
class Settings:
    size: int
    value_size: int
    batch_records: int
    fetch_bytes: int
    depth: int
    runs: int
    brokers: tuple[str, ...]
    perf: bool  # ConsumerPerformance rows
    data_root: Path
    timeout: float

    def rows(self) -> list[str]:
        others = [b for b in self.brokers if b != KAYAK]
        rows = [LIMIT, *(f"{CONFLUENT} -> {b}" for b in self.brokers)]
        if self.perf:
            rows += [f"{PERF} -> {b}" for b in self.brokers if b in (KAYAK, KAFKA)]
        if KAYAK in self.brokers:
            rows += [
                f"kayak loop, depth 1 -> {KAYAK}",
                f"kayak loop, depth {self.depth} -> {KAYAK}",
            ]
        rows += [f"kayak loop, depth {self.depth} -> {b}" for b in others]
        return rows


@dataclass
class Log:
    """What was written to a broker's partition: records, offsets and stored bytes."""

    batches: list[bytes]
    count: int  # batches written
    records: int = 0
    log_bytes: int = 0

    def stream(self) -> Iterator[bytes]:
        return itertools.islice(itertools.cycle(self.batches), self.count)


# -- filling a partition -------------------------------------------------------------------


def make_log(settings: Settings) -> Log:
    values = [os.urandom(settings.value_size) for _ in range(settings.batch_records)]
    batches = []
    # Timestamps of now: older ones would be past Kafka's retention.ms (7 days), and its
    # retention check (every 5 minutes) would delete the log under the readers.
    now_ms = int(time.time() * 1000)
    for i in range(DISTINCT_BATCHES):
        rotated = values[i:] + values[:i]
        batches.append(build_record_batch(rotated, timestamp=now_ms + i))
    count = max(1, -(-settings.size // len(batches[0])))
    log = Log(batches, count, records=count * settings.batch_records)
    log.log_bytes = sum(len(b) for b in log.stream())
    return log


async def fill(bootstrap: str, log: Log) -> None:
    """Produce every batch (acks=1), a few requests in flight."""
    client = await PipelinedClient.connect(bootstrap)
    in_flight: set[asyncio.Future[Message]] = set()
    for batch in log.stream():
        data = TopicProduceData(name=TOPIC, partition_data=[PartitionProduceData(0, batch)])
        request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[data])
        in_flight.add(client.request(request, PRODUCE_VERSION))
        if len(in_flight) >= FILL_IN_FLIGHT:
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            _check_produced(done)
    if in_flight:
        done, _ = await asyncio.wait(in_flight)
        _check_produced(done)
    await client.close()


def _check_produced(done: set[asyncio.Future[Message]]) -> None:
    for future in done:
        response = future.result()
        assert isinstance(response, ProduceResponse)
        result = response.responses[0].partition_responses[0]
        if result.error_code:
            raise RuntimeError(f"fill failed: error {result.error_code} {result.error_message}")


def start_filled(name: str, settings: Settings, log: Log) -> BrokerProcess:
    broker = start_named_broker(name, settings.data_root)
    try:
        create_topic(broker.bootstrap, TOPIC)
        started = time.perf_counter()
        run_async(fill(broker.bootstrap, log))
        elapsed = time.perf_counter() - started
        end = high_watermark(broker.bootstrap, TOPIC)
        if end != log.records:
            raise RuntimeError(f"{name} holds {end} records, expected {log.records}")
        print(
            f"filled {broker.name}: {log.records:,} records, {log.log_bytes / MiB:,.0f} MiB "
            f"in {elapsed:.1f} s ({log.log_bytes / MiB / elapsed:,.0f} MiB/s)",
            flush=True,
        )
    except BaseException:
        broker.stop()
        raise
    return broker


def write_limit_file(log: Log, directory: Path) -> Path:
    """The partition's bytes in one plain file (left in the page cache, like the brokers')."""
    path = directory / "partition.bin"
    with open(path, "wb") as file:
        for batch in log.stream():
            file.write(batch)
    return path
