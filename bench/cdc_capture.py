"""Capture alone, PostgreSQL: ``kayak cdc run`` against Debezium's PostgreSQL connector.

Both capture the same table (bench/cdc.py's ``orders``) under the same workload (its seeded
mix of inserts, updates and deletes in transactions of 50, bench/cdc_workloads.py) into a
fresh kayak broker on this machine (``--flush`` group by default, as ``kayak broker``):

* kayak: ``kayak cdc run`` (one Python process), Avro through the broker's schema registry
  (``--kayak-format``), one Kafka transaction per batch;
* Debezium 3.6: its PostgreSQL connector (pgoutput) in Kafka Connect standalone (one JVM,
  offsets in a file), JsonConverter with schemas: no Avro converter is among the jars
  ``make jvm`` fetches, so the two do not write the same bytes (see bench/capture_peers.py).

Each run, per capturer: a database of its own seeded with ``--rows`` rows; the capturer
started, its snapshot in the topic, ``--warm`` changes captured (JIT, caches); then
``--changes`` changes as fast as the source takes them. Changes/s runs from the workload's
first change to the topic's end offset taking its last value (bench/capture_measure.py);
the topic is then read whole to check every change is in it. CPU per change (user + system,
from /proc): the capturer's process, the broker's, the source server's backends serving the
capture (slot decoding), beside the source's own (the workload process and the rest of its
server), and the source alone (the same workload on an uncaptured database). Medians of
``--runs``; ratios kayak / Debezium are medians of per-run ratios.

    .venv/bin/python bench/cdc_capture.py --changes 50000 --runs 3 --markdown
    .venv/bin/python bench/cdc_capture.py --quick   # a smoke: 2,000 changes, one run
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capture_measure import CaptureBackends, capture_groups, read_cpu, wait_settled
from capture_peers import enable_kayak_capture, start_debezium, start_kayak_capture
from cdc_cpu import tree_cpu_s
from cdc_postgres import create_database, drop_database, postmaster_pid
from cdc_workloads import WorkloadProcess, run_workload_process
from peers import start_kayak
from result_tables import Table, human, median, paired_ratio, times

from kayak.client.sync import Admin
from tests.jvm.peer_support import Background, read_topic

KAYAK, DEBEZIUM = "kayak cdc run", "Debezium (Connect standalone)"
TOPICS = {KAYAK: "kayak.public.orders", DEBEZIUM: "debezium.public.orders"}
QUIET_S = 3.0  # the end offset has not moved for this long: the capture is done
# The CPU columns, µs per change: the capture's parts, then the source's own.
CAPTURE_PARTS = ("capturer", "broker", "capture backends")
SOURCE_PARTS = ("workload", "source server")


@dataclass
class Run:
    """One capturer's measured pass: its rate and CPU µs per change by part."""

    rate: float
    us: dict[str, float]

    @property
    def capture_us(self) -> float:
        return sum(self.us[part] for part in CAPTURE_PARTS)


@dataclass
class Results:
    alone_rates: list[float] = field(default_factory=list)
    alone_us: list[float] = field(default_factory=list)  # workload + server, uncaptured
    runs: dict[str, list[Run]] = field(default_factory=lambda: {KAYAK: [], DEBEZIUM: []})


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure_alone(cluster: Any, args: argparse.Namespace, run: int, into: Results) -> None:
    """The workload on an uncaptured database: how fast the source takes changes at all."""
    name = f"alone{run}"
    dsn = create_database(cluster, name, orders_rows=args.rows)
    try:
        server = postmaster_pid(cluster)
        before = tree_cpu_s(server)
        report = run_workload_process(dsn, args.changes, seed=11)
        server_s = tree_cpu_s(server) - before
    finally:
        drop_database(cluster, name)
    into.alone_rates.append(args.changes / report.elapsed_s)
    into.alone_us.append((report.cpu_s + server_s) / args.changes * 1e6)
    log(f"run {run + 1} source alone: {into.alone_rates[-1]:,.0f} changes/s, "
        f"{into.alone_us[-1]:,.0f} µs CPU per change")  # fmt: skip


