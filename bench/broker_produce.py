"""Produce throughput: kayak's broker vs Apache Kafka (and Tansu), same client, same run.

For 10 B, 100 B and 1,000 B values, one producer sends ``--messages`` (1,000,000; with
1,000 B values ``--large-messages``, 300,000) to a one-partition topic with acks=all
(``--acks 1,all`` adds acks=1). Two producers, each against every broker:

* confluent-kafka 2.x (librdkafka): the clock stops when ``flush()`` returns (every message
  acknowledged); ``linger.ms`` = 5, ``batch.size`` = 1,000,000 (librdkafka's default),
  ``batch.num.messages`` = 10,000, no compression, a 1,000,000-message local queue, delivery
  reports only for errors; any error fails the run;
* Kafka's own ``ProducerPerformance`` (the Java producer, its own JVM; ``--throughput -1``)
  with the same ``acks``, ``linger.ms`` and ``batch.size``; the rate is the one it prints.

The partition's high watermark is checked after every point. Brokers:

* kayak's (subprocess, fresh data directory on --data-root) with ``--flush group``: every
  acknowledged batch, acks=1 included, has been fdatasync'ed;
* Apache Kafka (bench/kafka_peer.py: single-node KRaft, its default configuration, 1 GiB heap):
  acknowledged batches are in the page cache, flushed by the OS later (Kafka's default);
* Tansu with in-memory storage: nothing is durable.

Each run starts every broker afresh; within a run they take turns at every point. Prints
messages/s with medians of ``--runs`` runs, kayak / Kafka and kayak / Tansu (medians of
within-run ratios), each broker's CPU per message (µs: utime + stime of the server process
over the measured interval, from /proc; for ProducerPerformance the interval is the tool's
whole life), and each broker's resident memory idle (started, warmed up by
``kafka_peer.warm_up``'s short produce-and-consume load, topics created) and under load (the
peak sampled while it was measured).

Run: ``python bench/broker_produce.py`` (default: 5 runs), ``--quick`` for a smoke test,
``--markdown`` for README; ``--brokers kayak,kafka,tansu``, ``--clients confluent,perf``,
``--messages``, ``--linger-ms``, ``--batch-size``, ``--kayak-flush`` to change the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from kafka_peer import (
    KAFKA,
    KAYAK,
    TANSU,
    parse_brokers,
    parse_producer_performance,
    properties_args,
    run_tool,
    start_broker,
)
from machine_limits import machine_notes
from peers import BrokerProcess, MiB
from protocol_clients import create_topic, high_watermark
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
from usage import PeakResident, per_operation_us, resident_bytes, server_cpu_seconds

SIZES = (10, 100, 1000)
CONFLUENT, PERF = "confluent-kafka", "ProducerPerformance"
_CLIENT_NAMES = {"confluent": CONFLUENT, "perf": PERF}
FLUSH_TIMEOUT = 120.0
QUEUE_FULL_RETRIES = 10_000  # poll(1 ms) per retry: ten seconds of a full local queue at most

Point = tuple[str, int, str]  # client, value size, acks


@dataclass(frozen=True)
class Settings:
    messages: int  # per point with 10 B and 100 B values
    large_messages: int  # per point with 1,000 B values
    linger_ms: int
    batch_size: int
    runs: int
    kayak_flush: str
    data_root: Path
    brokers: tuple[str, ...] = (KAYAK, KAFKA, TANSU)
    clients: tuple[str, ...] = (CONFLUENT, PERF)
    acks: tuple[str, ...] = ("all",)

    def count(self, size: int) -> int:
        return self.large_messages if size >= 1000 else self.messages

    def points(self) -> list[Point]:
        return [(c, s, a) for c in self.clients for s in SIZES for a in self.acks]

    def label(self, broker: str) -> str:
        return {KAYAK: f"kayak ({self.kayak_flush})", TANSU: "Tansu (memory)"}.get(broker, broker)


@dataclass
class Samples:
    """Per (broker, point), one per run: messages/s and the broker's CPU µs per message;
    per broker: resident bytes idle and the peak under load."""

    rates: dict[tuple[str, Point], list[float]] = field(default_factory=dict)
    cpu_us: dict[tuple[str, Point], list[float]] = field(default_factory=dict)
    idle: dict[str, list[float]] = field(default_factory=dict)
    loaded: dict[str, list[float]] = field(default_factory=dict)

    def add(self, broker: str, point: Point, rate: float, cpu_us: float) -> None:
        self.rates.setdefault((broker, point), []).append(rate)
        self.cpu_us.setdefault((broker, point), []).append(cpu_us)

    def of(self, broker: str, point: Point) -> list[float]:
        return self.rates.get((broker, point), [])

    def cpu(self, broker: str, point: Point) -> float:
        return median(self.cpu_us.get((broker, point), []))


# -- confluent-kafka -------------------------------------------------------------------------


def producer_config(bootstrap: str, acks: str, settings: Settings) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": settings.linger_ms,
        "batch.size": settings.batch_size,
        "batch.num.messages": 10_000,
        "compression.type": "none",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "delivery.report.only.error": True,
        "enable.idempotence": False,
    }


def confluent_rate(
    broker: BrokerProcess, topic: str, size: int, acks: str, settings: Settings
) -> tuple[float, float]:
    """Time ``count`` produce() calls plus the flush() that sees them all acked; also the
    broker's CPU seconds over that time."""
    count = settings.count(size)
    bootstrap = broker.bootstrap
    errors: list[str] = []

    def on_delivery(err: object, message: object) -> None:
        if err is not None:
            errors.append(str(err))

    config = producer_config(bootstrap, acks, settings)
    producer = confluent_kafka.Producer({**config, "on_delivery": on_delivery})
    value = os.urandom(size)
    before = high_watermark(bootstrap, topic)
    # One message first, outside the clock: connection, metadata and leader lookup.
    producer.produce(topic, value, partition=0)
    producer.flush(FLUSH_TIMEOUT)
    started, started_cpu = time.perf_counter(), server_cpu_seconds(broker.pid)
    for _ in range(count):
        _produce(producer, topic, value)
    remaining = producer.flush(FLUSH_TIMEOUT)
    elapsed = time.perf_counter() - started
    cpu = server_cpu_seconds(broker.pid) - started_cpu
    if remaining or errors:
        raise RuntimeError(f"{remaining} messages unflushed, errors: {errors[:3]}")
    _check_stored(bootstrap, topic, before, count + 1)
    return count / elapsed, cpu


