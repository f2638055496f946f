"""The pipeline's own metrics endpoint and page.

Without Spark: the collector and the page server read a pipeline-shaped object holding the
real counters (CaptureStats, ReplicationStats with its LatencyHistogram) and, for the
backlog, a query-shaped object whose last progress names the processed offsets, against a
real broker. One end-to-end run of ``kayak pipeline run`` (SQLite → SQLite, embedded broker)
scrapes /metrics and the page while it replicates, and stops it with SIGTERM.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kayak.cdc.capture import CaptureStats
from kayak.client.sync import Producer
from kayak.console.broker_metrics import PIPELINE_LINK_FILE
from kayak.console.pipeline import PipelineConsole, without_password
from kayak.pipeline.job import ReplicationStats
from kayak.pipeline.metrics import (
    BacklogProbe,
    TableVerification,
    VerificationRecord,
    latency_buckets,
    pipeline_registry,
)
from tests.pipeline.conftest import CdcBroker


@dataclass
class FakeQuery:
    """What the metrics read of a StreamingQuery: its last progress report."""

    lastProgress: Any = None  # Spark's name


@dataclass
class Part:
    stats: Any
    query: Any = None


@dataclass
class RunningPipeline:
    """The attributes of kayak.pipeline.runner.Pipeline the metrics read."""

    capture: Part | None = None
    job: Part | None = None
    last_verification: VerificationRecord | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def replication_stats(applied_by_table: dict[str, int], latencies_ms: list[int]) -> Any:
    stats = ReplicationStats(batches=3, changes=7, applied=sum(applied_by_table.values()),
                             dead_lettered=1, last_batch_behind_ms=1500.0)  # fmt: skip
    stats.applied_by_table = applied_by_table
    stats.latency.extend(latencies_ms)
    return stats


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_collector_reads_counters_latency_and_the_last_verification() -> None:
    latencies = [3, 3, 40, 1_000, 70_000]
    pipeline = RunningPipeline(
        capture=Part(CaptureStats(changes=8, by_table={"main.items": 5, "main.orders": 3})),
        job=Part(replication_stats({"main.items": 4, "main.orders": 2}, latencies)),
        last_verification=VerificationRecord(1_700_000_000.0, (
            TableVerification("main.items", True, 10), TableVerification("main.orders", False, 4),
        )),
    )  # fmt: skip
    samples = scrape(generate_latest(pipeline_registry(pipeline)).decode())

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("kayak_pipeline_changes_captured_total", table="main.items") == 5
    assert value("kayak_pipeline_changes_captured_total", table="main.orders") == 3
    assert value("kayak_pipeline_changes_applied_total", table="main.items") == 4
    assert value("kayak_pipeline_dead_letters_total") == 1
    assert value("kayak_pipeline_batches_total") == 3
    assert value("kayak_pipeline_behind_source_seconds") == 1.5
    assert value("kayak_pipeline_latency_seconds_count") == 5
    assert value("kayak_pipeline_latency_seconds_bucket", le="0.005") == 2  # the two 3 ms
    assert value("kayak_pipeline_latency_seconds_bucket", le="0.05") == 3
    assert value("kayak_pipeline_latency_seconds_bucket", le="1.0") == 3  # 1 s: bucket above
    assert value("kayak_pipeline_latency_seconds_bucket", le="2.5") == 4
    assert value("kayak_pipeline_latency_seconds_bucket", le="60.0") == 4
    assert value("kayak_pipeline_latency_seconds_bucket", le="+Inf") == 5
    assert 71.0 <= value("kayak_pipeline_latency_seconds_sum") <= 71.05 * 1.023
    assert value("kayak_pipeline_verified", table="main.items") == 1
    assert value("kayak_pipeline_verified", table="main.orders") == 0
    assert value("kayak_pipeline_verified_timestamp_seconds") == 1_700_000_000.0

    # Before the job started: zeros and no latency, not an error.
    samples = scrape(generate_latest(pipeline_registry(RunningPipeline())).decode())
    assert value("kayak_pipeline_batches_total") == 0
    assert value("kayak_pipeline_latency_seconds_count") == 0
    assert not any(name == "kayak_pipeline_behind_source_seconds" for name, _ in samples)


def test_latency_buckets_are_cumulative_and_never_below_a_value() -> None:
    counts: dict[int, int] = {}
    from kayak.pipeline.latency import LatencyHistogram

    histogram = LatencyHistogram()
    values = [0, 4, 5, 9, 10, 11, 99, 100, 101, 999, 5_000, 700_000, 10**9]
    histogram.extend(values)
    counts = histogram.counts
    buckets, _ = latency_buckets(counts)
    cumulative = [n for _, n in buckets]
    assert cumulative == sorted(cumulative) and cumulative[-1] == len(values)
    for le, n in buckets[:-1]:
        bound_ms = float(le) * 1000
        # never more than the values truly at or below the bound (a value is reported at its
        # bucket's upper bound), and no fewer than those a bucket (2.2 %) below it
        assert n <= sum(v <= bound_ms for v in values), le
        assert n >= sum(v <= bound_ms / 1.023 for v in values), le


def test_sparkline_draws_gaps_and_escapes_labels() -> None:
    from kayak.console.charts import SampleRing, Series, sparkline

    ring: SampleRing[float | None] = SampleRing(4)
    for value in (1.0, 2.0, None, 4.0, 5.0, 6.0):
        ring.add(value)
    assert ring.samples() == [None, 4.0, 5.0, 6.0]  # bounded: the oldest went
    svg = sparkline([Series("<b>x</b>", [1.0, 2.0, None, 4.0]), Series("lone", [None, 3.0])],
                    chart_id="c", title="<script>", unit="/s", capacity=4)  # fmt: skip
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 2  # a gap; lone points
    assert "<script>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert "4 /s" in svg  # the largest value labels the top


def test_verification_record_survives_in_the_work_dir(tmp_path: Path) -> None:
    record = VerificationRecord(12.5, (TableVerification("main.items", True, 3),))
    record.save(tmp_path)
    assert VerificationRecord.load(tmp_path) == record
    (tmp_path / "last-verification.json").write_text("{not json")
    assert VerificationRecord.load(tmp_path) is None
    assert VerificationRecord.load(tmp_path / "nowhere") is None


def test_backlog_is_the_end_offset_minus_what_the_query_processed(cdc_broker: CdcBroker) -> None:
    topic = "kayak.main.items"
    with Producer({"bootstrap.servers": cdc_broker.bootstrap_servers}) as producer:
        for i in range(5):
            producer.send(topic, f"v{i}".encode(), partition=0)
        producer.flush()
    probe = BacklogProbe(cdc_broker.bootstrap_servers)
    try:
        assert probe.backlog(FakeQuery()) is None  # no progress report yet
        progress = {"sources": [{"endOffset": json.dumps({topic: {"0": 2}})}]}
        assert probe.backlog(FakeQuery(progress)) == {(topic, 0): 3}
        pipeline = RunningPipeline(job=Part(ReplicationStats(), FakeQuery(progress)))
        samples = scrape(generate_latest(pipeline_registry(pipeline, backlog=probe)).decode())
        key = ("kayak_pipeline_backlog_records", (("partition", "0"), ("topic", topic)))
        assert samples[key] == 3
    finally:
        probe.close()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


def test_page_server_shows_tables_charts_and_serves_metrics(tmp_path: Path) -> None:
    capture = CaptureStats(changes=0, by_table={})
    stats = replication_stats({}, [])
    pipeline = RunningPipeline(capture=Part(capture), job=Part(stats))
    link_dir = tmp_path / "broker"
    link_dir.mkdir()
    server = PipelineConsole(
        pipeline, tables=["main.items"], interval_s=0.05, link_dir=link_dir,
        facts={"Source": without_password("postgresql://ada:s3cret@db/shop?password=x")},
    )  # fmt: skip
    with server:
        assert json.loads((link_dir / PIPELINE_LINK_FILE).read_text())["url"] == server.url
        capture.changes, capture.by_table["main.items"] = 40, 40  # changes flow meanwhile
        stats.latency.extend([20] * 30 + [900] * 3)
        deadline = time.monotonic() + 10
        while len(server.history.ring) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        page = get(server.url)
        metrics = get(server.url + "metrics")
    assert not (link_dir / PIPELINE_LINK_FILE).exists()
    assert "s3cret" not in page and "postgresql://ada@db/shop" in page
    row = re.search(r'<table id="pipeline-tables">.*?<tbody><tr>(.*?)</tr>', page)
    assert row is not None and "main.items" in row.group(1) and ">40<" in row.group(1)
    for chart in ("chart-changes", "chart-behind", "chart-latency"):
        assert f'<svg class="spark" id="{chart}"' in page
    assert "<polyline" in page or "<circle" in page  # at least one sample drawn
    assert '<meta http-equiv="refresh"' in page
    assert 'kayak_pipeline_changes_captured_total{table="main.items"} 40.0' in metrics


# -- end to end ------------------------------------------------------------------------------


def _lines(stream: Any) -> tuple[queue.Queue[str], threading.Thread]:
    """The stream's lines, read by a thread of their own (the test waits for some)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def _wait_for_line(lines: queue.Queue[str], pattern: str, seen: list[str]) -> re.Match[str]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matching {pattern!r} in {seen}")


