"""The log cleaner's cost to produce and fetch: the same workload with the cleaner off and on,
on kayak and on Apache Kafka.

Brokers, each started afresh for every run: kayak (``--flush never``: page cache, as Kafka's
default, so the broker and not the disk is measured; ``--log-cleaner-backoff-ms 100``,
``--[no-]log-cleaner-enable``) and Apache Kafka (bench/kafka_peer.py: single-node KRaft from
the project's jars, its defaults but ``log.cleaner.backoff.ms=100``, and
``log.cleaner.enable=false`` for "off": deprecated for removal in 5.0, still honoured). The
same workload on each:

* ``churn``: a compacted topic (``segment.bytes`` 1 MiB, ``min.cleanable.dirty.ratio`` 0.01,
  the same topic configs on both) written with keyed updates of ``--keys`` keys, so that with
  the cleaner on a cleaning is due every few segments and runs throughout;
* a fetch probe: a consumer tailing a second (plain) topic to which a timestamped message is
  produced every 5 ms; the delay from produce to receipt is the fetch latency measured.

Reports, per broker, produce throughput (messages/s of confluent-kafka, groups of 1,000
acknowledged before the next), the broker's CPU per message, and the probe's p50/p99 with the
cleaner off and on, each broker's ratios on/off, and the offset the churn log was cleaned up
to (its cleaner checkpoint; 0: no cleaning ran). Every broker first gets
``kafka_peer.warm_up``'s produce-and-consume load (a JVM's just-in-time compiler is not
measured at work), then a fifth of the messages warm the churn topic up, and with the
cleaner on the first cleaning must have ended before the timed part (kayak's worker process
starts with the first cleaning). Targets (issue 26): throughput with the cleaner ≥ 0.8x,
fetch p99 unchanged; Apache Kafka's own ratio on/off is the yardstick for what a cleaner
costs on the same machine.

Run: ``python bench/cleaner.py`` (many minutes), ``--brokers kayak`` for kayak alone,
``--quick`` for a smoke test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_peer import KAFKA, KAYAK, WARM_UP_MESSAGES, parse_brokers, start_apache_kafka, warm_up
from peers import BrokerProcess, start_kayak
from result_tables import Table, human, median, times
from usage import per_operation_us, server_cpu_seconds

CHURN, PROBE = "churn", "probe"
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "min.cleanable.dirty.ratio": "0.01",
}


@dataclass
class Settings:
    messages: int = 300_000
    keys: int = 5_000
    value_bytes: int = 100
    runs: int = 3
    root: Path = Path("/tmp")
    brokers: tuple[str, ...] = (KAYAK, KAFKA)
    warm_up: int = WARM_UP_MESSAGES  # kafka_peer.warm_up's load, on a topic of its own


@dataclass
class Sample:
    rate: float  # messages/s produced to churn
    latencies_ms: list[float] = field(default_factory=list)  # probe: produce to receipt
    cleaned_up_to: int = 0  # the churn log's cleaner checkpoint at the end
    cpu_us: float = float("nan")  # broker CPU (with its cleaner process) per churn message

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(int(len(ordered) * p), len(ordered) - 1)]


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(CHURN, 1, 1, config=COMPACTED), NewTopic(PROBE, 1, 1)], operation_timeout=30
    )
    for future in futures.values():
        future.result(30)


def probe(bootstrap: str, stop: threading.Event, latencies: list[float]) -> None:
    """Produce a timestamp every 5 ms to PROBE and time its arrival at a tailing consumer."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "probe", "fetch.wait.max.ms": 100,
        "auto.offset.reset": "latest", "enable.auto.commit": False,
    })  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(PROBE, 0, confluent_kafka.OFFSET_END)])
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    while not stop.is_set():
        producer.produce(PROBE, value=repr(time.monotonic()).encode(), partition=0)
        producer.poll(0)
        message = consumer.poll(0.005)
        while message is not None:
            if message.error() is None:
                latencies.append((time.monotonic() - float(message.value())) * 1000)
            message = consumer.poll(0)
    producer.flush(5)
    consumer.close()


def cleaned_up_to(name: str, broker: BrokerProcess) -> int:
    """Where the cleaner's last cleaning of CHURN ended (0: it never ran)."""
    assert broker.data_dir is not None
    data = broker.data_dir / "data"
    try:
        if name == KAYAK:
            return int((data / f"{CHURN}-0" / "cleaner-offset-checkpoint").read_text())
        # Kafka's, one for the log directory: version, count, then "topic partition offset".
        for line in (data / "cleaner-offset-checkpoint").read_text().splitlines()[2:]:
            topic, partition, offset = line.split()
            if (topic, partition) == (CHURN, "0"):
                return int(offset)
    except (FileNotFoundError, ValueError):
        pass
    return 0


