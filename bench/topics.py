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
Targets (issue 28, beside Apache Kafka in the same run): (b) p99 under 50 ms; (d) median under
25 ms; (f) no slower than Kafka's restart.

Run: ``python bench/topics.py`` (3 runs), ``--quick`` (1 run, smaller), ``--markdown`` for
README; ``--runs``, ``--topics``, ``--partitions``, ``--segments``,
``--brokers kayak,kafka,tansu``, ``--no-tansu``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kafka_peer import KAFKA, KAYAK, TANSU, KafkaProcess, parse_brokers, start_broker
from machine_limits import machine_notes
from peers import BrokerProcess, MiB
from protocol_clients import create_topic, run_async
from result_tables import Table, add_plot_option, median, paired_ratio, plot_table, spread, times
from topics_creation import PROBE_TOPIC, create_beside_probe, create_in_one_request, probe_alone
from topics_metadata import create_wide, first_metadata, metadata_latencies
from topics_settings import Samples, Settings
from topics_start_up import (
    build_big_data_dir,
    measure_start_up,
    start_broker_on,
    stop_keeping_data,
)
from usage import per_operation_us, resident_bytes, server_cpu_seconds

WIDE_TOPIC = "wide"


def percentile(samples: Sequence[float], fraction: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


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
