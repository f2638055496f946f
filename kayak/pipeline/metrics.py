"""A running pipeline's Prometheus metrics, read from its counters when scraped.

Nothing here runs per change: the capture loop and the replication job keep their plain
counters (:class:`~kayak.cdc.capture.CaptureStats`, :class:`~kayak.pipeline.job.ReplicationStats`)
and :class:`PipelineCollector` turns a :class:`PipelineSnapshot` of them into metric families
in a registry of the pipeline's own (never prometheus_client's global one, so two pipelines in
one process, or a test, do not see each other's numbers).

What is exposed (all prefixed ``kayak_pipeline_``):

- ``changes_captured_total{table}``: changes the capture read and the broker acknowledged;
- ``changes_applied_total{table}``: rows written to the target (the latest change per key
  of a batch);
- ``dead_letters_total``, ``batches_total``;
- ``behind_source_seconds``: the largest source-commit → target-commit delay in the last
  batch that held committed changes (Debezium's MilliSecondsBehindSource, in seconds; absent
  before one; it does not grow while the source is idle);
- ``backlog_records{topic,partition}``: the change topic's end offset minus the offset the
  streaming query has processed up to (absent until the query's first progress report);
- ``latency_seconds``: a histogram of source commit → target commit, converted from the job's
  :class:`~kayak.pipeline.latency.LatencyHistogram` at scrape time (no second histogram on the
  hot path); its ``_sum`` is estimated from the bucket bounds (within ~2.2 %);
- ``verified{table}`` (1 equal, 0 different) and ``verified_timestamp_seconds``: the last
  verification of source against target (of this run, or the previous run's, kept in the
  work directory).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kayak.pipeline.latency import LatencyHistogram
from kayak.pipeline.latency import upper_bound_ms as bucket_upper_bound_ms

__all__ = [
    "LATENCY_BOUNDS_S",
    "BacklogProbe",
    "PipelineCollector",
    "PipelineSnapshot",
    "TableVerification",
    "VerificationRecord",
    "latency_buckets",
    "pipeline_registry",
    "take_snapshot",
]

log = logging.getLogger(__name__)

PREFIX = "kayak_pipeline"
VERIFICATION_FILE = "last-verification.json"

# Prometheus ``le`` bounds of the latency histogram, seconds: 5 ms to 10 minutes.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
)  # fmt: skip


# -- the last verification ---------------------------------------------------------------


@dataclass(frozen=True)
class TableVerification:
    """One table's outcome in a verification."""

    table: str
    equal: bool
    rows: int


