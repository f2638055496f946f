"""End-to-end latency, paced producer to one consumer: kayak vs Apache Kafka (and Tansu).

One producer (confluent-kafka 2.x, librdkafka) sends 100 B values (``--size``) to a fresh
one-partition topic at a fixed rate (``--rate``, default ``1000,10000``: each measured) for
``--warmup`` + ``--seconds`` seconds (2 + 20), with ``acks=all`` (no idempotence, no
compression) and each ``linger.ms`` of ``--linger-ms`` (default ``0,5``): with no lingering,
librdkafka sends whatever is queued when its thread wakes, a few records per request. One
consumer reads the same partition from its end (offset 0 of the fresh topic), confluent-kafka
by default (``--consumers confluent,kayak`` adds kayak's own consumer as a second row, on its
own topic and its own produce run).

Each value carries its sequence number and its send time: ``time.monotonic_ns()`` (Linux's
CLOCK_MONOTONIC, one clock for every process on the machine) read just before ``produce()``.
The consumer takes ``monotonic_ns()`` when ``poll()`` hands it a message (and whatever else
has arrived by then, taken at once with ``consume(timeout=0)``); latency is the difference,
per message. Messages sent during the warm-up (the first ``--warmup`` seconds: connections,
first fetches, cold caches on both sides) are consumed and checked but not counted in the
latencies, the rate or the CPU figures.

Producer and consumer run in separate processes (``multiprocessing``, spawn), so neither's
GIL delays the other. The producer paces itself against the clock: before each message it
sleeps until that message is due (so messages leave in small bursts when a sleep overshoots,
never ahead of the schedule), and polls librdkafka after every burst. The consumer stops when
it has seen every acknowledged message, or ``--drain`` seconds after the producer's last
``produce()`` (then the missing ones are reported).

Brokers (all started afresh for each run, taking turns at every point; ``--brokers``):

* kayak's (``python -m kayak broker``, fresh data directory on --data-root) with
  ``--flush group`` (the default): every acknowledged batch has been fdatasync'ed;
* Apache Kafka (bench/kafka_peer.py: single-node KRaft, its default configuration, 1 GiB
  heap): acknowledged batches are in the page cache (Kafka's default);
* Tansu with in-memory storage: nothing is durable.

Every broker gets ``kafka_peer.warm_up``'s short produce-and-consume load when it starts, so
that the first point does not measure a JVM compiling its code.

Then, on the same brokers, Kafka's own ``EndToEndLatency`` tool (``--tool-records``, 5,000,
one record at a time: send, wait until its consumer has it, send the next; acks=all,
``--size`` B) against kayak and Apache Kafka: a second table of its average and percentiles
(whole milliseconds, as it prints them).

Printed per broker: the achieved produce rate, consumed vs produced (any missing), end-to-end
latency p50/p90/p99/p99.9/max in ms (a message never received counts as infinitely late), the
producer's own produce() -> acknowledgement latency (p50/p99: where a backlog sits), the
broker's CPU (cores, from /proc/PID/stat) and the time its threads waited for a CPU (from
/proc/PID/task/*/schedstat: how much the machine's other load held it back), its CPU per
produce request it answered (µs; its fetch work included, so an upper bound) and per
message (utime + stime of the server process over the window / messages sent in it), and the
records per request (request and response counts from librdkafka's statistics), all over the
measured window; medians over ``--runs`` runs, and kayak / Kafka and kayak / Tansu for p99
(medians of within-run ratios).

Run: ``python bench/e2e_latency.py`` (3 runs x 2 rates x 2 lingers x 3 brokers, about 20
minutes), ``--quick`` for a smoke test, ``--markdown`` for README; ``--rate``,
``--linger-ms``, ``--seconds``, ``--runs``, ``--consumers``, ``--brokers kayak,kafka,tansu``,
``--tool-records 0`` (no EndToEndLatency);
``--producer-config KEY=VALUE`` (repeatable) adds a librdkafka producer setting to both
brokers' runs (e.g. ``max.in.flight.requests.per.connection=5``); ``--py-spy FILE`` records
kayak's broker with py-spy over its first measured window at the highest rate (``.svg`` flame
graph, ``.txt`` raw collapsed stacks, ``.json`` speedscope).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import confluent_kafka
from e2e_clients import CONSUMERS, HEADER, Load
from e2e_point import Point, measure
from e2e_settings import Settings
from kafka_peer import (
    KAFKA,
    KAYAK,
    TANSU,
    end_to_end_latency_args,
    parse_brokers,
    parse_end_to_end_latency,
    run_tool,
    start_broker,
)
from machine_limits import machine_notes
from peers import REPO, BrokerProcess
from protocol_clients import create_topic
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
from usage import per_operation_us

# -- runs and report -------------------------------------------------------------------------


Case = tuple[int, int, str]  # rate, linger.ms, consumer


@dataclass
class Samples:
    points: dict[tuple[Case, str], list[Point]] = field(default_factory=dict)
    tool: dict[str, list[ToolLatency]] = field(default_factory=dict)  # EndToEndLatency

    def add(self, case: Case, broker: str, point: Point) -> None:
        self.points.setdefault((case, broker), []).append(point)

    def of(self, case: Case, broker: str) -> list[Point]:
        return self.points.get((case, broker), [])


@dataclass(frozen=True)
class ToolLatency:
    """One EndToEndLatency run: its figures in ms, and the broker's CPU µs per record."""

    average: float
    p50: float
    p99: float
    p999: float
    cpu_us: float


