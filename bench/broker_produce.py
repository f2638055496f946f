"""Produce throughput: confluent-kafka producing to kayak's broker vs to Tansu, same run.

For 10 B, 100 B and 1,000 B values, one producer (confluent-kafka 2.x, librdkafka) sends
``--messages`` (1,000,000; with 1,000 B values ``--large-messages``, 300,000) to a
one-partition topic, with acks=1 and with acks=all; the clock stops when ``flush()`` returns
(every message acknowledged). Both brokers get the same client settings: ``linger.ms`` = 5,
``batch.size`` = 1,000,000 (librdkafka's default), ``batch.num.messages`` = 10,000, no
compression, a 1,000,000-message local queue. Delivery reports only for errors
(``delivery.report.only.error``); any error fails the run, and the partition's high
watermark is checked afterwards.

* kayak's broker (subprocess, fresh data directory on --data-root) with ``--flush group``:
  every acknowledged batch, acks=1 included, has been fdatasync'ed;
* Tansu with in-memory storage: nothing is durable.

So the comparison is durable kayak against in-memory Tansu. Each run starts both brokers
afresh; within a run they take turns at every (size, acks) point. Prints messages/s and
MB/s (10^6 B of values) with medians of ``--runs`` runs, the kayak / Tansu ratio (median of
within-run ratios) and each broker's CPU use (cores) while it was measured: well under one
core means the one Python producer, not the broker, set the pace.

Run: ``python bench/broker_produce.py`` (default: 5 runs, about 3 minutes), ``--quick`` for a
smoke test, ``--markdown`` for README; ``--messages``, ``--linger-ms``, ``--batch-size``,
``--kayak-flush`` to change the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from peers import (
    BrokerProcess,
    Table,
    add_plot_option,
    cpu_seconds,
    create_topic,
    high_watermark,
    human,
    machine_notes,
    median,
    paired_ratio,
    plot_table,
    spread,
    start_kayak,
    start_tansu,
    times,
)

SIZES = (10, 100, 1000)
ACKS = ("1", "all")
TANSU = "Tansu"
FLUSH_TIMEOUT = 120.0
QUEUE_FULL_RETRIES = 10_000  # poll(1 ms) per retry: ten seconds of a full local queue at most


@dataclass(frozen=True)
class Settings:
    messages: int  # per point with 10 B and 100 B values
    large_messages: int  # per point with 1,000 B values
    linger_ms: int
    batch_size: int
    runs: int
    kayak_flush: str
    data_root: Path

    def count(self, size: int) -> int:
        return self.large_messages if size >= 1000 else self.messages

    @property
    def kayak(self) -> str:
        return f"kayak ({self.kayak_flush})"


@dataclass
class Samples:
    """messages/second per (broker, size, acks), one per run."""

    rates: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)  # broker cores

    def add(self, broker: str, size: int, acks: str, rate: float, cores: float) -> None:
        self.rates.setdefault((broker, size, acks), []).append(rate)
        self.cpu.setdefault((broker, size, acks), []).append(cores)

    def cores(self, broker: str, size: int, acks: str) -> float:
        return median(self.cpu.get((broker, size, acks), []))

    def of(self, broker: str, size: int, acks: str) -> list[float]:
        return self.rates.get((broker, size, acks), [])


# -- one measurement -----------------------------------------------------------------------


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


def messages_per_second(
    broker: BrokerProcess, topic: str, size: int, acks: str, settings: Settings
) -> tuple[float, float]:
    """Time ``count`` produce() calls plus the flush() that sees them all acked; also the
    broker's CPU use over that time, in cores."""
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
    started, started_cpu = time.perf_counter(), cpu_seconds(broker.pid)
    for _ in range(count):
        _produce(producer, topic, value)
    remaining = producer.flush(FLUSH_TIMEOUT)
    elapsed = time.perf_counter() - started
    cores = (cpu_seconds(broker.pid) - started_cpu) / elapsed
    if remaining or errors:
        raise RuntimeError(f"{remaining} messages unflushed, errors: {errors[:3]}")
    stored = high_watermark(bootstrap, topic) - before
    if stored != count + 1:
        raise RuntimeError(f"{topic}: {stored} messages stored, {count + 1} sent")
    return count / elapsed, cores