def measure_capture(cluster: Any, who: str, args: argparse.Namespace, run: int, work: Path) -> Run:
    """One capturer, fresh broker and database: snapshot, warm-up, then the timed pass."""
    name = f"{'kayak' if who == KAYAK else 'debezium'}{run}"
    slot = f"bench_{name}"
    dsn = create_database(cluster, name, orders_rows=args.rows)
    rows = orders_count(dsn)  # the seeding is the workload's mix: fewer rows than changes
    broker = start_kayak(work, args.flush, registry=True)
    capturer: Background | None = None
    try:
        bootstrap, registry_url = broker.bootstrap, str(broker.registry_url)
        if who == KAYAK:
            enable_kayak_capture(dsn, slot)
            capturer = start_kayak_capture(
                work, dsn, bootstrap, registry_url, slot, args.kayak_format
            )
        else:
            capturer = start_debezium(work, dsn, bootstrap, slot)
        assert capturer.process is not None
        topic, alive = TOPICS[who], capturer.alive
        with Admin(bootstrap_servers=bootstrap) as admin:
            settle = {"quiet_s": QUIET_S, "timeout_s": args.timeout, "alive": alive}
            snapshot = wait_settled(admin, topic, rows, {}, **settle)
            log(f"  {who}: snapshot of {rows:,} rows in the topic")
            warm = WorkloadProcess(dsn, args.warm, seed=5)
            warm.go()
            warm.wait()
            warmed = wait_settled(admin, topic, snapshot.offset + args.warm, {}, **settle)
            backends = CaptureBackends(cluster.dsn(), name)
            groups = capture_groups(
                capturer.process.pid, broker.pid, postmaster_pid(cluster), backends
            )
            workload = WorkloadProcess(dsn, args.changes, seed=11)
            before = read_cpu(groups)
            started = time.monotonic()
            workload.go()
            report = workload.wait()
            done = wait_settled(admin, topic, warmed.offset + args.changes, groups, **settle)
        check_topic(bootstrap, topic, rows + args.warm + args.changes)
    finally:
        if capturer is not None:
            capturer.stop()
        broker.stop()
        drop_database(cluster, name)
    elapsed = done.at - started
    used = {part: done.cpu_s[part] - before[part] for part in groups}
    used["workload"] = report.cpu_s
    result = Run(args.changes / elapsed, {k: v / args.changes * 1e6 for k, v in used.items()})
    log(f"run {run + 1} {who}: {result.rate:,.0f} changes/s in {elapsed:.2f} s (workload "
        f"{report.elapsed_s:.2f} s); µs per change: "
        f"{', '.join(f'{k} {v:,.0f}' for k, v in result.us.items())}")  # fmt: skip
    return result


def orders_count(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert row is not None
    return int(row[0])


def check_topic(bootstrap: str, topic: str, expected: int) -> None:
    """Every change is in the topic: its records with a value (tombstones aside)."""
    values = sum(1 for _, value in read_topic(bootstrap, topic, timeout=300) if value is not None)
    if values != expected:
        raise RuntimeError(f"{topic}: {values:,} change events, expected {expected:,}")


def report(args: argparse.Namespace, results: Results) -> tuple[Table, Table]:
    rates = Table(["capture", "changes", "changes/s", "x source alone", "x Debezium"])
    rates.add("source alone (no capture)", f"{args.changes:,}", median(results.alone_rates),
              "1.00x", "-")  # fmt: skip
    cpu = Table(["capture", *(f"{p} µs" for p in CAPTURE_PARTS), "capture µs",
                 *(f"{p} µs" for p in SOURCE_PARTS), "source alone µs", "capture x source alone",
                 "capture µs x Debezium"])  # fmt: skip
    debezium = results.runs[DEBEZIUM]
    for who, runs in results.runs.items():
        if not runs:
            continue
        rate_list = [r.rate for r in runs]
        rates.add(who, f"{args.changes:,}", median(rate_list),
                  times(paired_ratio(rate_list, results.alone_rates)),
                  times(paired_ratio(rate_list, [r.rate for r in debezium])))  # fmt: skip
        capture = [r.capture_us for r in runs]
        cpu.add(who, *(human(median([r.us[p] for r in runs])) for p in CAPTURE_PARTS),
                human(median(capture)), *(human(median([r.us[p] for r in runs]))
                                          for p in SOURCE_PARTS),
                human(median(results.alone_us)), times(paired_ratio(capture, results.alone_us)),
                times(paired_ratio(capture, [r.capture_us for r in debezium])))  # fmt: skip
    return rates, cpu


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50_000, help="timed changes (50,000)")
    parser.add_argument(
        "--rows", type=int, default=10_000, help="seeding changes before capture starts"
    )
    parser.add_argument("--warm", type=int, default=5_000, help="changes captured before timing")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--capturers", default="kayak,debezium")
    parser.add_argument("--kayak-format", choices=("avro", "json"), default="avro")
    parser.add_argument("--flush", choices=("group", "always", "never"), default="group",
                        help="the kayak broker's --flush (group)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="per wait, seconds")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke: 2,000 changes, 1,000 rows, 500 warm, one run")  # fmt: skip
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.changes, args.rows, args.warm, args.runs = 2_000, 1_000, 500, 1
    return args


def main() -> None:
    from tests.fixtures.postgres import find_bin_dir, start_cluster

    args = parse_args()
    names = {"kayak": KAYAK, "debezium": DEBEZIUM}
    capturers = [names[c.strip()] for c in args.capturers.split(",") if c.strip()]
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL not installed (make test installs it)")
    root = Path(tempfile.mkdtemp(prefix="kayak-bench-capture-"))
    cluster = start_cluster(bin_dir)
    results = Results()
    try:
        for run in range(args.runs):
            measure_alone(cluster, args, run, results)
            for who in capturers:
                work = root / f"{run}-{who.split()[0].lower()}"
                work.mkdir()
                results.runs[who].append(measure_capture(cluster, who, args, run, work))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.changes:,} changes on {args.rows:,} rows (after {args.warm:,} warm-up), "
          f"kayak broker --flush {args.flush}, kayak {args.kayak_format}, Debezium JSON "
          f"(schemas on), medians of {args.runs}\n")  # fmt: skip
    rates, cpu = report(args, results)
    for table in (rates, cpu):
        print(table.markdown() if args.markdown else table.text())
        print()


if __name__ == "__main__":
    main()
