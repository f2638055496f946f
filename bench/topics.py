"""Topics at scale: creation rate, what creation costs other clients, Metadata, start-up.

In each run, kayak's broker (``python -m kayak broker``, fresh data directory, ``--flush
group``), Apache Kafka (bench/kafka_peer.py: single-node KRaft, its default configuration,
1 GiB heap) and Tansu (in-memory storage, not durable) take turns on the same load, each
started afresh and given ``kafka_peer.warm_up``'s short produce-and-consume load first:

(a) ``--topics`` (2,000) topics created one CreateTopics request each, spread over
    ``--connections`` (8) connections that each wait for an answer before the next request:
    total seconds and topics/s;
(b) meanwhile one producer (one 100 B record per acks=all Produce, every ``--probe-ms``) and
    one consumer (a long-polling Fetch loop) run beside the creation: the p99 of the
    producer's round trip (request → acknowledgement) and of end to end (produce → the
    consumer has the record), and the same p99s with nothing else going on (idle), to show
    what the creation costs them;
(c) one CreateTopics request holding ``--topics`` (2,000) topics;
(d) Metadata (v12) for one topic of ``--partitions`` (10,000) partitions: median and p99 ms
    of ``--metadata-requests`` (50) requests, one at a time, after the first one (also
    shown: the first after creation, which kayak builds and encodes; later ones reuse it);
(e) kayak only (Tansu keeps nothing on disk): the broker's start-up time (process start to
    "listening") on a data directory holding ``--partitions`` partitions and
    ``--segments`` (100,000) segments, after a clean shutdown, against an empty data directory
    in the same run. The directory is built once per invocation: the broker creates the
    topics, stops, and the bench writes the segment files (``.log`` with one batch,
    ``.index``, ``.timeindex``) in the layout the broker itself writes;
(f) kayak and Apache Kafka: a restart (clean stop, then start on the same data) holding what
    (a)-(d) created (``--partitions`` + 2 x ``--topics`` + 2 partitions): seconds from the
    process's start to serving ("listening" for kayak, "Kafka Server started" for Kafka);
(g) each broker's resident memory (from /proc) idle, just started, and holding (a)-(d)'s
    topics, and its CPU per topic created in (a) and per Metadata request in (d) (utime +
    stime of the server process over the measured interval).

Goals (issue 13): (a) under 5 s with (b) p99 under 50 ms; (d) under 50 ms; (e) under 10 s.

Run: ``python bench/topics.py`` (3 runs), ``--quick`` (1 run, smaller), ``--markdown`` for
README; ``--runs``, ``--topics``, ``--partitions``, ``--segments``,
``--brokers kayak,kafka,tansu``, ``--no-tansu``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_peer import KAFKA, KAYAK, TANSU, KafkaProcess, parse_brokers, start_broker
from peers import (
    HOST,
    REPO,
    BrokerProcess,
    MiB,
    PipelinedClient,
    Table,
    add_plot_option,
    create_topic,
    machine_notes,
    median,
    paired_ratio,
    plot_table,
    run_async,
    scratch_dir,
    split_bootstrap,
    spread,
    times,
)
from usage import per_operation_us, resident_bytes, server_cpu_seconds

from kayak.protocol import ClientConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.create_partitions_response import CreatePartitionsResponse
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kayak.protocol.messages.create_topics_response import CreateTopicsResponse
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse
from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.messages.metadata_response import MetadataResponse
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch, iter_records

CREATE_VERSION = 5
CREATE_PARTITIONS_VERSION = 3
METADATA_VERSION = 12
PRODUCE_VERSION = 9
FETCH_VERSION = 12
PROBE_TOPIC = "probe"
WIDE_TOPIC = "wide"
_LISTENING = re.compile(rb"listening on ([\d.]+):(\d+)")
_STAMP = struct.Struct(">d")


@dataclass(frozen=True)
class Settings:
    runs: int
    topics: int
    connections: int
    partitions: int
    segments: int
    metadata_requests: int
    probe_ms: float
    brokers: tuple[str, ...]
    data_root: Path

    @property
    def peers(self) -> tuple[str, ...]:
        return self.brokers


@dataclass
class Samples:
    """One sample per run and peer for each measure (name → peer → samples)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, measure: str, peer: str, value: float) -> None:
        self.values.setdefault(measure, {}).setdefault(peer, []).append(value)

    def of(self, measure: str, peer: str) -> list[float]:
        return self.values.get(measure, {}).get(peer, [])


# -- requests ------------------------------------------------------------------------------


def creatable(name: str, partitions: int = 1) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)


