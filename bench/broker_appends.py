"""Durable appends and group commit: acks=all appends/second vs how many connections carry them.

128 producers (asyncio tasks) each send Produce requests (v9, acks=-1) holding ONE record with a
2 KiB value and await the answer before sending the next; the producers are spread over 1, 2,
4, ..., 128 connections (pipelined: many requests in flight per connection). That is the
fsync-per-request worst case: without group commit a broker that syncs before it acks pays
one fsync per request, and its throughput falls to the disk's fsync rate as the same load
spreads over more connections (background: "Kafka brokers don't implement group commit").

Peers, all in the same run, taking turns inside each run so that noise hits them alike:

* kayak's broker (a subprocess on a fresh data directory) with ``--flush group`` (fsync
  before ack, shared by every append waiting for it), ``--flush always`` (one fsync per
  request) and ``--flush never`` (page cache only, Kafka's default);
* the machine's own limits: a tight ``write(2 KiB) + fdatasync`` loop on the same filesystem,
  and an *empty server* (``bench/empty_server.py``: the broker's framing on uvloop answering
  every request with a canned response, no decoding, storage or fsync), whose CPU per request
  is the floor that the event loop and socket system calls set at each connection count;
* Apache Kafka (bench/kafka_peer.py: single-node KRaft, default configuration, 1 GiB heap),
  with its default (acknowledged appends are in the page cache; the OS writes them later) and
  with ``log.flush.interval.messages=1`` (an fsync after every append, before the answer:
  Kafka's only way to sync before it acknowledges); the same client, on the same load;
* optionally (``--tansu``) Tansu with in-memory storage: not durable, for context only.

Measured at every (peer, connection count) point, over the measured second(s) only:
acknowledged appends/s; each request's round trip (``time.perf_counter`` from handing the
request to the connection to its answer; those answered inside the measured window), as p50 and
p99 in ms; and broker CPU per request (utime + stime of its server process, from /proc).

Targets: group at 128 connections >= 0.8x group at 1 connection, and >= 10x always; broker
CPU per request <= 20 us (printed beside the empty server's floor at the same point); issue 28:
group >= 1.0x Kafka's default throughput with p99 <= Kafka's (p99 group / Kafka <= 1.0), at 1
and 128 connections. Cells are medians over runs; kayak / Kafka ratios (throughput and p99)
are medians of within-run ratios. Round trips include the client's time in this process (it
shares the machine with the broker), alike for every peer; with 128 producers each awaiting its
answer, the mean round trip is 128 / (appends/s), so p99 shows the tail beyond that. Every
broker (not the empty server) gets ``kafka_peer.warm_up``'s short produce-and-consume load
when it starts.
The client is kayak's sans-I/O protocol layer over asyncio streams on uvloop, in this process.

Run: ``python bench/broker_appends.py`` (default: 5 runs x 8 connection counts x 3 modes,
1 s per point), ``--quick`` for a smoke test, ``--markdown`` for README; ``--connections
1,128`` for the two ends only; ``--brokers kayak,kafka,tansu`` (kayak: its three modes and the
empty server; kafka: both of Kafka's settings).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka_peer import (
    FLUSH_EVERY_MESSAGE,
    KAFKA,
    KAYAK,
    TANSU,
    parse_brokers,
    start_apache_kafka,
    warm_up,
)
from machine_limits import fdatasync_rate, machine_notes
from peers import BrokerProcess, start_empty_server, start_kayak, start_tansu
from protocol_clients import PipelinedClient, create_topic, high_watermark, run_async
from result_tables import (
    Table,
    add_plot_option,
    human,
    median,
    paired_ratio,
    plot_table,
    spread,
    times,
)
from usage import server_cpu_seconds

from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch

TOPIC = "appends"
PRODUCE_VERSION = 9
MODES = ("group", "always", "never")
TANSU_PEER = "tansu"
EMPTY = "empty"
KAFKA_PEER, KAFKA_FSYNC = "kafka", "kafka-fsync"
KAFKA_MODES = (KAFKA_PEER, KAFKA_FSYNC)
# How the latency columns name each peer (the rate columns' names).
LATENCY_NAMES = {
    "group": "group",
    "always": "always",
    "never": "never",
    KAFKA_PEER: "Apache Kafka",
    KAFKA_FSYNC: "Apache Kafka, flush every message",
    TANSU_PEER: "Tansu",
}


@dataclass(frozen=True)
class Settings:
    producers: int
    connections: tuple[int, ...]
    value_size: int
    warmup: float
    seconds: float
    runs: int
    brokers: tuple[str, ...]
    data_root: Path

    @property
    def peers(self) -> tuple[str, ...]:
        peers: tuple[str, ...] = (*MODES, EMPTY) if KAYAK in self.brokers else ()
        if KAFKA in self.brokers:
            peers += KAFKA_MODES
        return (*peers, TANSU_PEER) if TANSU in self.brokers else peers

    @property
    def kafka(self) -> bool:
        return KAFKA in self.brokers


@dataclass(frozen=True)
class Point:
    """One measured point: acknowledged appends/s, broker CPU (cores busy) and the round-trip
    percentiles (ms) of the requests answered in the measured window."""

    rate: float
    cores: float
    p50_ms: float
    p99_ms: float


def round_trip_percentiles(seconds: list[float]) -> tuple[float, float]:
    """p50 and p99 in ms of the round trips (NaN when too few were answered to tell)."""
    if len(seconds) < 2:
        return float("nan"), float("nan")
    cuts = statistics.quantiles(seconds, n=100)  # cuts[i]: the (i+1)th percentile
    return cuts[49] * 1e3, cuts[98] * 1e3


@dataclass
class Samples:
    """appends/second, broker CPU (cores busy) and round-trip p50/p99 (ms) per (peer,
    connections), one sample per run; plus the fdatasync limit."""

    rates: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    p50_ms: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    p99_ms: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    fdatasync: list[float] = field(default_factory=list)

    def add(self, peer: str, connections: int, point: Point) -> None:
        self.rates.setdefault((peer, connections), []).append(point.rate)
        self.cpu.setdefault((peer, connections), []).append(point.cores)
        self.p50_ms.setdefault((peer, connections), []).append(point.p50_ms)
        self.p99_ms.setdefault((peer, connections), []).append(point.p99_ms)

    def latency_cell(self, peer: str, connections: int) -> str:
        """``p50, p99`` (ms), each the median over runs."""
        p50 = median(self.p50_ms.get((peer, connections), []))
        p99 = median(self.p99_ms.get((peer, connections), []))
        return f"{human(p50)}, {human(p99)}"

    def median(self, peer: str, connections: int) -> float:
        return median(self.rates.get((peer, connections), []))

    def cpu_per_request(self, peer: str, connections: int) -> float:
        """Broker CPU microseconds per acknowledged request: the median over runs of each
        run's cores busy / requests per second."""
        rates = self.rates.get((peer, connections), [])
        cores = self.cpu.get((peer, connections), [])
        return median([c / r * 1e6 for c, r in zip(cores, rates, strict=True) if r])