@dataclass(frozen=True)
class VerificationRecord:
    """When source and target were last compared, and how each table came out."""

    at: float  # seconds since the epoch
    tables: tuple[TableVerification, ...]

    @classmethod
    def of(cls, verifications: Iterable[Any], at: float | None = None) -> VerificationRecord:
        """From :class:`~kayak.pipeline.verify.Verification` results."""
        return cls(
            at=time.time() if at is None else at,
            tables=tuple(TableVerification(v.table, v.equal, v.rows) for v in verifications),
        )

    def save(self, work_dir: Path) -> None:
        """Keep it in the work directory, so the next run's page shows it from the start."""
        document = {"at": self.at, "tables": [vars(t) for t in self.tables]}
        path = work_dir / VERIFICATION_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document), encoding="utf-8")
        temporary.replace(path)

    @classmethod
    def load(cls, work_dir: Path) -> VerificationRecord | None:
        """The one :meth:`save` left there; None when there is none (or it is unreadable)."""
        try:
            document = json.loads((work_dir / VERIFICATION_FILE).read_text(encoding="utf-8"))
            return cls(
                at=float(document["at"]),
                tables=tuple(
                    TableVerification(str(t["table"]), bool(t["equal"]), int(t["rows"]))
                    for t in document["tables"]
                ),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring %s: %s", work_dir / VERIFICATION_FILE, e)
            return None


# -- what is read from a running pipeline --------------------------------------------------


class _Capture(Protocol):
    @property
    def stats(self) -> Any: ...


class _Job(Protocol):
    @property
    def stats(self) -> Any: ...
    @property
    def query(self) -> Any: ...


class MeteredPipeline(Protocol):
    """What the metrics read of a :class:`~kayak.pipeline.runner.Pipeline` (either part may
    not have started yet)."""

    @property
    def capture(self) -> _Capture | None: ...
    @property
    def job(self) -> _Job | None: ...
    @property
    def last_verification(self) -> VerificationRecord | None: ...


@dataclass(frozen=True)
class PipelineSnapshot:
    """A running pipeline's counters at one moment."""

    taken_at: float  # seconds since the epoch
    captured: dict[str, int]  # table -> changes captured
    applied: dict[str, int]  # table -> rows applied
    changes: int  # changes the replication job read (dead letters aside)
    applied_total: int
    dead_letters: int
    batches: int
    behind_source_s: float | None
    latency_ms: dict[int, int] = field(default_factory=dict)  # LatencyHistogram buckets
    backlog: dict[tuple[str, int], int] | None = None  # (topic, partition) -> records
    verification: VerificationRecord | None = None

    @property
    def captured_total(self) -> int:
        return sum(self.captured.values())

    def latency(self) -> LatencyHistogram:
        histogram = LatencyHistogram()
        histogram.merge(self.latency_ms)
        return histogram


def _copy(mapping: Mapping[Any, int]) -> dict[Any, int]:
    """A copy of a dict another thread may be adding to (a C-level copy; retried in the rare
    case the dict changed size meanwhile)."""
    for _ in range(5):
        try:
            return dict(mapping)
        except RuntimeError:
            continue
    return {}


def take_snapshot(
    pipeline: MeteredPipeline, *, backlog: BacklogProbe | None = None
) -> PipelineSnapshot:
    """Read the pipeline's counters now; ``backlog`` (when given) asks the broker for the
    change topics' end offsets."""
    capture = pipeline.capture.stats if pipeline.capture is not None else None
    job = pipeline.job
    stats = job.stats if job is not None else None
    captured = _copy(getattr(capture, "by_table", {})) if capture is not None else {}
    # ``applied_by_table`` (``schema.table`` → rows) is new in ReplicationStats: read with
    # getattr, so that a stats object without it reads as no per-table counts.
    applied = _copy(getattr(stats, "applied_by_table", {})) if stats is not None else {}
    behind_ms = stats.last_batch_behind_ms if stats is not None else None
    return PipelineSnapshot(
        taken_at=time.time(),
        captured=captured,
        applied=applied,
        changes=stats.changes if stats is not None else 0,
        applied_total=stats.applied if stats is not None else 0,
        dead_letters=stats.dead_lettered if stats is not None else 0,
        batches=stats.batches if stats is not None else 0,
        behind_source_s=None if behind_ms is None else behind_ms / 1000,
        latency_ms=_copy(stats.latency.counts) if stats is not None else {},
        backlog=backlog.backlog(job.query) if backlog is not None and job is not None else None,
        verification=pipeline.last_verification,
    )


# -- backlog in offsets ------------------------------------------------------------------


def processed_offsets(query: Any) -> dict[tuple[str, int], int] | None:
    """The next offset per change-topic partition the streaming query has processed up to,
    from its last progress report (``endOffset``, ``{"topic": {"0": 23}}``); None before the
    first report."""
    progress = query.lastProgress if query is not None else None
    if progress is None:
        return None
    offsets: dict[tuple[str, int], int] = {}
    for source in progress["sources"]:
        end = source["endOffset"]
        document = json.loads(end) if isinstance(end, str) else end
        if not isinstance(document, dict):
            continue
        for topic, partitions in document.items():
            if isinstance(partitions, dict):
                for partition, offset in partitions.items():
                    offsets[(topic, int(partition))] = int(offset)
    return offsets


class BacklogProbe:
    """Change-topic records not processed yet: the broker's end offsets (ListOffsets, one
    admin connection of its own, opened at first use) minus what the query processed."""

    def __init__(
        self, bootstrap_servers: str, client_options: Mapping[str, str] | None = None,
        *, timeout_ms: int = 2000,
    ) -> None:  # fmt: skip
        self._config = {"bootstrap.servers": bootstrap_servers, **(client_options or {})}
        self._timeout_ms = timeout_ms
        self._admin: Any = None
        self._lock = threading.Lock()  # the page's sampler and a scrape may ask at once

    def backlog(self, query: Any) -> dict[tuple[str, int], int] | None:
        """``{(topic, partition): records}``; None when unknown (no progress report yet,
        or the broker did not answer: logged at DEBUG, a scrape must not fail for it)."""
        try:
            processed = processed_offsets(query)
            if not processed:
                return None
            with self._lock:
                ends = self._end_offsets(sorted(processed))
        except Exception as e:  # a scrape reports what it can
            log.debug("pipeline backlog unknown: %s", e)
            return None
        return {tp: max(0, ends[tp] - processed[tp]) for tp in processed if tp in ends}

    def _end_offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from kayak.client.admin import OffsetSpec
        from kayak.client.sync import Admin
        from kayak.client.types import TopicPartition

        if self._admin is None:
            self._admin = Admin(self._config)
        specs = {TopicPartition(t, p): OffsetSpec.LATEST for t, p in partitions}
        found = self._admin.list_offsets(specs, timeout_ms=self._timeout_ms)
        return {(tp.topic, tp.partition): found[tp].offset for tp in specs if tp in found}

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None


# -- Prometheus --------------------------------------------------------------------------


def latency_buckets(
    counts_ms: Mapping[int, int], bounds_s: Sequence[float] = LATENCY_BOUNDS_S
) -> tuple[list[tuple[str, float]], float]:
    """A :class:`LatencyHistogram`'s bucket counts as Prometheus' cumulative ``le`` buckets
    (``+Inf`` last) and an estimated sum in seconds.

    A latency bucket is counted under the first ``le`` at or above its upper bound, so a
    value is never reported below its bound (at worst one latency bucket, ~2.2 %, above
    its true value); the sum takes each value at its bucket's upper bound.
    """
    per_bound = [0] * (len(bounds_s) + 1)
    total_s = 0.0
    for bucket, count in counts_ms.items():
        upper_s = bucket_upper_bound_ms(int(bucket)) / 1000
        total_s += upper_s * count
        index = next((i for i, b in enumerate(bounds_s) if upper_s <= b), len(bounds_s))
        per_bound[index] += count
    cumulative: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds_s, per_bound, strict=False):
        running += count
        cumulative.append((repr(float(bound)), running))
    cumulative.append(("+Inf", running + per_bound[-1]))
    return cumulative, total_s


