"""bench/kafka_peer.py and bench/usage.py: Kafka's tools' output parsed, brokers chosen by name,
a server's CPU and memory read from /proc (its children included)."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

# What Kafka 4.3.1's tools printed against kayak's broker in a smoke run (trimmed).
PRODUCER_PERFORMANCE = """\
20000 records sent, 17406.4 records/sec (1.66 MB/sec), 46.12 ms avg latency, 230.00 ms max \
latency, 46 ms 50th, 120 ms 95th, 128 ms 99th, 130 ms 99.9th.
"""
CONSUMER_PERFORMANCE = (
    "2026-11-27 20:15:22:869, 2026-11-27 20:15:26:871, 1.9073, 0.4766, 20000, 4997.5012, "
    "3727, 275, 6.9358, 72727.2727\n"
)
END_TO_END_LATENCY = """\
0\t231.843299
Avg latency: 6.8078 ms
Percentiles: 50th = 3, 99th = 43, 99.9th = 231
"""


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, ModuleType]]:
    """bench/kafka_peer.py and bench/usage.py, imported the way the bench scripts import them."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    yield importlib.import_module("kafka_peer"), importlib.import_module("usage")


def test_the_tools_summaries_are_parsed(bench: tuple[ModuleType, ModuleType]) -> None:
    kafka_peer, _ = bench
    produced = kafka_peer.parse_producer_performance(PRODUCER_PERFORMANCE)
    assert (produced.records, produced.records_per_second) == (20000, pytest.approx(17406.4))
    assert (produced.p50_ms, produced.p99_ms) == (46.0, 128.0)

    consumed = kafka_peer.parse_consumer_performance(CONSUMER_PERFORMANCE)
    assert consumed.records == 20000
    assert consumed.fetch_seconds == pytest.approx(0.275)  # fetch.time.ms, the join left out

    latency = kafka_peer.parse_end_to_end_latency(END_TO_END_LATENCY)
    assert (latency.average_ms, latency.p50_ms, latency.p99_ms, latency.p999_ms) == (
        pytest.approx(6.8078), 3.0, 43.0, 231.0,
    )  # fmt: skip


def test_a_tool_that_printed_no_summary_is_an_error_naming_it(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    kafka_peer, _ = bench
    with pytest.raises(RuntimeError, match="ProducerPerformance printed no summary"):
        kafka_peer.parse_producer_performance("org.apache.kafka.common.errors.TimeoutException")
    with pytest.raises(RuntimeError, match="ConsumerPerformance printed no summary"):
        kafka_peer.parse_consumer_performance("WARN no records\n")
    with pytest.raises(RuntimeError, match="EndToEndLatency printed no summary"):
        kafka_peer.parse_end_to_end_latency("Avg latency: 1.0 ms\n")


def test_brokers_are_chosen_by_name_and_an_unknown_one_is_refused(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    kafka_peer, _ = bench
    assert kafka_peer.parse_brokers("Kafka, kayak,kafka") == ("Apache Kafka", "kayak")
    with pytest.raises(SystemExit, match="unknown broker 'redpanda'"):
        kafka_peer.parse_brokers("kayak,redpanda")
    with pytest.raises(SystemExit, match="unknown broker 'tansu'"):
        kafka_peer.parse_brokers("tansu", allowed=("kayak", "Apache Kafka"))


def test_the_bench_kafka_keeps_kafkas_defaults_but_what_one_node_needs(
    bench: tuple[ModuleType, ModuleType], tmp_path: Path
) -> None:
    kafka_peer, _ = bench
    kafka = kafka_peer.BenchKafka(tmp_path, overrides={"log.flush.interval.messages": "1"})
    properties = kafka.properties()
    assert properties["offsets.topic.replication.factor"] == 1
    assert properties["log.flush.interval.messages"] == "1"
    for tuned in ("offsets.topic.num.partitions", "group.initial.rebalance.delay.ms"):
        assert tuned not in properties  # left at Kafka's default
    assert kafka_peer.BROKER_JVM_OPTIONS[:2] == ("-Xms1g", "-Xmx1g")


def _own_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_server_cpu_and_memory_count_the_children_too(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    _, usage = bench
    # A parent that sleeps while its child burns CPU: only the tree's sum sees the work.
    burn = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"
    parent = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while len(usage.process_tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(usage.process_tree(parent.pid)) == 2
        parent_only, before = _own_cpu_seconds(parent.pid), usage.server_cpu_seconds(parent.pid)
        while usage.server_cpu_seconds(parent.pid) - before < 0.2:  # the child's work
            assert time.monotonic() < deadline, "the child burnt no CPU"
            time.sleep(0.05)
        assert _own_cpu_seconds(parent.pid) - parent_only < 0.1  # the parent slept
        assert usage.resident_bytes(parent.pid) > 2 * 1024 * 1024
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(60)
    assert usage.per_operation_us(0.5, 1000) == pytest.approx(500.0)
    assert usage.per_operation_us(0.5, 0) != usage.per_operation_us(0.5, 0)  # NaN: nothing done
