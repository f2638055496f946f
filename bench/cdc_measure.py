"""One measured pipeline run of the CDC benchmark: throughput, latency at half rate, CPU.

A run replicates a source with a given reader twice over one started pipeline, after its
initial snapshot: first the workload as fast as the source takes it (changes/s end to end,
from the workload's first change to the target having applied its last), then again paced
at half the source alone's rate (commit-to-commit latency, p50/p99, of the changes applied
in it). Over each phase the CPU of every process of the pipeline is read from ``/proc``
(:mod:`cdc_cpu`), and the workload's own from its process.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdc_cpu import CpuGroup, CpuMeter, own_cpu_s, this_process_cpu_s, tree_cpu_s
from cdc_postgres import SourceServer
from cdc_workloads import WorkloadProcess
from result_tables import median

from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec

# The pipeline's processes, as the CPU table names them.
CAPTURE_AND_DRIVER = "capture + Spark driver (one Python process)"
CAPTURE_BACKENDS = "capture's backends in the source server"
BROKER = "broker"
SPARK_JVM = "Spark JVM"
PYTHON_WORKERS = "Spark Python workers"
TARGET_SERVER = "target DB server"
# The source's processes: the workload (SQLite runs in it) and its database server.
SOURCE_SERVER = "source DB server"


@dataclass
class Phase:
    """One phase of a run: its changes, seconds, and CPU seconds by process group."""

    changes: int
    elapsed_s: float
    cpu_s: dict[str, float]
    workload_cpu_s: float
    workload_elapsed_s: float  # the workload's own: its rate is the one it was paced to

    @property
    def rate(self) -> float:
        return self.changes / self.elapsed_s

    def per_change_us(self, name: str) -> float:
        return self.cpu_s[name] / self.changes * 1e6


@dataclass
class RunResult:
    """Both phases of one run, and the latency of the paced one."""

    full: Phase
    paced: Phase
    p50_ms: float
    p99_ms: float
    batches: str = ""
    extra: dict[str, float] = field(default_factory=dict)


def spark_jvm_pid() -> int:
    """The pid of the JVM this process launched for Spark (pyspark's gateway process)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        raise SystemExit("the Spark JVM was not launched by this process: its CPU is not seen")
    return int(proc.pid)


def pipeline_groups(pipeline: Pipeline, source_server: SourceServer | None,
                    target_postmaster: int | None) -> dict[str, CpuGroup]:  # fmt: skip
    """The CPU groups of a started pipeline (and of the source server, when there is one)."""
    jvm = spark_jvm_pid()
    broker = pipeline.broker.pid if pipeline.broker is not None else None
    if broker is None:
        raise SystemExit("the benchmark runs the embedded broker: no broker process found")
    groups: dict[str, CpuGroup] = {
        CAPTURE_AND_DRIVER: this_process_cpu_s,
        BROKER: lambda: tree_cpu_s(broker),
        SPARK_JVM: lambda: own_cpu_s(jvm),
        PYTHON_WORKERS: lambda: tree_cpu_s(jvm, without_root=True),
    }
    if source_server is not None:
        groups[CAPTURE_BACKENDS] = source_server.capture_cpu_s
        groups[SOURCE_SERVER] = source_server.own_cpu_s
    if target_postmaster is not None:
        groups[TARGET_SERVER] = lambda: tree_cpu_s(target_postmaster)
    return groups


def _phase(pipeline: Pipeline, meter: CpuMeter, source: str, changes: int, *, seed: int,
           rate: float) -> Phase:  # fmt: skip
    """The workload run once against the captured source, timed to the target's catch-up."""
    workload = WorkloadProcess(source, changes, seed=seed, rate=rate)
    meter.start()
    started = time.monotonic()
    workload.go()
    report = workload.wait()
    pipeline.catch_up()
    elapsed = time.monotonic() - started
    return Phase(changes, elapsed, meter.stop(), report.cpu_s, report.elapsed_s)


def replicate(
    spark: Any, spec: PipelineSpec, changes: int, half_rate: float,
    *, source_server: Callable[[], SourceServer] | None = None,
    target_postmaster: int | None = None,
) -> RunResult:  # fmt: skip
    """Both phases of a run with the pipeline of ``spec``; the replica is verified after."""
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        pipeline.catch_up()  # the initial snapshot, so the clocks measure streaming only
        assert pipeline.job is not None
        server = source_server() if source_server is not None else None
        meter = CpuMeter(pipeline_groups(pipeline, server, target_postmaster))
        full = _phase(pipeline, meter, spec.source, changes, seed=11, rate=0.0)
        batches = spark_batches(pipeline.job.query.recentProgress)
        pipeline.job.stats.latency.clear()
        paced = _phase(pipeline, meter, spec.source, changes, seed=12, rate=half_rate)
        stats = pipeline.job.stats
        (verification,) = pipeline.verify()
        if not verification.equal:
            raise SystemExit(f"replica differs: {verification.differences[:3]}")
        return RunResult(full, paced, stats.percentile(50), stats.percentile(99), batches)


def spark_batches(progress: list[Any]) -> str:
    """Where Spark's time per micro-batch went: medians of its ``durationMs`` parts over the
    batches that read records (Spark keeps the last 100)."""
    busy = [p for p in progress if getattr(p, "numInputRows", 0)]
    if not busy:
        return "spark: no batch read records"
    parts = sorted({k for p in busy for k in p.durationMs})
    medians = ", ".join(f"{k} {median([p.durationMs.get(k, 0) for p in busy]):,.0f}"
                        for k in parts)  # fmt: skip
    rows = median([p.numInputRows for p in busy])
    return (
        f"spark: {len(busy)} batches with records, {rows:,.0f} records each; median ms: {medians}"
    )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