def tool_latency(broker: BrokerProcess, settings: Settings) -> ToolLatency:
    """Kafka's EndToEndLatency against ``broker`` on a fresh topic (see the module doc)."""
    topic = f"e2e-tool-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    args = end_to_end_latency_args(broker.bootstrap, topic, settings.tool_records, settings.size)
    done = run_tool("kafka-e2e-latency", args, broker.pid)
    found = parse_end_to_end_latency(done.stdout)
    cpu_us = per_operation_us(done.broker_cpu, settings.tool_records)
    return ToolLatency(found.average_ms, found.p50_ms, found.p99_ms, found.p999_ms, cpu_us)


def start_brokers(settings: Settings) -> dict[str, BrokerProcess]:
    brokers: dict[str, BrokerProcess] = {}
    try:
        for name in settings.brokers:
            brokers[name] = start_broker(name, settings.data_root, settings.flush)
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    for name, broker in brokers.items():
        print(f"  {name} broker pid {broker.pid} on {broker.bootstrap}", flush=True)
    return brokers


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    brokers = start_brokers(settings)
    try:
        names = list(brokers)
        for index, case in enumerate(settings.points()):
            rate, linger, consumer = case
            shift = (run + index) % len(names)  # who goes first alternates
            for name in names[shift:] + names[:shift]:
                load = Load(
                    rate, settings.seconds, settings.warmup, settings.size,
                    settings.producer_config, linger,
                )  # fmt: skip
                topic = f"e2e-{rate}-{linger}-{consumer}-{uuid.uuid4().hex[:8]}"
                profile_here = _profile_here(run, rate, consumer, name, settings)
                profile_to = settings.py_spy if profile_here else None
                point = measure(brokers[name], name, topic, load, consumer, settings, profile_to)
                samples.add(case, name, point)
                print("    " + _line(name, case, point), flush=True)
        for name in (n for n in names if n != TANSU and settings.tool_records):
            result = tool_latency(brokers[name], settings)
            samples.tool.setdefault(name, []).append(result)
            print(f"    {name:<12} EndToEndLatency: avg {result.average:.2f} ms, p50 "
                  f"{result.p50:g} p99 {result.p99:g} p99.9 {result.p999:g} ms, broker CPU "
                  f"{human(result.cpu_us)} µs/record", flush=True)  # fmt: skip
    finally:
        for broker in brokers.values():
            broker.stop()


def _profile_here(run: int, rate: int, consumer: str, name: str, settings: Settings) -> bool:
    """py-spy watches kayak's broker once: in the first run, at the highest rate."""
    return (
        settings.py_spy is not None
        and run == 0
        and rate == max(settings.rates)
        and consumer == settings.consumers[0]
        and name == KAYAK
    )


