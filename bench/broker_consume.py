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
import functools
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker_consume_load import (
    CONFLUENT,
    LIMIT,
    PERF,
    Log,
    Settings,
    make_log,
    start_filled,
    write_limit_file,
)
from broker_consume_readers import confluent_read, kayak_loop, perf_read
from kafka_peer import KAFKA, KAYAK, TANSU, parse_brokers
from machine_limits import machine_notes, sendfile_loopback_rate
from peers import BrokerProcess, MiB, scratch_dir
from result_tables import (
    Table,
    add_plot_option,
    human,
    median,
    paired_ratio,
    percent,
    plot_table,
    spread,
    times,
)
from usage import per_operation_us, server_cpu_seconds

RECV_BUFFER = 4 * MiB  # the machine limit's recv_into buffer


@dataclass
class Samples:
    rates: dict[str, list[float]] = field(default_factory=dict)  # MiB/s
    cpu_us: dict[str, list[float]] = field(default_factory=dict)  # broker CPU µs per record

    def add(self, row: str, bytes_per_second: float, cpu_us: float = float("nan")) -> None:
        self.rates.setdefault(row, []).append(bytes_per_second / MiB)
        self.cpu_us.setdefault(row, []).append(cpu_us)

    def median(self, row: str) -> float:
        return median(self.rates.get(row, []))


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
            try:
                rate = measure()
            except RuntimeError as e:  # one reader's failure must not lose the other runs
                print(f"  {row:<52} failed: {str(e).splitlines()[0]}", flush=True)
                samples.add(row, float("nan"))
                continue
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