# -- one measurement -----------------------------------------------------------------------


def produce_request(value_size: int) -> ProduceRequest:
    batch = build_record_batch([os.urandom(value_size)])
    data = TopicProduceData(name=TOPIC, partition_data=[PartitionProduceData(0, batch)])
    return ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[data])


def check(response: object) -> None:
    assert isinstance(response, ProduceResponse)
    result = response.responses[0].partition_responses[0]
    if result.error_code:
        raise RuntimeError(f"produce failed: error {result.error_code} {result.error_message}")


async def appends_per_second(broker: BrokerProcess, connections: int, settings: Settings) -> Point:
    """Steady-state acknowledged appends/second of ``settings.producers`` one-record producers
    spread round-robin over ``connections`` connections, the broker's CPU (cores busy), and
    the round trips of the requests answered inside the measured window."""
    bootstrap = broker.bootstrap
    clients = [await PipelinedClient.connect(bootstrap) for _ in range(connections)]
    request = produce_request(settings.value_size)
    done = [0]
    round_trips: list[float] = []  # seconds; appended to only while ``measuring[0]``
    measuring = [False]
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + settings.warmup + settings.seconds

    async def producer(client: PipelinedClient) -> None:
        while loop.time() < stop_at:  # bounded by the deadline
            sent = time.perf_counter()  # request() writes the frame before it returns
            check(await client.request(request, PRODUCE_VERSION))
            if measuring[0]:
                round_trips.append(time.perf_counter() - sent)
            done[0] += 1

    tasks = [
        loop.create_task(producer(clients[i % connections])) for i in range(settings.producers)
    ]
    await asyncio.sleep(settings.warmup)
    start_count, start, start_cpu = done[0], time.perf_counter(), server_cpu_seconds(broker.pid)
    measuring[0] = True
    await asyncio.sleep(settings.seconds)
    measuring[0] = False
    count, elapsed = done[0] - start_count, time.perf_counter() - start
    cores = (server_cpu_seconds(broker.pid) - start_cpu) / elapsed
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    for client in clients:
        await client.close()
    return Point(count / elapsed, cores, *round_trip_percentiles(round_trips))


# -- one run -------------------------------------------------------------------------------


