"""The CDC benchmark's tables: throughput and latency (plotted as chart ``cdc``), and CPU per
change by process, each a median over the runs of one source and reader."""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_measure import (
    BROKER,
    CAPTURE_AND_DRIVER,
    CAPTURE_BACKENDS,
    PYTHON_WORKERS,
    SOURCE_SERVER,
    SPARK_JVM,
    TARGET_SERVER,
    Phase,
    RunResult,
)
from result_tables import Table, human, median, paired_ratio, times

# The pipeline's processes, in the CPU table's order.
PIPELINE_PARTS = (CAPTURE_AND_DRIVER, CAPTURE_BACKENDS, BROKER, SPARK_JVM, PYTHON_WORKERS,
                  TARGET_SERVER)  # fmt: skip
EXTRA = "source's extra under capture"


@dataclass
class Measured:
    """The runs of one source and reader: the source alone's, the capture alone's (SQLite
    only; empty for PostgreSQL) and the pipeline's."""

    alone_rates: list[float] = field(default_factory=list)
    alone_workload_us: list[float] = field(default_factory=list)
    alone_server_us: list[float] = field(default_factory=list)
    capture_rates: list[float] = field(default_factory=list)
    capture_us: list[float] = field(default_factory=list)  # capture process + broker
    runs: list[RunResult] = field(default_factory=list)

    def alone_us(self, run: int) -> float:
        """The source alone's CPU per change in run ``run``: workload + server (if any)."""
        server = self.alone_server_us[run]
        return self.alone_workload_us[run] + (0.0 if server != server else server)


def pipeline_us(measured: Measured, run: int, phase: Phase) -> dict[str, float]:
    """CPU µs per change of each pipeline part in ``phase`` of run ``run``, its total, and
    what the source spent more than alone (counted in the total)."""
    parts = {name: phase.per_change_us(name) for name in PIPELINE_PARTS if name in phase.cpu_s}
    source_now = (phase.workload_cpu_s + phase.cpu_s.get(SOURCE_SERVER, 0.0)) / phase.changes
    parts[EXTRA] = source_now * 1e6 - measured.alone_us(run)
    parts["total"] = sum(parts.values())
    return parts


def throughput_table(measured: dict[tuple[str, str], Measured], changes: int) -> Table:
    """Rates and latencies; "-" where this bench does not measure the capture alone
    (PostgreSQL: bench/cdc_capture.py does)."""
    table = Table(["source", "changes", "workload rate", "source alone changes/s",
                   "capture alone changes/s", "pipeline changes/s", "ratio",
                   "pipeline / capture alone", "latency p50 ms", "latency p99 ms"])  # fmt: skip
    for (kind, reader), m in measured.items():
        rates = [r.full.rate for r in m.runs]
        half = median([r.paced.changes / r.paced.workload_elapsed_s for r in m.runs])  # as made
        capture = f"{median(m.capture_rates):,.0f}" if m.capture_rates else "-"
        table.add(f"{kind}, {reader} reader", f"{changes:,}",
                  f"max; latency at {half:,.0f}/s",
                  f"{median(m.alone_rates):,.0f}", capture, f"{median(rates):,.0f}",
                  times(paired_ratio(rates, m.alone_rates)),
                  times(paired_ratio(rates, m.capture_rates)),
                  f"{median([r.p50_ms for r in m.runs]):,.0f}",
                  f"{median([r.p99_ms for r in m.runs]):,.0f}")  # fmt: skip
    return table


def cpu_table(measured: dict[tuple[str, str], Measured]) -> Table:
    """µs of CPU per change, full rate unless said; medians over runs, each column alone.
    "capture alone" is its capture process + broker (SQLite only; "-" for PostgreSQL)."""
    columns = ["source", "source alone: workload µs", "source alone: DB server µs",
               "source alone µs", "capture alone µs", *(f"{p} µs" for p in PIPELINE_PARTS),
               f"{EXTRA} µs", "pipeline µs", "x source", "pipeline µs at half rate",
               "x source at half rate"]  # fmt: skip
    table = Table(columns)
    for (kind, reader), m in measured.items():
        full = [pipeline_us(m, i, r.full) for i, r in enumerate(m.runs)]
        paced = [pipeline_us(m, i, r.paced) for i, r in enumerate(m.runs)]
        alone = [m.alone_us(i) for i in range(len(m.runs))]

        def part(name: str, runs: list[dict[str, float]]) -> str:
            values = [r[name] for r in runs if name in r]
            return human(median(values)) if values else "-"

        table.add(f"{kind}, {reader} reader", human(median(m.alone_workload_us)),
                  human(median(m.alone_server_us)), human(median(alone)),
                  human(median(m.capture_us)),
                  *(part(p, full) for p in PIPELINE_PARTS), part(EXTRA, full),
                  part("total", full),
                  times(paired_ratio([r["total"] for r in full], alone)),
                  part("total", paced),
                  times(paired_ratio([r["total"] for r in paced], alone)))  # fmt: skip
    return table
