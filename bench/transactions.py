"""Transactional produce vs plain: kayak's broker vs Apache Kafka, same client, same run.

One confluent-kafka producer (librdkafka) sends ``--records`` (200,000) 100 B values with
acks=all to a topic of ``--partitions`` (4) partitions, round-robin over them, three ways:

* plain: an idempotent producer (``enable.idempotence=true``), no transactions; the clock
  stops when ``flush()`` returns (every record acknowledged);
* transactional, committing every 100 and every 10,000 records (``--commit-every``): a
  ``transactional.id``; ``begin_transaction()``, the records, ``commit_transaction()`` (which
  flushes, then ends the transaction with EndTxn); the clock stops when the last commit
  returns.

Both producers use ``linger.ms=5``, ``batch.size=1000000``, ``batch.num.messages=10000`` and
no compression (as bench/broker_produce.py). Outside the clock each producer first connects
and sends one record per partition (the transactional one: ``init_transactions()``, one
committed transaction of those records, and one *aborted* transaction of 10 records per
partition). After each measurement a ``read_committed`` consumer reads the topic from the
beginning to its last stable offset: it must see exactly the committed records (the warm-up
ones and the measured ones) and none of the aborted ones, or the bench fails.

Brokers, started afresh every run and warmed up alike (``kafka_peer.warm_up``): kayak with
``--flush group`` (every acknowledged batch and transaction marker is on disk) and ``--flush
never`` (page cache only, Kafka's default), and Apache Kafka (bench/kafka_peer.py: single-node
KRaft, Kafka's default configuration, 1 GiB heap). Within a run the brokers take turns at
every point, the first one rotating. Prints records/s and transactions/s (medians of
``--runs`` runs), transactional / plain per broker and kayak / Kafka per point (medians of
within-run ratios), and each broker's CPU per record (µs: utime + stime of the server process
and its children over the timed interval, from /proc).

Run: ``python bench/transactions.py`` (default: 5 runs), ``--quick`` for a smoke test,
``--markdown`` for README, ``--plot docs/bench/transactions.svg``; ``--brokers kayak,kafka``,
``--kayak-flush group,never``, ``--records``, ``--partitions``, ``--commit-every 100,10000``,
``--warm-up`` (records to warm each broker with; 0: none).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from kafka_peer import KAFKA, KAYAK, WARM_UP_MESSAGES, parse_brokers, start_broker, warm_up
from machine_limits import machine_notes
from peers import BrokerProcess
from protocol_clients import create_topic
from result_tables import (
    Table,
    add_plot_option,
    human,
    median,
    paired_ratio,
    plot_table,
    spread,
    times,
)
from usage import per_operation_us, server_cpu_seconds

VALUE_SIZE = 100
PLAIN = 0  # commit_every of the idempotent producer without transactions
ABORTED_PER_PARTITION = 10
ABORTED_VALUE = b"aborted:".ljust(VALUE_SIZE, b"x")
TIMEOUT = 120.0  # flush, init, commit and the check each; a loaded machine is slow
QUEUE_FULL_RETRIES = 10_000  # poll(1 ms) per retry: ten seconds of a full local queue at most
KAYAK_FLUSH_MODES = ("group", "always", "never")


@dataclass(frozen=True)
class Settings:
    records: int
    partitions: int
    commit_every: tuple[int, ...]  # PLAIN first, then the transactional points
    runs: int
    warm_up: int
    data_root: Path
    brokers: tuple[str, ...] = (KAYAK, KAFKA)
    kayak_flush: tuple[str, ...] = ("group", "never")

    def peers(self) -> list[str]:
        """The measured brokers by label: kayak once per flush mode, then Apache Kafka."""
        labels = [kayak_label(f) for f in self.kayak_flush] if KAYAK in self.brokers else []
        return labels + ([KAFKA] if KAFKA in self.brokers else [])


def kayak_label(flush: str) -> str:
    return f"kayak ({flush})"


def point_label(commit_every: int) -> str:
    if commit_every == PLAIN:
        return "plain (idempotent)"
    return f"commit every {commit_every:,} records"  # short enough for one line of a plot


def transactions_in(records: int, commit_every: int) -> int:
    return 0 if commit_every == PLAIN else -(-records // commit_every)


@dataclass
class Samples:
    """Per (broker label, commit_every), one per run: records/s and broker CPU µs/record."""

    rates: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu_us: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def add(self, peer: str, commit_every: int, rate: float, cpu_us: float) -> None:
        self.rates.setdefault((peer, commit_every), []).append(rate)
        self.cpu_us.setdefault((peer, commit_every), []).append(cpu_us)

    def of(self, peer: str, commit_every: int) -> list[float]:
        return self.rates.get((peer, commit_every), [])

    def cpu(self, peer: str, commit_every: int) -> float:
        return median(self.cpu_us.get((peer, commit_every), []))


# -- the producer ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    seconds: float
    broker_cpu: float  # seconds, over the timed interval
    committed: int  # records a read_committed reader must see, warm-up ones included
    aborted: int


def producer_config(bootstrap: str, commit_every: int, topic: str) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "compression.type": "none",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "delivery.report.only.error": True,
    }
    if commit_every != PLAIN:
        config["transactional.id"] = f"bench-{topic}"
    return config


def produce_records(
    producer: confluent_kafka.Producer, topic: str, partitions: int, count: int, value: bytes
) -> None:
    """``count`` records round-robin over the partitions, waiting out a full local queue."""
    for index in range(count):
        partition = index % partitions
        for _ in range(QUEUE_FULL_RETRIES):
            try:
                producer.produce(topic, value, partition=partition)
                break
            except BufferError:  # the local queue is full: let librdkafka drain it
                producer.poll(0.001)
        else:
            raise RuntimeError("the producer's queue stayed full")


def measure(broker: BrokerProcess, topic: str, commit_every: int, settings: Settings) -> Measured:
    """One producer's timed run (see the module doc); fails on any delivery error."""
    errors: list[str] = []

    def on_delivery(err: object, message: object) -> None:
        if err is not None:
            errors.append(str(err))

    config = producer_config(broker.bootstrap, commit_every, topic)
    producer = confluent_kafka.Producer({**config, "on_delivery": on_delivery})
    value, partitions = os.urandom(VALUE_SIZE), settings.partitions
    transactional = commit_every != PLAIN
    aborted = 0
    # Outside the clock: connection, metadata, leaders, producer id (and the aborted records).
    if transactional:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        aborted = ABORTED_PER_PARTITION * partitions
        produce_records(producer, topic, partitions, aborted, ABORTED_VALUE)
        producer.flush(TIMEOUT)  # the aborted batches reach the log before the abort
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
    produce_records(producer, topic, partitions, partitions, value)
    _finish(producer, transactional)
    started, started_cpu = time.perf_counter(), server_cpu_seconds(broker.pid)
    if transactional:
        for first in range(0, settings.records, commit_every):
            producer.begin_transaction()
            count = min(commit_every, settings.records - first)
            produce_records(producer, topic, partitions, count, value)
            producer.commit_transaction(TIMEOUT)
    else:
        produce_records(producer, topic, partitions, settings.records, value)
        _finish(producer, transactional)
    seconds = time.perf_counter() - started
    cpu = server_cpu_seconds(broker.pid) - started_cpu
    if errors:
        raise RuntimeError(f"{broker.name} {topic}: delivery errors: {errors[:3]}")
    return Measured(seconds, cpu, partitions + settings.records, aborted)