def _produce(producer: confluent_kafka.Producer, topic: str, value: bytes) -> None:
    for _ in range(QUEUE_FULL_RETRIES):
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:  # the local queue is full: let librdkafka drain it
            producer.poll(0.001)
    raise RuntimeError("the producer's queue stayed full")


def _check_stored(bootstrap: str, topic: str, before: int, sent: int) -> None:
    stored = high_watermark(bootstrap, topic) - before
    if stored != sent:
        raise RuntimeError(f"{topic}: {stored} messages stored, {sent} sent")


# -- Kafka's ProducerPerformance -------------------------------------------------------------


def perf_rate(
    broker: BrokerProcess, topic: str, size: int, acks: str, settings: Settings
) -> tuple[float, float]:
    """ProducerPerformance's records/s, and the broker's CPU seconds over the tool's life."""
    count = settings.count(size)
    before = high_watermark(broker.bootstrap, topic)
    properties = {
        "acks": acks,
        "linger.ms": settings.linger_ms,
        "batch.size": settings.batch_size,
        "compression.type": "none",
        "enable.idempotence": "false",
    }
    args = [
        "--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", str(count),
        "--record-size", str(size), "--throughput", "-1", "--reporting-interval", "60000",
        "--command-property", *properties_args(properties),
    ]  # fmt: skip
    done = run_tool("kafka-producer-perf-test", args, broker.pid)
    summary = parse_producer_performance(done.stdout)
    _check_stored(broker.bootstrap, topic, before, count)
    return summary.records_per_second, done.broker_cpu


# -- one run -------------------------------------------------------------------------------


def topic_name(point: Point) -> str:
    client, size, acks = point
    return f"produce-{'perf' if client == PERF else 'confluent'}-{size}-{acks}"