def _line(name: str, case: Case, point: Point) -> str:
    rate, linger, consumer = case
    lat = point.latencies_ms
    return (
        f"{name:<12} {rate:>7,} msg/s target, linger.ms={linger}, {consumer:<9}: "
        f"{point.rate:>8,.0f} msg/s sent, "
        f"{point.consumed:,}/{point.produced:,} consumed, p50 {lat['p50']:.2f} p99 "
        f"{lat['p99']:.2f} p99.9 {lat['p99.9']:.2f} max {lat['max']:.2f} ms (acked p50 "
        f"{point.acked_ms['p50']:.2f} p99 {point.acked_ms['p99']:.2f} ms), broker "
        f"{point.cores:.2f} cores (+{point.starved:.2f} waiting for a CPU), "
        f"{_per_request_us(point)} µs/produce req, {human(_per_message_us(point))} µs/msg, "
        f"{point.records_per_request:.1f} rec/req, {_answers_per_second(point)} produce "
        f"answers/s, {point.late:,} sent >1 ms late"
    )


def _answers_per_second(point: Point) -> str:
    window = point.measured / point.rate if point.rate else float("nan")
    return human(point.produce_answers / window)


def _per_message_us(point: Point) -> float:
    """Broker CPU per message sent in the window (its fetch work included)."""
    window = point.measured / point.rate if point.rate else float("nan")
    return per_operation_us(point.cores * window, point.measured)


def _per_request_us(point: Point) -> str:
    """Broker CPU per produce request it answered in the window (its fetches included)."""
    if point.produce_answers != point.produce_answers or not point.produce_answers:
        return "-"
    window = point.measured / point.rate if point.rate else float("nan")
    return human(point.cores * window / point.produce_answers * 1e6)


def results_table(settings: Settings, samples: Samples) -> Table:
    peers = [b for b in (KAFKA, TANSU) if b in settings.brokers and KAYAK in settings.brokers]
    table = Table(
        [
            "rate target", "linger.ms", "consumer", "broker", "sent msg/s", "consumed",
            "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "ack p50 ms", "ack p99 ms",
            "broker CPU", "broker run-queue wait", "µs/produce req", "broker CPU µs/msg",
            "rec/req", *(f"p99 kayak / {_SHORT[p]}" for p in peers),
        ]
    )  # fmt: skip
    for case in settings.points():
        rate, linger, consumer = case
        for name in settings.brokers:
            points = samples.of(case, name)
            if not points:
                continue
            table.add(
                f"{rate:,}/s",
                str(linger),
                consumer,
                _broker_label(name, settings),
                median([p.rate for p in points]),
                _consumed(points),
                *(median([p.latencies_ms[k] for p in points]) for k in _LATENCY_KEYS),
                median([p.acked_ms["p50"] for p in points]),
                median([p.acked_ms["p99"] for p in points]),
                f"{median([p.cores for p in points]):.2f} cores",
                f"{median([p.starved for p in points]):.2f} cores",
                _median_text([_per_request_us(p) for p in points]),
                median([_per_message_us(p) for p in points]),
                median([p.records_per_request for p in points]),
                *(_p99_ratio(samples, case, p) if name == KAYAK else "" for p in peers),
            )
    return table


def tool_table(settings: Settings, samples: Samples) -> Table:
    """EndToEndLatency's figures per broker (medians over runs)."""
    names = [n for n in settings.brokers if samples.tool.get(n)]
    versus = KAYAK in names and KAFKA in names
    columns = ["broker", "avg ms", "p50 ms", "p99 ms", "p99.9 ms", "broker CPU µs/record"]
    table = Table(columns + (["p99 kayak / Kafka"] if versus else []))
    for name in names:
        runs = samples.tool[name]
        cells: list[object] = [_broker_label(name, settings)]
        cells += [median([getattr(r, key) for r in runs]) for key in _TOOL_KEYS]
        if versus:
            mine = [r.p99 for r in samples.tool[KAYAK]]
            theirs = [r.p99 for r in samples.tool[KAFKA]]
            cells.append(times(paired_ratio(mine, theirs)) if name == KAYAK else "")
        table.add(*cells)
    return table


_LATENCY_KEYS = ("p50", "p90", "p99", "p99.9", "max")
_TOOL_KEYS = ("average", "p50", "p99", "p999", "cpu_us")
_SHORT = {KAFKA: "Kafka", TANSU: "Tansu"}


def _broker_label(name: str, settings: Settings) -> str:
    return {KAYAK: f"kayak ({settings.flush})", TANSU: "Tansu (memory)"}.get(name, name)