def produce_churn(bootstrap: str, settings: Settings, count: int | None = None) -> float:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
        "batch.num.messages": 10_000, "batch.size": 1_000_000,
    })  # fmt: skip
    value = b"v" * settings.value_bytes
    count = settings.messages if count is None else count
    started = time.perf_counter()
    for start in range(0, count, 1000):
        for i in range(start, min(start + 1000, count)):
            producer.produce(CHURN, key=b"key-%d" % (i % settings.keys), value=value, partition=0)
        producer.flush(60)
    return count / (time.perf_counter() - started)


def start(name: str, settings: Settings, cleaner: bool) -> BrokerProcess:
    """A fresh broker with its cleaner on or off, checking every 100 ms when on."""
    if name == KAYAK:
        enable = "--log-cleaner-enable" if cleaner else "--no-log-cleaner-enable"
        return start_kayak(settings.root, "never", "--log-cleaner-backoff-ms", "100", enable)
    overrides = {"log.cleaner.backoff.ms": "100", "log.cleaner.enable": str(cleaner).lower()}
    return start_apache_kafka(settings.root, overrides)


def run_once(settings: Settings, name: str, cleaner: bool) -> Sample:
    with start(name, settings, cleaner) as broker:
        warm_up(broker, settings.warm_up)
        create_topics(broker.bootstrap)
        stop, latencies = threading.Event(), list[float]()
        thread = threading.Thread(target=probe, args=(broker.bootstrap, stop, latencies))
        thread.start()
        # Warm up (the cleaner's worker process starts with the first cleaning: wait for it
        # to have cleaned once), then measure.
        produce_churn(broker.bootstrap, settings, settings.messages // 5)
        deadline = time.monotonic() + 60
        while cleaner and not cleaned_up_to(name, broker) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        latencies.clear()
        cpu_before = server_cpu_seconds(broker.pid)  # the cleaner's worker is a child: counted
        try:
            rate = produce_churn(broker.bootstrap, settings)
            cpu = server_cpu_seconds(broker.pid) - cpu_before
        finally:
            stop.set()
            thread.join()
        cpu_us = per_operation_us(cpu, settings.messages)
        return Sample(rate, latencies, cleaned_up_to(name, broker), cpu_us)


Samples = dict[tuple[str, bool], list[Sample]]  # (broker, cleaner on) -> one per run


def on_off(samples: Samples, name: str, measure: Callable[[Sample], float]) -> float:
    """The median over runs of ``measure`` with the cleaner on over the same run's off."""
    pairs = zip(samples[name, False], samples[name, True], strict=True)
    return statistics.median(measure(on) / measure(off) for off, on in pairs)


def report(samples: Samples, brokers: tuple[str, ...]) -> None:
    table = Table(["broker", "cleaner", "produce msg/s", "broker CPU µs/msg", "probe p50 ms",
                   "probe p99 ms", "cleaned up to"])  # fmt: skip
    for name in brokers:
        for cleaner in (False, True):
            runs = samples[name, cleaner]
            table.rows.append([
                name,
                "on" if cleaner else "off",
                human(median([s.rate for s in runs])),
                f"{median([s.cpu_us for s in runs]):.2f}",
                f"{median([s.percentile(0.5) for s in runs]):.1f}",
                f"{median([s.percentile(0.99) for s in runs]):.1f}",
                str(max(s.cleaned_up_to for s in runs)),
            ])  # fmt: skip
    print(table.text())
    p99: dict[str, float] = {}
    for name in brokers:
        rate = on_off(samples, name, lambda s: s.rate)
        p99[name] = on_off(samples, name, lambda s: s.percentile(0.99))
        print(f"{name}: produce with the cleaner {times(rate)} of without (target ≥ 0.80x); "
              f"probe p99 {times(p99[name])} of without")  # fmt: skip
    if KAYAK in p99 and KAFKA in p99:
        print(f"probe p99 with the cleaner on/off: kayak {times(p99[KAYAK])} vs "
              f"{KAFKA} {times(p99[KAFKA])}")  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=Settings.messages)
    parser.add_argument("--keys", type=int, default=Settings.keys)
    parser.add_argument("--runs", type=int, default=Settings.runs)
    parser.add_argument("--brokers", default="kayak,kafka", help="kayak and/or kafka")
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny sizes")
    args = parser.parse_args(argv)
    brokers = parse_brokers(args.brokers, allowed=(KAYAK, KAFKA))
    settings = Settings(args.messages, args.keys, runs=args.runs, brokers=brokers)
    if args.quick:
        settings = Settings(messages=60_000, keys=500, runs=1, brokers=brokers, warm_up=10_000)
    samples: Samples = {(name, on): [] for name in brokers for on in (False, True)}
    for run in range(settings.runs):
        # Alternate the order: a machine warming up or slowing down hits both alike.
        order = (False, True) if run % 2 == 0 else (True, False)
        for name in brokers:
            for cleaner in order:
                samples[name, cleaner].append(run_once(settings, name, cleaner))
    report(samples, brokers)


if __name__ == "__main__":
    main(sys.argv[1:])
