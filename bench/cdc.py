"""End-to-end CDC benchmark: source database → capture → broker → Spark (local[2]) → target.

For each source (SQLite → SQLite, PostgreSQL → PostgreSQL) and each of Spark's readers of
the change topics (``kafka``: Spark's Kafka source; ``kayak``: kayak's data source), a seeded
workload of inserts, updates and deletes runs against a captured table while the pipeline
replicates it, in its own process (bench/cdc_workloads.py). Reported, median of ``--runs``:

- changes/s end to end (the workload's first change to the target having applied its
  last), beside the source alone: the same workload against an uncaptured copy of the table,
  i.e. how fast changes can be made at all;
- SQLite: changes/s of the capture alone, ``kayak cdc run`` (its own process) publishing a
  fresh captured copy of the table into a kayak broker with its schema registry, no Spark
  and no target: the workload's first change to the change topic's end offset taking its
  last value (bench/capture_measure.py), and its CPU per change (capture process + broker).
  Issue 27 holds the pipeline to >= 0.9x of it ("pipeline / capture alone", the median of
  per-run ratios; PostgreSQL's capture alone is bench/cdc_capture.py's, "-" here);
- the latency of each applied change from its source commit to the target's commit
  (p50/p99) in a second pass paced at half the source alone's rate;
- CPU per change (µs, user + system from /proc) of every process of the pipeline, beside
  the source's own (the workload process, where SQLite runs, and the source's server); the
  ratio of the two does not depend on how many cores the machine has. The capture runs in a
  thread of the process that drives Spark (this one, as ``kayak pipeline run`` does): the
  two share one column. "source's extra under capture" is what the source spends more per
  change while captured (SQLite: the capture triggers in the writer; PostgreSQL: logical
  WAL), counted in the pipeline's total. A SQLite target is written by the apply in Spark's
  Python workers (no server); a PostgreSQL target runs in a cluster of its own, so its
  server's CPU is the whole cluster's.

    .venv/bin/python bench/cdc.py --changes 50000 --runs 3 --markdown

Spark's reader alone against Parquet is ``bench/spark_read.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capture_measure import read_cpu, wait_settled
from capture_peers import start_kayak_capture
from cdc_cpu import CpuMeter, tree_cpu_s
from cdc_measure import log, replicate
from cdc_postgres import (
    SourceServer,
    capture_url,
    checkpoint,
    create_database,
    drop_database,
    postmaster_pid,
    start_clusters,
)
from cdc_report import Measured, cpu_table, throughput_table
from cdc_workloads import WorkloadProcess, run_workload_process
from peers import start_kayak
from result_tables import add_plot_option, plot_table

from kayak.client.sync import Admin
from kayak.pipeline.session import local_spark, stop_spark
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.workload import create_orders

CAPTURE_TOPIC = "kayak.main.orders"  # kayak cdc run --prefix kayak of SQLite's orders
QUIET_S = 3.0  # the topic's end offset has not moved for this long: the capture is done
CAPTURE_TIMEOUT_S = 600.0


class Bench:
    """The benchmark's shared parts: Spark, the PostgreSQL clusters, a scratch directory."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="kayak-bench-cdc-"))
        self.spark: Any = None
        self.clusters: tuple[Any, Any] | None = None

    def close(self) -> None:
        if self.clusters is not None:
            for cluster in self.clusters:
                cluster.stop()
        if self.spark is not None:
            stop_spark(self.spark)
        shutil.rmtree(self.root, ignore_errors=True)

    def run(self, kind: str, reader: str, run: int, into: Measured) -> None:
        if self.spark is None:
            self.spark = local_spark()
        work = self.root / f"{kind}-{reader}-{run}"
        work.mkdir()
        measure = self._sqlite if kind == "sqlite" else self._postgresql
        measure(reader, run, work, into)
        full, paced = into.runs[-1].full, into.runs[-1].paced
        paced_rate = paced.changes / paced.workload_elapsed_s
        capture = ""
        if into.capture_rates:
            capture = (f", capture alone {into.capture_rates[-1]:,.0f}/s at "
                       f"{into.capture_us[-1]:,.0f} µs CPU/change")  # fmt: skip
        log(f"{kind} / {reader} run {run + 1}: {full.rate:,.0f} changes/s (source alone "
            f"{into.alone_rates[-1]:,.0f}/s{capture}); paced at {paced_rate:,.0f}/s "
            f"p50 {into.runs[-1].p50_ms:,.0f} ms, p99 {into.runs[-1].p99_ms:,.0f} ms; "
            f"CPU s {', '.join(f'{k} {v:.2f}' for k, v in full.cpu_s.items())}, "
            f"workload {full.workload_cpu_s:.2f}\n  {into.runs[-1].batches}")  # fmt: skip

    def _alone(self, source: str, into: Measured, server: Callable[[], float] | None) -> None:
        """The workload against an uncaptured copy: its rate and its CPU per change."""
        changes = self.args.changes
        meter = CpuMeter({"server": server or (lambda: 0.0)})
        meter.start()
        report = run_workload_process(source, changes)
        used = meter.stop()
        into.alone_rates.append(changes / report.elapsed_s)
        into.alone_workload_us.append(report.cpu_s / changes * 1e6)
        into.alone_server_us.append(used["server"] / changes * 1e6 if server else float("nan"))

    def _paced(self, into: Measured) -> float:
        """The latency pass's rate: ``--latency-rate``, else half the source alone's."""
        return float(self.args.latency_rate) or into.alone_rates[-1] / 2

    def _capture_alone(self, work: Path, into: Measured) -> None:
        """``kayak cdc run`` of a fresh captured copy into a fresh broker, no Spark: the rate
        from the workload's first change to the topic's end offset taking its last value,
        and the CPU per change of the capture process and the broker."""
        from kayak.cdc.sqlite import enable

        path, changes = str(work / "capture.db"), self.args.changes
        create_orders(path, self.args.rows)
        snapshot_rows = enable(path, "orders")  # as the pipeline does (prepare_source)
        source = f"sqlite:{path}"
        broker = start_kayak(work, registry=True)
        capture = None
        try:
            # The pipeline's capture producer lingers 5 ms (kayak.pipeline.runner).
            capture = start_kayak_capture(work, source, broker.bootstrap,
                                          str(broker.registry_url), None, "avro",
                                          "-X", "linger.ms=5")  # fmt: skip
            assert capture.process is not None
            pid = capture.process.pid
            groups = {"capture": lambda: tree_cpu_s(pid), "broker": lambda: tree_cpu_s(broker.pid)}
            settled = partial(wait_settled, quiet_s=QUIET_S, timeout_s=CAPTURE_TIMEOUT_S,
                              alive=capture.alive)  # fmt: skip
            with Admin(bootstrap_servers=broker.bootstrap) as admin:
                # The snapshot in the topic first, so the clock measures streaming only.
                snapshot = settled(admin, CAPTURE_TOPIC, snapshot_rows, {})
                workload = WorkloadProcess(source, changes, seed=11)  # the pipeline's full pass
                before = read_cpu(groups)
                started = time.monotonic()
                workload.go()
                workload.wait()
                # Each change is at least one record (commit markers come on top).
                done = settled(admin, CAPTURE_TOPIC, snapshot.offset + changes, groups)
        finally:
            if capture is not None:
                capture.stop()
            broker.stop()
        used = sum(done.cpu_s[name] - before[name] for name in groups)
        into.capture_rates.append(changes / (done.at - started))
        into.capture_us.append(used / changes * 1e6)

    def _sqlite(self, reader: str, run: int, work: Path, into: Measured) -> None:
        plain, captured = str(work / "plain.db"), str(work / "source.db")
        for path in (plain, captured):
            create_orders(path, self.args.rows)
        self._alone(f"sqlite:{plain}", into, None)
        self._capture_alone(work, into)
        spec = PipelineSpec(source=f"sqlite:{captured}", tables=["orders"],
                            target=f"sqlite:{work / 'target.db'}",
                            work_dir=work / "pipeline", reader=reader)  # fmt: skip
        into.runs.append(replicate(self.spark, spec, self.args.changes, self._paced(into)))

    def _postgresql(self, reader: str, run: int, work: Path, into: Measured) -> None:
        if self.clusters is None:
            self.clusters = start_clusters()
        source_cluster, target_cluster = self.clusters
        # Databases, and with them slots (kayak_<database>), of this reader and run alone.
        plain, source, target = (f"{reader}_{part}{run}" for part in ("plain", "source", "target"))
        rows = self.args.rows
        try:
            plain_dsn = create_database(source_cluster, plain, orders_rows=rows)
            source_dsn = create_database(source_cluster, source, orders_rows=rows)
            target_dsn = create_database(target_cluster, target)
            checkpoint(source_cluster)
            server = postmaster_pid(source_cluster)
            self._alone(plain_dsn, into, lambda: tree_cpu_s(server))
            drop_database(source_cluster, plain)  # its autovacuum is not the pipeline run's
            slot = f"kayak_{source}"
            spec = PipelineSpec(source=capture_url(source_dsn), tables=["orders"],
                                target=target_dsn, work_dir=work / "pipeline", reader=reader,
                                slot_name=slot)  # fmt: skip
            into.runs.append(replicate(
                self.spark, spec, self.args.changes, self._paced(into),
                source_server=lambda: SourceServer(source_cluster),
                target_postmaster=postmaster_pid(target_cluster),
            ))  # fmt: skip
        finally:
            drop_database(source_cluster, plain)
            drop_database(source_cluster, source)
            drop_database(target_cluster, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50_000, help="changes per pass")
    parser.add_argument("--rows", type=int, default=10_000, help="rows before capture starts")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sources", default="sqlite,postgresql")
    parser.add_argument("--readers", default="kafka,kayak")
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=0.0,
        help="changes/s of the latency pass; 0: half the source alone's",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke: 2,000 changes, 1,000 rows, one run")  # fmt: skip
    parser.add_argument("--markdown", action="store_true")
    add_plot_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.changes, args.rows, args.runs = 2_000, 1_000, 1
    kinds, readers = args.sources.split(","), args.readers.split(",")
    measured = {(kind, reader): Measured() for kind in kinds for reader in readers}
    bench = Bench(args)
    try:
        # Runs outermost: a noisy minute hits one run of every configuration, not all
        # runs of one.
        for run in range(args.runs):
            for kind in kinds:
                for reader in readers:
                    bench.run(kind, reader, run, measured[(kind, reader)])
    finally:
        bench.close()
    throughput = throughput_table(measured, args.changes)
    cpu = cpu_table(measured)
    for table in (throughput, cpu):
        print(table.markdown() if args.markdown else table.text())
        print()
    plot_table(args.plot, "cdc", throughput)


if __name__ == "__main__":
    main()