def _consumed(points: Sequence[Point]) -> str:
    missing = sum(p.missing for p in points)
    if missing:
        return f"{missing:,} missing"
    return "all"


def _median_text(values: Sequence[str]) -> str:
    numbers = [float(v.replace(",", "")) for v in values if v != "-"]
    return human(median(numbers)) if numbers else "-"


def _p99_ratio(samples: Samples, case: Case, peer: str) -> str:
    mine = [p.latencies_ms["p99"] for p in samples.of(case, KAYAK)]
    theirs = [p.latencies_ms["p99"] for p in samples.of(case, peer)]
    return times(paired_ratio(mine, theirs))


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) producer, acks=all, {settings.size} B values, "
        f"one partition; {settings.warmup:g} s warm-up + {settings.seconds:g} s measured per "
        f"point; median of {settings.runs} runs"
        + "".join(f", {k}={v}" for k, v in settings.producer_config)
    )
    print(machine_notes(settings.data_root))
    print()
    table = results_table(settings, samples)
    print(table.markdown() if markdown else table.text())
    print()
    print(
        "run-to-run range of p99 (ms): "
        + "; ".join(
            f"{name} {case[0]:,}/s linger.ms={case[1]} {case[2]}: "
            + spread([p.latencies_ms["p99"] for p in samples.of(case, name)])
            for case in settings.points()
            for name in settings.brokers
        )
    )
    if samples.tool:
        print()
        print(
            f"Kafka's EndToEndLatency: {settings.tool_records:,} records of {settings.size} B, "
            f"one at a time, acks=all (its percentiles are whole ms)"
        )
        tools = tool_table(settings, samples)
        print(tools.markdown() if markdown else tools.text())
    print(f"command: python bench/e2e_latency.py {' '.join(sys.argv[1:])}")


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="1000,10000", help="msg/s, or a list: 1000,10000")
    parser.add_argument("--linger-ms", default="0,5", help="linger.ms, or a list: 0,5")
    parser.add_argument(
        "--tool-records",
        type=int,
        default=5_000,
        help="records of Kafka's EndToEndLatency per broker and run (0: none)",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measured, per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="sent first, not counted")
    parser.add_argument("--drain", type=float, default=30.0, help="wait after the last send")
    parser.add_argument("--size", type=int, default=100, help="value bytes (>= 17)")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--consumers", default="confluent", help="confluent,kayak")
    parser.add_argument("--brokers", default="kayak,kafka,tansu", help="kayak,kafka,tansu")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--py-spy", type=Path, help="py-spy kayak's broker (first window)")
    parser.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer setting, e.g. max.in.flight.requests.per.connection=5",
    )
    parser.add_argument(
        "--flush", default="group", choices=("group", "always", "never"), help="kayak's --flush"
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.runs, args.drain = 3.0, 1.0, 1, 10.0
        args.tool_records = min(args.tool_records, 500)
    consumers = tuple(c.strip() for c in args.consumers.split(",") if c.strip())
    brokers = parse_brokers(args.brokers)
    if unknown := set(consumers) - set(CONSUMERS):
        parser.error(f"unknown consumers: {', '.join(sorted(unknown))}")
    if args.size < HEADER.size:
        parser.error(f"--size must be at least {HEADER.size}")
    settings = Settings(
        rates=tuple(int(r) for r in args.rate.split(",") if r.strip()),
        seconds=args.seconds,
        warmup=args.warmup,
        drain=args.drain,
        size=args.size,
        runs=args.runs,
        consumers=consumers,
        brokers=brokers,
        data_root=args.data_root,
        py_spy=args.py_spy,
        producer_config=tuple(_key_value(item, parser) for item in args.producer_config),
        flush=args.flush,
        lingers=tuple(int(v) for v in args.linger_ms.split(",") if v.strip()),
        tool_records=args.tool_records,
    )
    return settings, args.markdown, args.plot


def _key_value(item: str, parser: argparse.ArgumentParser) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        parser.error(f"--producer-config wants KEY=VALUE, not {item!r}")
    return key.strip(), value.strip()


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    os.chdir(REPO)
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(plot, "e2e_latency", results_table(settings, samples))


if __name__ == "__main__":
    main(sys.argv[1:])