def _name(suffix: str) -> str:
    return f"{PREFIX}_{suffix}"


class PipelineCollector(Collector):
    """A running pipeline's metric families (see the module's doc), read at scrape time."""

    def __init__(self, pipeline: MeteredPipeline, *, backlog: BacklogProbe | None = None) -> None:
        self.pipeline = pipeline
        self.backlog = backlog

    def collect(self) -> Iterable[Metric]:
        return list(families(take_snapshot(self.pipeline, backlog=self.backlog)))


def families(snapshot: PipelineSnapshot) -> Iterator[Metric]:
    """One snapshot as metric families."""
    captured = CounterMetricFamily(
        _name("changes_captured"),
        "Changes read from the source and acknowledged by the broker, per table.",
        labels=["table"],
    )
    for table, n in sorted(snapshot.captured.items()):
        captured.add_metric([table], n)
    yield captured
    applied = CounterMetricFamily(
        _name("changes_applied"),
        "Rows written to the target, per table (the latest change of a key in a batch).",
        labels=["table"],
    )
    for table, n in sorted(snapshot.applied.items()):
        applied.add_metric([table], n)
    yield applied
    yield CounterMetricFamily(_name("dead_letters"),
                              "Change records sent to the dead-letter topic.",
                              value=snapshot.dead_letters)  # fmt: skip
    yield CounterMetricFamily(_name("batches"), "Spark micro-batches processed.",
                              value=snapshot.batches)  # fmt: skip
    behind = GaugeMetricFamily(
        _name("behind_source_seconds"),
        "Largest source commit → target commit delay in the last batch with committed "
        "changes (Debezium: MilliSecondsBehindSource).",
    )
    if snapshot.behind_source_s is not None:
        behind.add_metric([], snapshot.behind_source_s)
    yield behind
    backlog = GaugeMetricFamily(
        _name("backlog_records"),
        "Change-topic records not processed by the replication query yet (end offset minus "
        "the query's processed offset).",
        labels=["topic", "partition"],
    )
    for (topic, partition), n in sorted((snapshot.backlog or {}).items()):
        backlog.add_metric([topic, str(partition)], n)
    yield backlog
    latency = HistogramMetricFamily(
        _name("latency_seconds"),
        "Source commit → target commit per applied change (sum estimated from bucket bounds).",
    )
    buckets, total_s = latency_buckets(snapshot.latency_ms)
    latency.add_metric([], buckets, total_s)
    yield latency
    yield from _verification_families(snapshot.verification)


def _verification_families(record: VerificationRecord | None) -> Iterator[Metric]:
    verified = GaugeMetricFamily(
        _name("verified"),
        "The last verification: 1 when source and target held the same rows, else 0.",
        labels=["table"],
    )
    when = GaugeMetricFamily(
        _name("verified_timestamp_seconds"), "When the last verification ran (Unix time)."
    )
    if record is not None:
        for table in record.tables:
            verified.add_metric([table.table], 1 if table.equal else 0)
        when.add_metric([], record.at)
    yield verified
    yield when


def pipeline_registry(
    pipeline: MeteredPipeline, *, backlog: BacklogProbe | None = None
) -> CollectorRegistry:
    """A registry of the pipeline's own holding its :class:`PipelineCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(pipeline, backlog=backlog))
    return registry


def percentile_s(counts_ms: Mapping[int, int], p: float) -> float | None:
    """The ``p``-th percentile in seconds of some latency buckets; None when empty."""
    histogram = LatencyHistogram()
    histogram.merge(dict(counts_ms))
    return histogram.percentile(p) / 1000 if histogram.total else None


def subtract(later: Mapping[int, int], earlier: Mapping[int, int]) -> dict[int, int]:
    """The latencies added between two copies of one histogram's buckets."""
    return {b: n - earlier.get(b, 0) for b, n in later.items() if n > earlier.get(b, 0)}