def _produce(producer: confluent_kafka.Producer, topic: str, value: bytes) -> None:
    for _ in range(QUEUE_FULL_RETRIES):
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:  # the local queue is full: let librdkafka drain it
            producer.poll(0.001)
    raise RuntimeError("the producer's queue stayed full")


# -- one run -------------------------------------------------------------------------------


def topic_name(size: int, acks: str) -> str:
    return f"produce-{size}-{acks}"


def start_brokers(settings: Settings) -> dict[str, BrokerProcess]:
    brokers: dict[str, BrokerProcess] = {}
    try:
        brokers[settings.kayak] = start_kayak(settings.data_root, settings.kayak_flush)
        brokers[TANSU] = start_tansu(settings.data_root)
        for broker in brokers.values():
            for size in SIZES:
                for acks in ACKS:
                    create_topic(broker.bootstrap, topic_name(size, acks))
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    return brokers


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    brokers = start_brokers(settings)
    try:
        names = list(brokers)
        for point, (size, acks) in enumerate((s, a) for s in SIZES for a in ACKS):
            shift = (run + point) % len(names)  # who goes first alternates
            for name in names[shift:] + names[:shift]:
                topic = topic_name(size, acks)
                rate, cores = messages_per_second(brokers[name], topic, size, acks, settings)
                samples.add(name, size, acks, rate, cores)
                print(
                    f"  {name:<14} {size:>5} B acks={acks:<3} {rate:>10,.0f} msg/s "
                    f"{rate * size / 1e6:>7.1f} MB/s, broker CPU {cores:.2f} cores",
                    flush=True,
                )
    finally:
        for broker in brokers.values():
            broker.stop()


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    kayak = settings.kayak
    table = Table(
        [
            "value",
            "acks",
            f"{kayak} msg/s",
            f"{kayak} MB/s",
            "Tansu (memory) msg/s",
            "Tansu MB/s",
            "kayak / Tansu",
            "broker CPU kayak / Tansu",
        ]
    )
    for size in SIZES:
        for acks in ACKS:
            mine, theirs = samples.of(kayak, size, acks), samples.of(TANSU, size, acks)
            table.add(
                f"{size:,} B",
                acks,
                median(mine),
                median(mine) * size / 1e6,
                median(theirs),
                median(theirs) * size / 1e6,
                times(paired_ratio(mine, theirs)),
                f"{samples.cores(kayak, size, acks):.2f} / {samples.cores(TANSU, size, acks):.2f}",
            )
    return table


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}), one producer, {settings.messages:,} messages "
        f"per point ({settings.large_messages:,} of 1,000 B), linger.ms={settings.linger_ms}, "
        f"batch.size={settings.batch_size:,}; median of {settings.runs} runs"
    )
    print(machine_notes(settings.data_root))
    print()
    table = results_table(settings, samples)
    print(table.markdown() if markdown else table.text())
    print()
    print(
        "run-to-run range (msg/s): "
        + "; ".join(
            f"{name} {size} B acks={acks}: {spread(samples.of(name, size, acks))}"
            for name in (settings.kayak, TANSU)
            for size in SIZES
            for acks in ACKS
        )
    )
    print(f"(kayak's median over all points: {human(_overall(settings, samples))}x Tansu)")


def _overall(settings: Settings, samples: Samples) -> float:
    ratios = [
        paired_ratio(samples.of(settings.kayak, size, acks), samples.of(TANSU, size, acks))
        for size in SIZES
        for acks in ACKS
    ]
    return median(ratios)


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--messages", type=int, default=1_000_000, help="per 10 B/100 B point")
    parser.add_argument("--large-messages", type=int, default=300_000, help="per 1,000 B point")
    parser.add_argument("--runs", type=int, default=5, help="runs to take the median of")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--kayak-flush", choices=("group", "always", "never"), default="group")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.large_messages, args.runs = 20_000, 10_000, 1
    settings = Settings(
        messages=args.messages,
        large_messages=args.large_messages,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        runs=args.runs,
        kayak_flush=args.kayak_flush,
        data_root=args.data_root,
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
