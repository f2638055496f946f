"""Consumer throughput on one partition: kayak's consumer against confluent-kafka, aiokafka
and kafka-python, on the same broker in the same run.

One partition is filled with ``--size`` MiB (default 1024) of ``--value-size`` (1 KiB)
records by confluent-kafka's producer (batches of up to 1 MB: ``batch.size`` 1000000,
``linger.ms`` 50, no compression). Each reader then reads the whole partition from offset 0
and touches every record (adds up ``len(value)``), and the rate is value bytes over the wall
time from the first poll to the last record. Every reader runs in a fresh process (no
shared allocator, GC or thread state), readers take turns within each run, and the table
shows medians over ``--runs`` runs (default 3) and the median of the per-run ratios to
confluent-kafka on the same broker.

Readers, with each client's defaults unless the row says otherwise (batched calls ask for up
to 10,000 records, so no client pays a per-call overhead every few hundred records):

* kayak ``getmany`` (``ConsumerRecord`` objects), kayak ``getmany_values`` (the values-only
  fast path), kayak ``async for`` (one record per await);
* confluent-kafka ``consume(10000)``; aiokafka ``getmany``; kafka-python ``poll``;
* "8 MiB fetches" rows: kayak and confluent-kafka with ``max.partition.fetch.bytes`` =
  ``fetch.max.bytes`` = 8 MiB (confluent also ``queued.max.messages.kbytes`` 1 GiB, as
  bench/broker_consume.py tunes it).

Brokers: kayak's (``python -m kayak broker``) and Tansu (in-memory storage).

Run: ``python bench/consume.py`` (1 GiB, 3 runs, both brokers: several minutes),
``--quick`` (64 MiB, 1 run, kayak's broker), ``--profile`` (cProfile of kayak's getmany
reader, top functions), ``--markdown``; ``--readers a,b`` to pick rows.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import (
    BrokerProcess,
    MiB,
    Table,
    add_plot_option,
    human,
    median,
    paired_ratio,
    plot_table,
    run_async,
    spread,
    start_kayak,
    start_tansu,
    times,
)

TOPIC = "consume-bench"
POLL_RECORDS = 10_000
BIG_FETCH = 8 * MiB
DISTINCT_VALUES = 1000


@dataclass(frozen=True)
class Reader:
    name: str
    client: str  # which read function
    config: dict[str, Any] = field(default_factory=dict)
    baseline: str = "confluent"  # the row this one is compared with


READERS = {
    "kayak": Reader("kayak getmany", "kayak"),
    "kayak-values": Reader("kayak getmany_values", "kayak-values"),
    "kayak-iter": Reader("kayak async for", "kayak-iter"),
    "confluent": Reader("confluent-kafka consume", "confluent"),
    "aiokafka": Reader("aiokafka getmany", "aiokafka"),
    "kafka-python": Reader("kafka-python poll", "kafka-python"),
    "kayak-8m": Reader(
        "kayak getmany, 8 MiB fetches",
        "kayak",
        {"max.partition.fetch.bytes": BIG_FETCH, "fetch.max.bytes": BIG_FETCH},
        "confluent-8m",
    ),
    "kayak-values-8m": Reader(
        "kayak getmany_values, 8 MiB fetches",
        "kayak-values",
        {"max.partition.fetch.bytes": BIG_FETCH, "fetch.max.bytes": BIG_FETCH},
        "confluent-8m",
    ),
    "confluent-8m": Reader(
        "confluent-kafka, 8 MiB fetches",
        "confluent",
        {
            "max.partition.fetch.bytes": BIG_FETCH,
            "fetch.max.bytes": BIG_FETCH,
            "receive.message.max.bytes": BIG_FETCH + MiB,
            "queued.max.messages.kbytes": 1024 * 1024,
        },
        "confluent-8m",
    ),
}


# -- the readers (each runs in its own process) ----------------------------------------------


async def _kayak(bootstrap: str, records: int, config: dict[str, Any], mode: str) -> float:
    from kayak.client.consumer import Consumer, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    async with Consumer({"bootstrap.servers": bootstrap, **config}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        count = total = 0
        started = time.perf_counter()
        if mode == "iter":
            async for record in consumer:
                total += len(record.value or b"")
                count += 1
                if count >= records:
                    break
        while count < records:
            if mode == "values":
                batches = await consumer.getmany_values(max_records=POLL_RECORDS, timeout_ms=1000)
                for values in batches.values():
                    for value in values:
                        total += len(value or b"")
                    count += len(values)
            else:
                for batch in (
                    await consumer.getmany(max_records=POLL_RECORDS, timeout_ms=1000)
                ).values():
                    for record in batch:
                        total += len(record.value or b"")
                    count += len(batch)
        return _finish(started, count, records, total)


def _finish(started: float, count: int, records: int, total: int) -> float:
    elapsed = time.perf_counter() - started
    if count != records:
        raise RuntimeError(f"read {count} records, expected {records}")
    return total / elapsed


def read_confluent(bootstrap: str, records: int, config: dict[str, Any]) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    count = total = 0
    started = time.perf_counter()
    while count < records:
        for message in consumer.consume(num_messages=min(POLL_RECORDS, records - count), timeout=1):
            if message.error():
                raise RuntimeError(str(message.error()))
            total += len(message.value() or b"")
            count += 1
    rate = _finish(started, count, records, total)
    consumer.close()
    return rate


async def _aiokafka(bootstrap: str, records: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        count = total = 0
        started = time.perf_counter()
        while count < records:
            batches = await consumer.getmany(timeout_ms=1000, max_records=POLL_RECORDS)
            for batch in batches.values():
                for record in batch:
                    total += len(record.value or b"")
                count += len(batch)
        return _finish(started, count, records, total)
    finally:
        await consumer.stop()


def read_kafka_python(bootstrap: str, records: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    count = total = 0
    started = time.perf_counter()
    while count < records:
        for batch in consumer.poll(timeout_ms=1000, max_records=POLL_RECORDS).values():
            for record in batch:
                total += len(record.value or b"")
            count += len(batch)
    rate = _finish(started, count, records, total)
    consumer.close()
    return rate


READ_FUNCTIONS: dict[str, Callable[[str, int, dict[str, Any]], float]] = {
    "kayak": lambda b, n, c: run_async(_kayak(b, n, c, "records")),
    "kayak-values": lambda b, n, c: run_async(_kayak(b, n, c, "values")),
    "kayak-iter": lambda b, n, c: run_async(_kayak(b, n, c, "iter")),
    "confluent": read_confluent,
    "aiokafka": lambda b, n, c: run_async(_aiokafka(b, n)),
    "kafka-python": lambda b, n, c: read_kafka_python(b, n),
}


def measure(reader: Reader, bootstrap: str, records: int, timeout: float) -> float:
    """Run one reader in a fresh process; its rate in bytes/second."""
    command = [
        sys.executable, __file__, "--read", reader.client, "--bootstrap", bootstrap,
        "--records", str(records), "--config", json.dumps(reader.config),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{reader.name} failed: {done.stderr.strip()[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])


# -- filling -------------------------------------------------------------------------------


def fill(bootstrap: str, size: int, value_size: int) -> int:
    """Write ``size`` bytes of values to the partition; returns the record count."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 256 * 1024,
        }
    )
    values = [os.urandom(value_size) for _ in range(DISTINCT_VALUES)]
    records = max(1, size // value_size)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, values[i % DISTINCT_VALUES], partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise RuntimeError("the fill did not complete")
    elapsed = time.perf_counter() - started
    print(
        f"  filled {records:,} records ({records * value_size / MiB:,.0f} MiB) in {elapsed:.1f} s"
    )
    return records


# -- the run -------------------------------------------------------------------------------


def profile(bootstrap: str, records: int, config: dict[str, Any]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    rate = run_async(_kayak(bootstrap, records, config, "records"))
    profiler.disable()
    print(f"\nkayak getmany under cProfile: {rate / MiB:,.0f} MiB/s (profiling slows it)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    args = parse_args()
    if args.read:
        rate = READ_FUNCTIONS[args.read](args.bootstrap, args.records, json.loads(args.config))
        print(json.dumps({"rate": rate}))
        return
    size = int((64 if args.quick else args.size) * MiB)
    runs = 1 if args.quick else args.runs
    names = args.readers.split(",") if args.readers else list(READERS)
    readers = [READERS[n] for n in names]
    brokers = [start_kayak(args.data_root)]
    try:
        if not (args.quick or args.no_tansu):
            brokers.append(start_tansu(args.data_root))
        counts = {}
        for broker in brokers:
            print(f"filling {broker.name} ...", flush=True)
            counts[broker.name] = fill(broker.bootstrap, size, args.value_size)
        if args.profile:
            profile(brokers[0].bootstrap, counts[brokers[0].name], {})
            return
        rates = measure_all(brokers, readers, counts, runs, args.timeout)
    finally:
        for broker in brokers:
            broker.stop()
    report(brokers, readers, rates, counts, args)


def measure_all(
    brokers: list[BrokerProcess],
    readers: list[Reader],
    counts: dict[str, int],
    runs: int,
    timeout: float,
) -> dict[tuple[str, str], list[float]]:
    """Every reader on every broker, ``runs`` times, taking turns; MiB/s samples."""
    rates: dict[tuple[str, str], list[float]] = {}
    for run in range(runs):
        for broker in brokers:
            for reader in readers:
                rate = measure(reader, broker.bootstrap, counts[broker.name], timeout) / MiB
                rates.setdefault((broker.name, reader.name), []).append(rate)
                print(
                    f"  run {run + 1}: {reader.name} <- {broker.name}: {rate:,.0f} MiB/s",
                    flush=True,
                )
    return rates


def report(
    brokers: list[BrokerProcess],
    readers: list[Reader],
    rates: dict[tuple[str, str], list[float]],
    counts: dict[str, int],
    args: argparse.Namespace,
) -> None:
    table = Table(["reader", "broker", "MiB/s", "spread", "records/s", "vs confluent"])
    names = {key: r.name for key, r in READERS.items()}
    for broker in brokers:
        for reader in readers:
            samples = rates.get((broker.name, reader.name), [])
            baseline = rates.get((broker.name, names[reader.baseline]), [])
            records_per_s = median(samples) * MiB / args.value_size
            table.add(
                reader.name,
                broker.name,
                human(median(samples)),
                spread(samples),
                f"{records_per_s:,.0f}",
                times(paired_ratio(samples, baseline)),
            )
    print()
    runs = len(next(iter(rates.values()), []))
    print(f"one partition, {args.value_size}-byte values, medians of {runs} run(s)")
    print(table.markdown() if args.markdown else table.text())
    plot_table(args.plot, "client_consume", table)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB, one run, kayak's broker")
    parser.add_argument("--size", type=float, default=1024, help="MiB of values to write")
    parser.add_argument("--runs", type=int, default=3, help="runs to take medians of")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per value")
    parser.add_argument("--readers", help=f"comma-separated, of: {','.join(READERS)}")
    parser.add_argument("--no-tansu", action="store_true", help="kayak's broker only")
    parser.add_argument("--profile", action="store_true", help="cProfile kayak's getmany reader")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    add_plot_option(parser)
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="broker data dir")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per reader run")
    # internal: run one reader in this process
    parser.add_argument("--read", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    main()