def _finish(producer: confluent_kafka.Producer, transactional: bool) -> None:
    if transactional:
        producer.commit_transaction(TIMEOUT)
    elif remaining := producer.flush(TIMEOUT):
        raise RuntimeError(f"{remaining} records left unacknowledged")


# -- the read_committed check ----------------------------------------------------------------


def check_committed(broker: BrokerProcess, topic: str, partitions: int, measured: Measured) -> None:
    """A read_committed consumer reads every partition from the beginning to its end (the last
    stable offset): exactly ``measured.committed`` records, none of the aborted ones; else
    RuntimeError. Markers may still be on their way when the last commit returns: the reader
    keeps reading until it has them all or TIMEOUT passes."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    seen, aborted_seen, at_end = 0, 0, set[int | None]()
    deadline = time.monotonic() + TIMEOUT
    try:
        start = confluent_kafka.OFFSET_BEGINNING
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, p, start) for p in range(partitions)]
        )
        while time.monotonic() < deadline:
            if len(at_end) == partitions and seen >= measured.committed:
                break
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    at_end.discard(message.partition())
                    seen += 1
                    aborted_seen += message.value() == ABORTED_VALUE
                elif error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise RuntimeError(f"{broker.name} {topic}: read_committed: {error}")
    finally:
        consumer.close()
    if seen != measured.committed or aborted_seen:
        raise RuntimeError(
            f"{broker.name} {topic}: a read_committed consumer read {seen:,} records "
            f"({aborted_seen:,} of them aborted), {measured.committed:,} were committed and "
            f"{measured.aborted:,} aborted"
        )


# -- one run -------------------------------------------------------------------------------


def topic_name(commit_every: int) -> str:
    return "txn-plain" if commit_every == PLAIN else f"txn-every-{commit_every}"


def start_brokers(settings: Settings) -> dict[str, BrokerProcess]:
    """Every broker of this run by label, fresh, warmed up, its topics created."""
    # (label, broker name, kayak's --flush): kayak once per flush mode, then Apache Kafka
    wanted = [(kayak_label(f), KAYAK, f) for f in settings.kayak_flush if KAYAK in settings.brokers]
    wanted += [(KAFKA, KAFKA, "")] if KAFKA in settings.brokers else []
    brokers: dict[str, BrokerProcess] = {}
    try:
        for label, name, flush in wanted:
            brokers[label] = broker = start_broker(name, settings.data_root, flush, warm=False)
            if settings.warm_up:
                warm_up(broker, settings.warm_up)
            for commit_every in settings.commit_every:
                create_topic(broker.bootstrap, topic_name(commit_every), settings.partitions)
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    return brokers


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    brokers = start_brokers(settings)
    try:
        labels = list(brokers)
        for index, commit_every in enumerate(settings.commit_every):
            shift = (run + index) % len(labels)  # who goes first alternates
            for label in labels[shift:] + labels[:shift]:
                broker, topic = brokers[label], topic_name(commit_every)
                measured = measure(broker, topic, commit_every, settings)
                check_committed(broker, topic, settings.partitions, measured)
                rate = settings.records / measured.seconds
                cpu_us = per_operation_us(measured.broker_cpu, settings.records)
                samples.add(label, commit_every, rate, cpu_us)
                txns = transactions_in(settings.records, commit_every) / measured.seconds
                print(
                    f"  {point_label(commit_every):<36} {label:<14} {rate:>10,.0f} records/s "
                    f"{human(txns) if txns else '-':>6} txn/s, broker CPU {cpu_us:.1f} µs/record; "
                    f"read_committed read {measured.committed:,} (not the {measured.aborted:,} "
                    "aborted)",
                    flush=True,
                )
    finally:
        for broker in brokers.values():
            broker.stop()


# -- report --------------------------------------------------------------------------------


def results_table(settings: Settings, samples: Samples) -> Table:
    """One row per (point, broker): records/s, transactions/s, the ratios, broker CPU."""
    table = Table(
        ["produce", "broker", "records/s", "transactions/s", "transactional / plain",
         "kayak / Kafka", "broker CPU µs/record"]
    )  # fmt: skip
    with_kafka = KAFKA in settings.brokers
    for commit_every in settings.commit_every:
        for peer in settings.peers():
            rates = samples.of(peer, commit_every)
            if commit_every == PLAIN:
                txns, versus_plain = "-", "-"
            else:
                txns = human(median(rates) / commit_every)
                versus_plain = times(paired_ratio(rates, samples.of(peer, PLAIN)))
            versus_kafka = "-"
            if with_kafka and peer != KAFKA:
                versus_kafka = times(paired_ratio(rates, samples.of(KAFKA, commit_every)))
            table.add(point_label(commit_every), peer, median(rates), txns, versus_plain,
                      versus_kafka, samples.cpu(peer, commit_every))  # fmt: skip
    return table


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}), one producer, {settings.records:,} records of "
        f"{VALUE_SIZE} B per point, acks=all, {settings.partitions} partitions, linger.ms=5; "
        f"median of {settings.runs} runs"
    )
    print(machine_notes(settings.data_root))
    print()
    table = results_table(settings, samples)
    print(table.markdown() if markdown else table.text())
    print()
    print(
        "run-to-run range (records/s): "
        + "; ".join(
            f"{peer} {point_label(c)}: {spread(samples.of(peer, c))}"
            for c in settings.commit_every
            for peer in settings.peers()
        )
    )


def _numbers(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SystemExit(f"{what}: comma-separated whole numbers, not {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{what}: at least one number, each >= 1, not {text!r}")
    return values


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--records", type=int, default=200_000, help="per point")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-every", default="100,10000", help="records per transaction")
    parser.add_argument("--runs", type=int, default=5, help="runs to take the median of")
    parser.add_argument("--brokers", default="kayak,kafka", help="kayak,kafka")
    parser.add_argument("--kayak-flush", default="group,never", help="group,always,never")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_MESSAGES, help="records to warm each broker with"
    )
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.runs, args.warm_up = 20_000, 1, min(args.warm_up, 10_000)
    if args.records < 1 or args.partitions < 1 or args.runs < 1 or args.warm_up < 0:
        parser.error("--records, --partitions and --runs take numbers >= 1, --warm-up >= 0")
    flush = tuple(f.strip() for f in args.kayak_flush.split(",") if f.strip())
    if not flush or set(flush) - set(KAYAK_FLUSH_MODES):
        parser.error(f"--kayak-flush takes group, always, never, not {args.kayak_flush!r}")
    settings = Settings(
        records=args.records,
        partitions=args.partitions,
        commit_every=(PLAIN, *_numbers(args.commit_every, "--commit-every")),
        runs=args.runs,
        warm_up=args.warm_up,
        data_root=args.data_root,
        brokers=parse_brokers(args.brokers, allowed=(KAYAK, KAFKA)),
        kayak_flush=flush,
    )
    return settings, args.markdown, args.plot


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(plot, "transactions", results_table(settings, samples))


if __name__ == "__main__":
    main(sys.argv[1:])