def start_brokers(settings: Settings, samples: Samples) -> dict[str, BrokerProcess]:
    brokers: dict[str, BrokerProcess] = {}
    try:
        for name in settings.brokers:
            brokers[name] = broker = start_broker(name, settings.data_root, settings.kayak_flush)
            for point in settings.points():
                create_topic(broker.bootstrap, topic_name(point))
            samples.idle.setdefault(name, []).append(resident_bytes(broker.pid))
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    return brokers


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    brokers = start_brokers(settings, samples)
    peaks = {name: 0 for name in brokers}
    try:
        names = list(brokers)
        for index, point in enumerate(settings.points()):
            client, size, acks = point
            measure = perf_rate if client == PERF else confluent_rate
            shift = (run + index) % len(names)  # who goes first alternates
            for name in names[shift:] + names[:shift]:
                broker = brokers[name]
                with PeakResident(broker.pid) as memory:
                    rate, cpu = measure(broker, topic_name(point), size, acks, settings)
                peaks[name] = max(peaks[name], memory.peak)
                cpu_us = per_operation_us(cpu, settings.count(size))
                samples.add(name, point, rate, cpu_us)
                print(
                    f"  {client:<19} {name:<12} {size:>5} B acks={acks:<3} {rate:>10,.0f} "
                    f"msg/s {rate * size / 1e6:>7.1f} MB/s, broker CPU {cpu_us:.1f} µs/msg, "
                    f"RSS {memory.peak / MiB:,.0f} MiB",
                    flush=True,
                )
    finally:
        for broker in brokers.values():
            broker.stop()
    for name, peak in peaks.items():
        samples.loaded.setdefault(name, []).append(peak)


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    brokers = settings.brokers
    peers = [b for b in (KAFKA, TANSU) if b in brokers and KAYAK in brokers]
    short = {KAYAK: "kayak", KAFKA: "Kafka", TANSU: "Tansu"}
    columns = ["client", "value", "acks"]
    columns += [f"{settings.label(b)} msg/s" for b in brokers]
    columns += [f"kayak / {short[p]}" for p in peers]
    columns.append("broker CPU µs/msg " + " / ".join(short[b] for b in brokers))
    table = Table(columns)
    for point in settings.points():
        client, size, acks = point
        cells: list[object] = [client, f"{size:,} B", acks]
        cells += [median(samples.of(b, point)) for b in brokers]
        mine = samples.of(KAYAK, point)
        cells += [times(paired_ratio(mine, samples.of(p, point))) for p in peers]
        cells.append(" / ".join(human(samples.cpu(b, point)) for b in brokers))
        table.add(*cells)
    return table


def memory_table(settings: Settings, samples: Samples) -> Table:
    table = Table(["broker", "resident MiB, idle", "resident MiB, under load (peak)"])
    for name in settings.brokers:
        idle, loaded = samples.idle.get(name, []), samples.loaded.get(name, [])
        table.add(settings.label(name), median(idle) / MiB, median(loaded) / MiB)
    return table


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) and Kafka's ProducerPerformance, one producer, "
        f"{settings.messages:,} messages per point ({settings.large_messages:,} of 1,000 B), "
        f"linger.ms={settings.linger_ms}, batch.size={settings.batch_size:,}; median of "
        f"{settings.runs} runs"
    )
    print(machine_notes(settings.data_root))
    print()
    for table in (results_table(settings, samples), memory_table(settings, samples)):
        print(table.markdown() if markdown else table.text())
        print()
    print(
        "run-to-run range (msg/s): "
        + "; ".join(
            f"{name} {point[0]} {point[1]} B acks={point[2]}: {spread(samples.of(name, point))}"
            for name in settings.brokers
            for point in settings.points()
        )
    )
    for peer in (KAFKA, TANSU):
        if KAYAK in settings.brokers and peer in settings.brokers:
            print(f"(kayak's median over all points: {human(_overall(settings, samples, peer))}x "
                  f"{peer})")  # fmt: skip


def _overall(settings: Settings, samples: Samples, peer: str) -> float:
    points = settings.points()
    return median([paired_ratio(samples.of(KAYAK, p), samples.of(peer, p)) for p in points])


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--messages", type=int, default=1_000_000, help="per 10 B/100 B point")
    parser.add_argument("--large-messages", type=int, default=300_000, help="per 1,000 B point")
    parser.add_argument("--runs", type=int, default=5, help="runs to take the median of")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--acks", default="all", help="all, 1, or both: 1,all")
    parser.add_argument("--brokers", default="kayak,kafka,tansu", help="kayak,kafka,tansu")
    parser.add_argument("--clients", default="confluent,perf", help="confluent,perf")
    parser.add_argument("--kayak-flush", choices=("group", "always", "never"), default="group")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.large_messages, args.runs = 20_000, 10_000, 1
    acks = tuple(a.strip() for a in args.acks.split(",") if a.strip())
    if not acks or set(acks) - {"1", "all"}:
        parser.error(f"--acks takes 1, all or 1,all, not {args.acks!r}")
    clients = tuple(_CLIENT_NAMES.get(c.strip(), c) for c in args.clients.split(",") if c.strip())
    if not clients or set(clients) - {CONFLUENT, PERF}:
        parser.error(f"--clients takes confluent, perf or both, not {args.clients!r}")
    settings = Settings(
        messages=args.messages,
        large_messages=args.large_messages,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        runs=args.runs,
        kayak_flush=args.kayak_flush,
        data_root=args.data_root,
        brokers=parse_brokers(args.brokers),
        clients=clients,
        acks=acks,
    )
    return settings, args.markdown, args.plot


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(plot, "broker_produce", results_table(settings, samples))


if __name__ == "__main__":
    main(sys.argv[1:])