def measure_peer(peer: str, settings: Settings, samples: Samples) -> None:
    broker: BrokerProcess
    if peer == TANSU_PEER:
        broker = start_tansu(settings.data_root)
    elif peer == KAFKA_PEER:
        broker = start_apache_kafka(settings.data_root)
    elif peer == KAFKA_FSYNC:
        broker = start_apache_kafka(settings.data_root, FLUSH_EVERY_MESSAGE, "Kafka (fsync)")
    elif peer == EMPTY:
        broker = start_empty_server(settings.data_root, TOPIC)
    else:
        broker = start_kayak(settings.data_root, peer)
    with broker:
        if peer != EMPTY:  # the empty server answers Produce only
            warm_up(broker)
            create_topic(broker.bootstrap, TOPIC)
        for connections in settings.connections:
            point = run_async(appends_per_second(broker, connections, settings))
            samples.add(peer, connections, point)
            rate, cores = point.rate, point.cores
            print(
                f"  {peer:>11} {connections:>4} connections: {rate:>9,.0f} appends/s, "
                f"p50 {point.p50_ms:.2f} p99 {point.p99_ms:.2f} ms, broker CPU {cores:.2f} "
                f"cores, {cores / rate * 1e6 if rate else 0:.0f} µs/request",
                flush=True,
            )
        if peer != EMPTY:
            appended = high_watermark(broker.bootstrap, TOPIC)
            print(f"  {peer:>11} log end offset after the run: {appended:,}", flush=True)


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    limit = fdatasync_rate(settings.data_root, settings.value_size, settings.seconds)
    samples.fdatasync.append(limit)
    print(f"  machine: {limit:,.0f} fdatasync/s", flush=True)
    # Rotate the order so that no peer always runs first (or last) in a run.
    peers = settings.peers
    shift = run % len(peers)
    for peer in peers[shift:] + peers[:shift]:
        measure_peer(peer, settings, samples)


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    kayak, kafka, tansu = KAYAK in settings.brokers, settings.kafka, TANSU in settings.brokers
    columns = ["connections"]
    columns += ["group", "always", "never"] if kayak else []
    columns += ["Apache Kafka", "Apache Kafka, flush every message"] if kafka else []
    columns += ["Tansu (memory, not durable)"] if tansu else []
    peers = [
        *(MODES if kayak else ()),
        *(KAFKA_MODES if kafka else ()),
        *((TANSU_PEER,) if tansu else ()),
    ]
    # Round trips beside the rates (after them, so the charts' patterns find the rates first).
    columns += [f"{LATENCY_NAMES[peer]} p50, p99 ms" for peer in peers]
    columns += ["empty server p50, p99 ms (floor)"] if kayak else []
    if kayak:
        columns += [
            "group / always",
            "group / group@1",
            "group / fdatasync",
            "group broker CPU",
            "broker CPU µs / request (group, never)",
            "empty server µs / request (floor)",
        ]
    if kayak and kafka:
        columns += [
            "group / Kafka",
            "group / Kafka, flush every message",
            "always / Kafka, flush every message",
            "p99 group / Kafka",
            "p99 group / Kafka, flush every message",
        ]
    if kafka:
        columns += ["Kafka broker CPU µs / request (default, flush every message)"]
    table = Table(columns)
    first = settings.connections[0]
    for connections in settings.connections:
        rates = {peer: samples.rates.get((peer, connections), []) for peer in settings.peers}
        p99 = {peer: samples.p99_ms.get((peer, connections), []) for peer in settings.peers}
        cells: list[object] = [str(connections)]
        cells += [samples.median(peer, connections) for peer in peers]
        cells += [samples.latency_cell(peer, connections) for peer in peers]
        cells += [samples.latency_cell(EMPTY, connections)] if kayak else []
        if kayak:
            cells += [
                times(paired_ratio(rates["group"], rates["always"])),
                times(paired_ratio(rates["group"], samples.rates.get(("group", first), []))),
                times(paired_ratio(rates["group"], samples.fdatasync)),
                f"{median(samples.cpu.get(('group', connections), [])):.2f} cores",
                f"{samples.cpu_per_request('group', connections):.0f}, "
                f"{samples.cpu_per_request('never', connections):.0f}",
                f"{samples.cpu_per_request(EMPTY, connections):.1f}",
            ]
        if kayak and kafka:
            cells += [
                times(paired_ratio(rates["group"], rates[KAFKA_PEER])),
                times(paired_ratio(rates["group"], rates[KAFKA_FSYNC])),
                times(paired_ratio(rates["always"], rates[KAFKA_FSYNC])),
                times(paired_ratio(p99["group"], p99[KAFKA_PEER])),
                times(paired_ratio(p99["group"], p99[KAFKA_FSYNC])),
            ]
        if kafka:
            cells.append(
                f"{samples.cpu_per_request(KAFKA_PEER, connections):.0f}, "
                f"{samples.cpu_per_request(KAFKA_FSYNC, connections):.0f}"
            )
        table.add(*cells)
    return table