def _metric(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def test_pipeline_run_serves_metrics_while_it_replicates(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"n{i}") for i in range(5)])
    work = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
         "--table", "items", "--target", f"sqlite:{tmp_path / 'copy.db'}",
         "--work-dir", str(work), "--master", "local[1]"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert run.stdout is not None
        lines, reader = _lines(run.stdout)
        url = _wait_for_line(lines, r"pipeline page: (\S+) ", seen).group(1)
        with sqlite3.connect(source) as conn:
            conn.executemany("INSERT INTO items VALUES (?, ?)",
                             [(i, f"n{i}") for i in range(5, 25)])  # fmt: skip
        deadline = time.monotonic() + 120
        metrics = ""
        backlog = {"topic": "kayak.main.items", "partition": "0"}
        while time.monotonic() < deadline:
            metrics = get(url + "metrics")
            # Spark reports a batch's progress (the backlog's processed offsets) just after
            # the batch's counts are in.
            if (_metric(metrics, "kayak_pipeline_latency_seconds_count") or 0) >= 20 and (
                _metric(metrics, "kayak_pipeline_backlog_records", **backlog) == 0
            ):
                break
            time.sleep(0.5)
        assert _metric(metrics, "kayak_pipeline_changes_captured_total", table="main.items") == 25
        assert (_metric(metrics, "kayak_pipeline_latency_seconds_count") or 0) >= 20, metrics
        assert (_metric(metrics, "kayak_pipeline_batches_total") or 0) >= 1
        assert _metric(metrics, "kayak_pipeline_behind_source_seconds") is not None
        assert _metric(metrics, "kayak_pipeline_backlog_records", **backlog) == 0, metrics
        assert _metric(metrics, "kayak_pipeline_changes_applied_total", table="main.items") == 25
        page = get(url)
        assert "main.items" in page and 'id="chart-latency"' in page
        # The embedded broker's console links to this page while it runs.
        link = json.loads((work / "broker" / PIPELINE_LINK_FILE).read_text())
        assert link["url"] == url
        run.send_signal(signal.SIGTERM)
        run.wait(180)
        reader.join(10)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    while not lines.empty():
        seen.append(lines.get())
    output = "".join(seen)
    assert run.returncode == 0, output
    assert "verified: 25 rows, source == target" in output
    record = VerificationRecord.load(work)
    assert record is not None and record.tables[0].equal and record.tables[0].rows == 25
    assert not (work / "broker" / PIPELINE_LINK_FILE).exists()
