"""One consumer, one partition: MiB/s of reading a whole partition: kayak, Apache Kafka, the limit.

One partition is filled with ``--size`` (default 2 GiB) of ~1 KiB records, in batches of
1,000 records (about 1 MB, librdkafka's default ``batch.size``), produced through kayak's
protocol layer; then, in the same run and taking turns:

* machine limit: ``os.sendfile`` of a file of the same size (in the page cache) into a
  loopback TCP socket, read with ``recv_into`` into one preallocated 4 MiB buffer. That is
  the most a broker that serves fetches with sendfile could hand a Python reader here;
* confluent-kafka (librdkafka) reading everything, against kayak's broker, Apache Kafka
  (bench/kafka_peer.py: single-node KRaft, default configuration, 1 GiB heap) and Tansu.
  Tuned for one big partition: ``fetch.max.bytes`` = ``max.partition.fetch.bytes`` =
  ``--fetch-bytes`` (8 MiB), ``queued.max.messages.kbytes`` = 1 GiB, ``queued.min.messages``
  = 1,000,000, ``fetch.wait.max.ms`` = 10, ``consume()`` batches of 10,000 and only
  ``len(msg)`` per message in Python;
* Kafka's own ``ConsumerPerformance`` (the Java consumer in its own JVM, subscribed with a
  fresh group; ``--fetch-size`` and ``fetch.max.bytes`` = ``--fetch-bytes``) against kayak
  and Apache Kafka; its time is the one it prints for fetching (the group join excluded);
* a pipelined fetch loop on kayak's sans-I/O protocol layer (uvloop ``BufferedProtocol``):
  up to ``--depth`` (4) Fetch v12 requests of ``--fetch-bytes`` in flight, each response
  received straight into a buffer of its announced size and decoded in place
  (``ClientConnection.receive_frame``: one copy, from the kernel, as for the limit); the next
  offset is learned from the batch headers (``scan_batches``), records are never decoded. With one
  partition the offsets of requests beyond the first are predicted from the offsets per
  response seen so far; a wrong guess is detected from the batch headers (a gap) and the
  loop re-requests from the first missing offset, so nothing is skipped or delivered twice.
  Also at ``--depth 1`` (one fetch in flight, like librdkafka and the Java consumer).

Every rate is the partition's log bytes (record batches as stored) over the wall time to
read them all. Target: kayak's pipelined loop against kayak's broker >= 50% of the limit.
Tansu runs with in-memory storage (not durable). Every broker gets ``kafka_peer.warm_up``'s
short produce-and-consume load before it is filled. Beside every rate: the broker's CPU per
record read (µs: utime + stime of the server process over the read, from /proc; for
ConsumerPerformance over the tool's whole life, its JVM start and group join included) and,
on kayak's rows, kayak / Kafka for the same reader (median of within-run ratios).

Run: ``python bench/broker_consume.py`` (default: 2 GiB, 5 runs, about 3 minutes),
``--quick`` (64 MiB, 1 run), ``--markdown`` for README; ``--brokers kayak,kafka,tansu``,
``--no-perf`` (no ConsumerPerformance rows); ``--size``, ``--runs``, ``--depth``,
``--fetch-bytes`` to change the load.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import confluent_kafka
from kafka_peer import KAFKA, KAYAK, TANSU, parse_brokers, parse_consumer_performance, run_tool
from kafka_peer import start_broker as start_named_broker
from peers import (
    BrokerProcess,
    MiB,
    PipelinedClient,
    Table,
    add_plot_option,
    create_topic,
    high_watermark,
    human,
    machine_notes,
    median,
    paired_ratio,
    percent,
    plot_table,
    run_async,
    scratch_dir,
    sendfile_loopback_rate,
    split_bootstrap,
    spread,
    times,
)
from usage import per_operation_us, server_cpu_seconds

from kayak.protocol import ClientConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch, scan_batches

TOPIC = "consume"
PRODUCE_VERSION = 9
FETCH_VERSION = 12  # flexible, topics by name: both brokers answer it
FILL_IN_FLIGHT = 8
DISTINCT_BATCHES = 16
RECV_BUFFER = 4 * MiB  # the machine limit's recv_into buffer
SMALL_READ = 64 * 1024  # the kayak loop's reads between frames
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


@dataclass
class Samples:
    rates: dict[str, list[float]] = field(default_factory=dict)  # MiB/s
    cpu_us: dict[str, list[float]] = field(default_factory=dict)  # broker CPU µs per record

    def add(self, row: str, bytes_per_second: float, cpu_us: float = float("nan")) -> None:
        self.rates.setdefault(row, []).append(bytes_per_second / MiB)
        self.cpu_us.setdefault(row, []).append(cpu_us)

    def median(self, row: str) -> float:
        return median(self.rates.get(row, []))


# -- filling a partition -------------------------------------------------------------------


def make_log(settings: Settings) -> Log:
    values = [os.urandom(settings.value_size) for _ in range(settings.batch_records)]
    batches = []
    for i in range(DISTINCT_BATCHES):
        rotated = values[i:] + values[:i]
        batches.append(build_record_batch(rotated, timestamp=1_700_000_000_000 + i))
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


# -- readers -------------------------------------------------------------------------------


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


# -- the runs ------------------------------------------------------------------------------


def measure_all(
    settings: Settings, log: Log, brokers: dict[str, BrokerProcess], limit_file: Path
) -> Samples:
    """Every reader once per run, in an order rotated between runs; the broker's CPU over
    each read."""
    readers: list[tuple[str, Callable[[], float], int | None]] = [
        (LIMIT, lambda: sendfile_loopback_rate(limit_file, RECV_BUFFER), None)
    ]
    for row in settings.rows()[1:]:
        client, _, target = row.rpartition(" -> ")
        read = _reader(client)
        broker = brokers[target]
        readers.append((row, functools.partial(read, broker.bootstrap, log, settings), broker.pid))
    samples = Samples()
    for run in range(settings.runs):
        print(f"run {run + 1}/{settings.runs}", flush=True)
        shift = run % len(readers)
        for row, measure, pid in readers[shift:] + readers[:shift]:
            cpu_before = server_cpu_seconds(pid) if pid else float("nan")
            rate = measure()
            cpu = server_cpu_seconds(pid) - cpu_before if pid else float("nan")
            cpu_us = per_operation_us(cpu, log.records)
            samples.add(row, rate, cpu_us)
            print(f"  {row:<52} {rate / MiB:>8,.0f} MiB/s, broker CPU {human(cpu_us)} µs/record",
                  flush=True)  # fmt: skip
    return samples


def _reader(client: str) -> Callable[[str, Log, Settings], float]:
    if client == CONFLUENT:
        return confluent_read
    if client == PERF:
        return perf_read
    return kayak_loop(_depth(client))


def _depth(client: str) -> int:
    return int(client.rsplit(" ", 1)[1])


def write_limit_file(log: Log, directory: Path) -> Path:
    """The partition's bytes in one plain file (left in the page cache, like the brokers')."""
    path = directory / "partition.bin"
    with open(path, "wb") as file:
        for batch in log.stream():
            file.write(batch)
    return path


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    """Medians; shares of the limit and kayak / Kafka as medians of within-run ratios."""
    limit = samples.rates.get(LIMIT, [])
    table = Table(["reader -> broker", "MiB/s", "runs (min-max)", "of machine limit",
                   "broker CPU µs/record", "kayak / Kafka"])  # fmt: skip
    for row in settings.rows():
        rates = samples.rates.get(row, [])
        client, _, target = row.rpartition(" -> ")
        versus = ""
        if target == KAYAK and f"{client} -> {KAFKA}" in settings.rows():
            versus = times(paired_ratio(rates, samples.rates.get(f"{client} -> {KAFKA}", [])))
        cpu = median(samples.cpu_us.get(row, []))
        table.add(row, median(rates), spread(rates), percent(paired_ratio(rates, limit)),
                  human(cpu) if cpu == cpu else "-", versus)  # fmt: skip
    return table


def report(
    settings: Settings, log: Log, samples: Samples, markdown: bool, plot: Path | None = None
) -> None:
    """Medians, and shares of the limit as medians of within-run ratios (noise cancels)."""
    limit = samples.rates.get(LIMIT, [])
    table = results_table(settings, samples)
    print()
    print(
        f"one partition, {log.log_bytes / MiB:,.0f} MiB of log ({log.records:,} records of "
        f"{settings.value_size} B in batches of {settings.batch_records}), read from offset 0 "
        f"to the end; {settings.fetch_bytes // MiB} MiB fetches; median of {settings.runs} runs"
    )
    print(machine_notes(settings.data_root))
    print()
    print(table.markdown() if markdown else table.text())
    plot_table(plot, "broker_consume", table)
    print()
    best = f"kayak loop, depth {settings.depth} -> kayak"
    share = paired_ratio(samples.rates.get(best, []), limit)
    verdict = "met" if share >= 0.5 else "MISSED"
    print(f"{best}: {share:.0%} of the machine limit (target >= 50%): {verdict}")
    for peer in (b for b in settings.brokers if b != KAYAK):
        for client in (CONFLUENT, PERF, f"kayak loop, depth {settings.depth}"):
            mine = samples.rates.get(f"{client} -> {KAYAK}", [])
            theirs = samples.rates.get(f"{client} -> {peer}", [])
            if mine and theirs:
                print(f"{client}: kayak / {peer} = {times(paired_ratio(mine, theirs))}")
    print(
        "all rates (MiB/s, run by run): "
        + "; ".join(
            f"{row}: {', '.join(human(r) for r in samples.rates.get(row, []))}"
            for row in settings.rows()
        )
    )


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB, one run: a smoke test")
    parser.add_argument("--size", type=float, default=2048, help="MiB to fill the partition with")
    parser.add_argument("--runs", type=int, default=5, help="runs to take the median of")
    parser.add_argument("--value-size", type=int, default=1000, help="bytes per record value")
    parser.add_argument("--batch-records", type=int, default=1000, help="records per batch")
    parser.add_argument("--fetch-bytes", type=int, default=8, help="MiB per fetch response")
    parser.add_argument("--depth", type=int, default=4, help="fetches in flight, kayak loop")
    parser.add_argument("--brokers", default="kayak,kafka,tansu", help="kayak,kafka,tansu")
    parser.add_argument("--no-tansu", action="store_true", help="skip the Tansu rows")
    parser.add_argument("--no-perf", action="store_true", help="skip ConsumerPerformance")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per reader, at most")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.runs = 64, 1
    settings = Settings(
        size=int(args.size * MiB),
        value_size=args.value_size,
        batch_records=args.batch_records,
        fetch_bytes=args.fetch_bytes * MiB,
        depth=args.depth,
        runs=args.runs,
        brokers=tuple(b for b in parse_brokers(args.brokers) if not (args.no_tansu and b == TANSU)),
        perf=not args.no_perf,
        data_root=args.data_root,
        timeout=args.timeout,
    )
    return settings, args.markdown, args.plot


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    log = make_log(settings)
    scratch = scratch_dir(settings.data_root, "consume-limit-")
    brokers: dict[str, BrokerProcess] = {}
    try:
        for name in settings.brokers:
            brokers[name] = start_filled(name, settings, log)
        samples = measure_all(settings, log, brokers, write_limit_file(log, scratch))
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report(settings, log, samples, markdown, plot)


if __name__ == "__main__":
    main(sys.argv[1:])