def check_created(response: Message, expected: int) -> None:
    assert isinstance(response, CreateTopicsResponse)
    failed = [(t.name, t.error_code, t.error_message) for t in response.topics if t.error_code]
    if failed or len(response.topics) != expected:
        raise RuntimeError(f"CreateTopics: {len(failed)} failed, first {failed[:3]}")


def percentile(samples: Sequence[float], fraction: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


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


# -- (c) and (d) ---------------------------------------------------------------------------


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


# -- one run for one peer ------------------------------------------------------------------


def measure_peer(peer: str, run: int, settings: Settings, samples: Samples) -> None:
    broker = start_broker(peer, settings.data_root)
    try:
        broker = measure_started(peer, broker, run, settings, samples)
    finally:
        broker.stop()


def measure_started(
    peer: str, broker: BrokerProcess, run: int, settings: Settings, samples: Samples
) -> BrokerProcess:
    """(a)-(d), (f) and (g) on a started broker; returns the broker running at the end (a
    restarted kayak is a new process)."""
    samples.add("rss_idle_mib", peer, resident_bytes(broker.pid) / MiB)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, PROBE_TOPIC)
    interval = settings.probe_ms / 1000
    idle = run_async(probe_alone(bootstrap, 2.0, interval))
    samples.add("idle_rtt_p99", peer, percentile(idle.round_trips, 0.99) * 1000)
    samples.add("idle_e2e_p99", peer, percentile(idle.end_to_end, 0.99) * 1000)

    single = [f"single-{run}-{i:05d}" for i in range(settings.topics)]
    cpu_before = server_cpu_seconds(broker.pid)
    seconds, probe = run_async(
        create_beside_probe(bootstrap, single, settings.connections, interval)
    )
    cpu_per_topic = per_operation_us(server_cpu_seconds(broker.pid) - cpu_before,
                                     settings.topics) / 1000  # fmt: skip
    samples.add("create_single_cpu_ms", peer, cpu_per_topic)
    samples.add("create_single_s", peer, seconds)
    samples.add("create_single_rate", peer, settings.topics / seconds)
    rtt99 = percentile(probe.round_trips, 0.99) * 1000
    e2e99 = percentile(probe.end_to_end, 0.99) * 1000
    samples.add("busy_rtt_p99", peer, rtt99)
    samples.add("busy_e2e_p99", peer, e2e99)
    print(
        f"  {peer:>6}: {settings.topics:,} topics one request each in {seconds:.2f}s "
        f"({settings.topics / seconds:,.0f}/s); beside it produce p99 {rtt99:.1f} ms, "
        f"end-to-end p99 {e2e99:.1f} ms ({len(probe.round_trips)} records; idle: "
        f"{percentile(idle.round_trips, 0.99) * 1000:.1f} / "
        f"{percentile(idle.end_to_end, 0.99) * 1000:.1f} ms); broker CPU "
        f"{cpu_per_topic:.2f} ms/topic (the probe's included)",
        flush=True,
    )

    batch = [f"batch-{run}-{i:05d}" for i in range(settings.topics)]
    seconds = run_async(create_in_one_request(bootstrap, batch))
    samples.add("create_batch_s", peer, seconds)
    print(f"  {peer:>6}: one CreateTopics of {settings.topics:,} topics: {seconds:.2f}s",
          flush=True)  # fmt: skip

    run_async(create_wide(bootstrap, WIDE_TOPIC, settings.partitions))
    first = run_async(first_metadata(bootstrap, WIDE_TOPIC, settings.partitions))
    samples.add("metadata_first", peer, first * 1000)
    cpu_before = server_cpu_seconds(broker.pid)
    latencies = run_async(
        metadata_latencies(bootstrap, WIDE_TOPIC, settings.partitions, settings.metadata_requests)
    )
    metadata_cpu = server_cpu_seconds(broker.pid) - cpu_before
    samples.add("metadata_cpu_ms", peer,
                per_operation_us(metadata_cpu, settings.metadata_requests) / 1000)  # fmt: skip
    samples.add("metadata_p50", peer, median(latencies) * 1000)
    samples.add("metadata_p99", peer, percentile(latencies, 0.99) * 1000)
    print(
        f"  {peer:>6}: Metadata of {settings.partitions:,} partitions: median "
        f"{median(latencies) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms "
        f"(the first, just after creation: {first * 1000:.1f} ms); broker CPU "
        f"{metadata_cpu / settings.metadata_requests * 1000:.2f} ms/request",
        flush=True,
    )
    samples.add("rss_loaded_mib", peer, resident_bytes(broker.pid) / MiB)
    if peer == TANSU:  # in memory: a restart starts empty
        return broker
    seconds, broker = restart(broker)
    samples.add("restart_s", peer, seconds)
    print(f"  {peer:>6}: restart holding {holding(settings):,} partitions: {seconds:.2f}s",
          flush=True)  # fmt: skip
    return broker