def verdicts(settings: Settings, samples: Samples) -> list[str]:
    """The issue's targets, each as the median over runs of a ratio taken within the run."""
    if KAYAK not in settings.brokers:
        return []
    first, last = settings.connections[0], settings.connections[-1]
    group_last = samples.rates.get(("group", last), [])
    flat = paired_ratio(group_last, samples.rates.get(("group", first), []))
    versus_always = paired_ratio(group_last, samples.rates.get(("always", last), []))
    lines = [
        f"group@{last} / group@{first} = {flat:.2f} (target >= 0.8): "
        + ("met" if flat >= 0.8 else "MISSED"),
        f"group@{last} / always@{last} = {versus_always:.2f} (target >= 10): "
        + ("met" if versus_always >= 10 else "MISSED"),
    ]
    for connections in (first, last):
        cpu = samples.cpu_per_request("group", connections)
        floor = samples.cpu_per_request(EMPTY, connections)
        lines.append(
            f"broker CPU per request, group@{connections} = {cpu:.0f} us (target <= 20; an "
            f"empty server needs {floor:.1f} us here): " + ("met" if cpu <= 20 else "MISSED")
        )
    if settings.kafka:
        lines += [issue_28_verdict(samples, connections) for connections in (first, last)]
    return lines


def issue_28_verdict(samples: Samples, connections: int) -> str:
    """Issue 28: group's throughput >= 1.0x Kafka's default with p99 <= Kafka's."""
    point = ("group", connections), (KAFKA_PEER, connections)
    rate = paired_ratio(samples.rates.get(point[0], []), samples.rates.get(point[1], []))
    p99 = paired_ratio(samples.p99_ms.get(point[0], []), samples.p99_ms.get(point[1], []))
    met = rate >= 1.0 and p99 <= 1.0  # False when either is NaN (not measured)
    return (
        f"group@{connections} / Kafka@{connections}: throughput {rate:.2f}x (target >= 1.0), "
        f"p99 {p99:.2f}x (target <= 1.0): " + ("met" if met else "MISSED")
    )


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    table = results_table(settings, samples)
    limit = samples.fdatasync
    print()
    print(
        f"acks=all appends/second and request round trips (p50, p99 ms), "
        f"{settings.producers} producers x 1 record of {settings.value_size} B per request, "
        f"median of {settings.runs} runs ({settings.seconds:g} s each after "
        f"{settings.warmup:g} s warm-up)"
    )
    print(machine_notes(settings.data_root))
    print(
        f"machine limit: write({settings.value_size} B) + fdatasync = {human(median(limit))}/s "
        f"(runs: {spread(limit)})"
    )
    print()
    print(table.markdown() if markdown else table.text())
    print()
    for line in verdicts(settings, samples):
        print(line)
    ends = (settings.connections[0], settings.connections[-1])
    spreads = ", ".join(
        f"{peer}@{n}: {spread(samples.rates.get((peer, n), []))}"
        for peer in settings.peers
        for n in ends
    )
    print(f"run-to-run range: {spreads}")
    p99_spreads = ", ".join(
        f"{peer}@{n}: {spread(samples.p99_ms.get((peer, n), []))}"
        for peer in settings.peers
        for n in ends
    )
    print(f"run-to-run range of p99 (ms): {p99_spreads}")


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--runs", type=int, default=5, help="runs to take the median of")
    parser.add_argument("--seconds", type=float, default=1.0, help="measured time per point")
    parser.add_argument("--warmup", type=float, default=0.25, help="unmeasured time per point")
    parser.add_argument("--producers", type=int, default=128)
    parser.add_argument("--value-size", type=int, default=2048)
    parser.add_argument(
        "--connections",
        default="1,2,4,8,16,32,64,128",
        help="comma-separated connection counts",
    )
    parser.add_argument("--brokers", default="kayak,kafka", help="kayak,kafka,tansu")
    parser.add_argument("--tansu", action="store_true", help="add Tansu (in-memory) for context")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    connections = tuple(int(n) for n in args.connections.split(","))
    if args.quick:
        args.runs, args.seconds, args.warmup = 1, 0.3, 0.1
        connections = (1, 8, connections[-1])
    settings = Settings(
        producers=args.producers,
        connections=connections,
        value_size=args.value_size,
        warmup=args.warmup,
        seconds=args.seconds,
        runs=args.runs,
        brokers=parse_brokers(args.brokers + (",tansu" if args.tansu else "")),
        data_root=args.data_root,
    )
    return settings, args.markdown, args.plot


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(plot, "broker_appends", results_table(settings, samples))


if __name__ == "__main__":
    main(sys.argv[1:])