def holding(settings: Settings) -> int:
    """Partitions a broker holds after (a)-(d): the wide topic, 2 x topics, the probe and the
    warm-up topic (kafka_peer.warm_up)."""
    return settings.partitions + 2 * settings.topics + 2


def restart(broker: BrokerProcess) -> tuple[float, BrokerProcess]:
    """Stop cleanly keeping the data, start again on it: (seconds to serve, the broker)."""
    if isinstance(broker, KafkaProcess):
        return broker.restart(), broker
    root = broker.data_dir
    assert root is not None
    stop_keeping_data(broker)
    started = time.perf_counter()
    again = start_broker_on(root / "data")
    seconds = time.perf_counter() - started
    again.data_dir = root  # removed when it stops
    return seconds, again


# -- (e) start-up --------------------------------------------------------------------------


def build_big_data_dir(settings: Settings) -> Path:
    """A stopped kayak data directory holding the partitions and segments asked for."""
    root = scratch_dir(settings.data_root, "kayak-bench-startup-")
    data = root / "data"
    topics = max(1, settings.partitions // 100)
    per_topic = settings.partitions // topics
    per_partition = max(1, settings.segments // (topics * per_topic))
    started = time.perf_counter()
    broker = start_broker_on(data)
    try:
        names = [f"t{i:04d}" for i in range(topics)]
        run_async(create_in_one_request(broker.bootstrap, names, per_topic))
    finally:
        stop_keeping_data(broker)
    for name in names:
        for index in range(per_topic):
            write_segments(data / f"{name}-{index}", per_partition)
    print(f"  built {data}: {topics * per_topic:,} partitions, "
          f"{topics * per_topic * per_partition:,} segments in "
          f"{time.perf_counter() - started:.1f}s", flush=True)  # fmt: skip
    return root


def write_segments(directory: Path, count: int) -> None:
    """``count`` sealed segments of one 100 B record each (offsets 0..count-1), written as
    the broker writes them: ``.log`` (the batch), ``.index`` (relative offset, position) and
    ``.timeindex`` (timestamp, relative offset), big-endian."""
    directory.mkdir(exist_ok=True)
    for stale in directory.iterdir():
        stale.unlink()
    now = int(time.time() * 1000)
    for offset in range(count):
        stem = directory / f"{offset:020d}"
        batch = build_record_batch([bytes(100)], base_offset=offset, timestamp=now + offset)
        stem.with_suffix(".log").write_bytes(batch)
        stem.with_suffix(".index").write_bytes(struct.pack(">ii", 0, 0))
        stem.with_suffix(".timeindex").write_bytes(struct.pack(">qi", now + offset, 0))


def start_broker_on(data: Path) -> BrokerProcess:
    log_path = data.parent / f"broker-{uuid.uuid4().hex[:8]}.log"
    args = [
        sys.executable, "-m", "kayak", "broker", "--data-dir", str(data), "--host", HOST,
        "--port", "0", "--no-schema-registry",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kayak exited: {log_path.read_text()[-2000:]}")
        found = _LISTENING.findall(log_path.read_bytes())
        if found:
            return BrokerProcess(KAYAK, process, int(found[-1][1]), log_path)
        time.sleep(0.01)
    process.kill()
    raise RuntimeError("kayak did not start")


def stop_keeping_data(broker: BrokerProcess) -> None:
    broker.data_dir = None  # keep the data: the next start reads it
    broker.stop()


def start_up_seconds(data: Path) -> float:
    start = time.perf_counter()
    broker = start_broker_on(data)
    elapsed = time.perf_counter() - start
    stop_keeping_data(broker)
    return elapsed


def measure_start_up(big: Path, run: int, settings: Settings, samples: Samples) -> None:
    empty = scratch_dir(settings.data_root, "kayak-bench-empty-")
    try:
        baseline = start_up_seconds(empty / "data")  # creates it
        baseline = start_up_seconds(empty / "data")
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    try:
        seconds = start_up_seconds(big / "data")
    except RuntimeError as exc:  # e.g. EMFILE: one descriptor per segment file
        print(f"  {KAYAK:>6}: start-up failed: {str(exc).strip().splitlines()[-1]}", flush=True)
        seconds = float("nan")
    samples.add("startup_empty_s", KAYAK, baseline)
    samples.add("startup_big_s", KAYAK, seconds)
    print(f"  {KAYAK:>6}: start-up with {settings.partitions:,} partitions, "
          f"{settings.segments:,} segments: {seconds:.2f}s (empty data dir: {baseline:.2f}s)",
          flush=True)  # fmt: skip


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    peers = [p for p in (KAFKA, TANSU) if p in settings.brokers]
    columns = ["measure", "kayak", "runs (min-max)"]
    for peer in peers:
        columns += [_LABELS[peer], f"kayak / {_SHORT[peer]}"]
    table = Table(columns)

    def row(label: str, measure: str) -> None:
        mine = samples.of(measure, KAYAK)
        cells: list[object] = [label, median(mine) if mine else "-", spread(mine)]
        for peer in peers:
            theirs = samples.of(measure, peer)
            ratio = paired_ratio(mine, theirs) if theirs else float("nan")
            cells += [median(theirs) if theirs else "-", times(ratio)]
        table.add(*cells)

    n = f"{settings.topics:,}"
    row(f"(a) {n} topics, one request each: seconds", "create_single_s")
    row(f"(a) {n} topics, one request each: topics/s", "create_single_rate")
    row("(b) beside (a): produce round trip p99, ms", "busy_rtt_p99")
    row("(b) beside (a): produce → consume p99, ms", "busy_e2e_p99")
    row("(b) idle: produce round trip p99, ms", "idle_rtt_p99")
    row("(b) idle: produce → consume p99, ms", "idle_e2e_p99")
    row(f"(c) one CreateTopics of {n} topics: seconds", "create_batch_s")
    row(f"(d) Metadata, {settings.partitions:,} partitions: median ms", "metadata_p50")
    row(f"(d) Metadata, {settings.partitions:,} partitions: p99 ms", "metadata_p99")
    row("(d) the first Metadata after creating it: ms", "metadata_first")
    if samples.of("startup_big_s", KAYAK):
        big = f"{settings.partitions:,} partitions, {settings.segments:,} segments"
        row(f"(e) start-up, {big}: seconds", "startup_big_s")
        row("(e) start-up, empty data dir: seconds", "startup_empty_s")
    row(f"(f) restart holding {holding(settings):,} partitions: seconds", "restart_s")
    row("(g) broker CPU per topic created in (a), ms", "create_single_cpu_ms")
    row("(g) broker CPU per Metadata request in (d), ms", "metadata_cpu_ms")
    row("(g) resident memory, idle: MiB", "rss_idle_mib")
    row(f"(g) resident memory holding {holding(settings):,} partitions: MiB", "rss_loaded_mib")
    return table


_LABELS = {KAFKA: "Apache Kafka", TANSU: "Tansu (memory, not durable)"}
_SHORT = {KAFKA: "Kafka", TANSU: "Tansu"}


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    table = results_table(settings, samples)
    print()
    print(table.markdown() if markdown else table.text())
    print()
    print(
        f"{settings.runs} runs; (a) over {settings.connections} connections, one request in "
        f"flight each; (b) one record every {settings.probe_ms:g} ms. "
        f"{machine_notes(settings.data_root)}"
    )


# -- main ----------------------------------------------------------------------------------


def parse_args(
    argv: Sequence[str] | None = None,
) -> tuple[Settings, bool, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--topics", type=int, default=2_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--metadata-requests", type=int, default=50)
    parser.add_argument("--probe-ms", type=float, default=5.0)
    parser.add_argument("--brokers", default="kayak,kafka,tansu", help="kayak,kafka,tansu")
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--no-start-up", action="store_true", help="skip (e)")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"))
    parser.add_argument("--quick", action="store_true", help="1 run, 500 topics, 2,000 parts")
    parser.add_argument("--markdown", action="store_true")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.topics, args.partitions, args.segments = 1, 500, 2_000, 10_000
    brokers = tuple(b for b in parse_brokers(args.brokers) if not (args.no_tansu and b == TANSU))
    settings = Settings(
        runs=args.runs, topics=args.topics, connections=args.connections,
        partitions=args.partitions, segments=args.segments,
        metadata_requests=args.metadata_requests, probe_ms=args.probe_ms, brokers=brokers,
        data_root=args.data_root,
    )  # fmt: skip
    return settings, args.markdown, not args.no_start_up, args.plot


def main(argv: Sequence[str] | None = None) -> int:
    settings, markdown, start_up, plot = parse_args(argv)
    samples = Samples()
    big = build_big_data_dir(settings) if start_up else None
    try:
        for run in range(settings.runs):
            print(f"run {run + 1}/{settings.runs}", flush=True)
            peers = settings.peers
            shift = run % len(peers)
            for peer in peers[shift:] + peers[:shift]:
                measure_peer(peer, run, settings, samples)
            if big is not None:
                measure_start_up(big, run, settings, samples)
    finally:
        if big is not None:
            shutil.rmtree(big, ignore_errors=True)
    report(settings, samples, markdown)
    plot_table(plot, "topics", results_table(settings, samples))
    print(f"\n.venv/bin/python bench/topics.py {' '.join(sys.argv[1:])}".rstrip())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
