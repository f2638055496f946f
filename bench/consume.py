"""Consumer throughput on one partition (or ``--partitions N``): kayak's consumer against
confluent-kafka, the Java client, aiokafka and kafka-python, on kayak's broker and on Apache
Kafka in the same run.

One partition is filled with ``--size`` MiB (default 1024) of ``--value-size`` (1 KiB)
records by confluent-kafka's producer (batches of up to 1 MB: ``batch.size`` 1000000,
``linger.ms`` 50, no compression). Each reader then reads the whole partition from offset 0
and touches every record (adds up ``len(value)``), and the rate is value bytes over the wall
time from the first poll to the last record. Every reader runs in a fresh process (no
shared allocator, GC or thread state) that is set up, then waits to be timed
(``measured_clients.run_measured``): the CPU time of the reader's process (all its threads)
and of the broker's over the timed read are read from /proc and shown per record beside every
rate.
Readers take turns within each run, and the table shows medians over ``--runs`` runs
(default 3) and the medians of the per-run ratios to confluent-kafka and to the Java client
on the same broker.

Readers, with each client's defaults unless the row says otherwise (batched calls ask for up
to 10,000 records, so no client pays a per-call overhead every few hundred records):

* kayak ``getmany`` (``ConsumerRecord`` objects), kayak ``getmany_values`` (the values-only
  fast path), kayak ``async for`` (one record per await), kayak ``poll (sync, per record)``
  (the blocking facade, ``for record in consumer``: one record per call);
* confluent-kafka ``consume(10000)``; aiokafka ``getmany``; kafka-python ``poll``;
* the Java client: Kafka 4.3's ``KafkaConsumer.poll()`` (``max.poll.records`` 10,000),
  iterating the records one by one (bench/java/ConsumerBench.java, compiled on first use; it
  reads the first 100,000 records once before it is timed, with a consumer it then closes,
  so that its JIT has compiled the read path as in a long-running consumer);
* "8 MiB fetches" rows: kayak, confluent-kafka and Java with ``max.partition.fetch.bytes`` =
  ``fetch.max.bytes`` = 8 MiB (confluent also ``queued.max.messages.kbytes`` 1 GiB, as
  bench/broker_consume.py tunes it).

``--partitions N`` fills N partitions (records spread over them by the producer's default
partitioner) and every reader reads all of them from offset 0; the issue's targets are for 1
and 8.

Brokers (``--brokers``, default ``kayak,kafka``; ``tansu`` too if installed): kayak's
(``python -m kayak broker --flush never``), Apache Kafka 4.3 (bench/kafka_peer.py) and Tansu
(in-memory storage), each warmed up alike before it is filled (``kafka_peer.warm_up``).

Run: ``python bench/consume.py`` (1 GiB, 3 runs, both brokers: several minutes),
``--quick`` (64 MiB, 1 run, 10,000-message warm-up), ``--profile`` (cProfile of kayak's
getmany reader, top functions), ``--markdown``, ``--plot docs/bench/client_consume.svg``;
``--readers a,b`` to pick rows.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "java"))

from jvm_clients import CONSUMER, java_client_command
from kafka_peer import TANSU, WARM_UP_MESSAGES, parse_brokers, start_broker, warm_up
from measured_clients import child_ready, child_result, run_measured
from peers import BrokerProcess, MiB
from protocol_clients import run_async
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

TOPIC = "consume-bench"
POLL_RECORDS = 10_000
BIG_FETCH = 8 * MiB
DISTINCT_VALUES = 1000
JAVA_WARM_UP_RECORDS = 100_000
_BIG_FETCHES = {"max.partition.fetch.bytes": BIG_FETCH, "fetch.max.bytes": BIG_FETCH}


@dataclass(frozen=True)
class Reader:
    name: str
    client: str  # which read function
    config: dict[str, Any] = field(default_factory=dict)
    baseline: str = "confluent"  # the rows this one is compared with
    java_baseline: str = "java"


READERS = {
    "kayak": Reader("kayak getmany", "kayak"),
    "kayak-values": Reader("kayak getmany_values", "kayak-values"),
    "kayak-iter": Reader("kayak async for", "kayak-iter"),
    "kayak-poll": Reader("kayak poll (sync, per record)", "kayak-poll"),
    "confluent": Reader("confluent-kafka consume", "confluent"),
    "java": Reader("Java consumer poll", "java"),
    "aiokafka": Reader("aiokafka getmany", "aiokafka"),
    "kafka-python": Reader("kafka-python poll", "kafka-python"),
    "kayak-8m": Reader(
        "kayak getmany, 8 MiB fetches", "kayak", _BIG_FETCHES, "confluent-8m", "java-8m"
    ),
    "kayak-values-8m": Reader(
        "kayak getmany_values, 8 MiB fetches",
        "kayak-values",
        _BIG_FETCHES,
        "confluent-8m",
        "java-8m",
    ),
    "confluent-8m": Reader(
        "confluent-kafka, 8 MiB fetches",
        "confluent",
        {
            **_BIG_FETCHES,
            "receive.message.max.bytes": BIG_FETCH + MiB,
            "queued.max.messages.kbytes": 1024 * 1024,
        },
        "confluent-8m",
        "java-8m",
    ),
    "java-8m": Reader(
        "Java consumer, 8 MiB fetches", "java", _BIG_FETCHES, "confluent-8m", "java-8m"
    ),
}


@dataclass(frozen=True)
class Sample:
    """One reader's timed read: MiB/s of values, and CPU µs per record (reader, broker)."""

    mib_per_second: float
    client_us: float
    broker_us: float


# -- the Python readers (each runs in its own process) ---------------------------------------


PARTITIONS = int(os.environ.get("BENCH_CONSUME_PARTITIONS", "1"))  # set by --partitions


async def _kayak(bootstrap: str, records: int, config: dict[str, Any], mode: str) -> float:
    from kayak.client.consumer import Consumer, TopicPartition

    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    async with Consumer({"bootstrap.servers": bootstrap, **config}) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = total = 0
        child_ready()
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
    """The timed read is over: tell the parent (which reads the CPU clocks meanwhile)."""
    elapsed = time.perf_counter() - started
    if count != records:
        raise RuntimeError(f"read {count} records, expected {records}")
    child_result({"seconds": elapsed, "records": count, "bytes": total})
    return elapsed


def read_kayak_sync(bootstrap: str, records: int, config: dict[str, Any]) -> None:
    """The blocking facade, one record per step (``for record in consumer``)."""
    from kayak.client.sync import Consumer, TopicPartition

    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer = Consumer({"bootstrap.servers": bootstrap, **config})
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    count = total = 0
    child_ready()
    started = time.perf_counter()
    for record in consumer:
        total += len(record.value or b"")
        count += 1
        if count >= records:
            break
    _finish(started, count, records, total)
    consumer.close()


def read_confluent(bootstrap: str, records: int, config: dict[str, Any]) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    count = total = 0
    child_ready()
    started = time.perf_counter()
    while count < records:
        for message in consumer.consume(num_messages=min(POLL_RECORDS, records - count), timeout=1):
            if message.error():
                raise RuntimeError(str(message.error()))
            total += len(message.value() or b"")
            count += 1
    _finish(started, count, records, total)
    consumer.close()


async def _aiokafka(bootstrap: str, records: int) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = total = 0
        child_ready()
        started = time.perf_counter()
        while count < records:
            batches = await consumer.getmany(timeout_ms=1000, max_records=POLL_RECORDS)
            for batch in batches.values():
                for record in batch:
                    total += len(record.value or b"")
                count += len(batch)
        _finish(started, count, records, total)
    finally:
        await consumer.stop()


def read_kafka_python(bootstrap: str, records: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    count = total = 0
    child_ready()
    started = time.perf_counter()
    while count < records:
        for batch in consumer.poll(timeout_ms=1000, max_records=POLL_RECORDS).values():
            for record in batch:
                total += len(record.value or b"")
            count += len(batch)
    _finish(started, count, records, total)
    consumer.close()


READ_FUNCTIONS: dict[str, Callable[[str, int, dict[str, Any]], object]] = {
    "kayak": lambda b, n, c: run_async(_kayak(b, n, c, "records")),
    "kayak-values": lambda b, n, c: run_async(_kayak(b, n, c, "values")),
    "kayak-iter": lambda b, n, c: run_async(_kayak(b, n, c, "iter")),
    "kayak-poll": read_kayak_sync,
    "confluent": read_confluent,
    "aiokafka": lambda b, n, c: run_async(_aiokafka(b, n)),
    "kafka-python": lambda b, n, c: read_kafka_python(b, n),
}


def reader_command(reader: Reader, bootstrap: str, records: int) -> list[str]:
    """How one reader's process is started: this script, or the Java client."""
    if reader.client == "java":
        settings = [f"{key}={value}" for key, value in reader.config.items()]
        return java_client_command(
            CONSUMER, [bootstrap, f"{TOPIC}:{PARTITIONS}", records, JAVA_WARM_UP_RECORDS, *settings]
        )
    return [
        sys.executable, __file__, "--read", reader.client, "--bootstrap", bootstrap,
        "--records", str(records), "--config", json.dumps(reader.config),
    ]  # fmt: skip


def measure(reader: Reader, broker: BrokerProcess, records: int, timeout: float) -> Sample:
    """Run one reader in a fresh process: its rate, and its and the broker's CPU."""
    command = reader_command(reader, broker.bootstrap, records)
    try:
        done = run_measured(command, broker.pid, timeout)
    except RuntimeError as exc:
        raise RuntimeError(f"{reader.name} failed: {exc}") from exc
    result = done.result
    if result["records"] != records:
        raise RuntimeError(f"{reader.name} read {result['records']} of {records} records")
    return Sample(
        result["bytes"] / result["seconds"] / MiB,
        done.client_cpu / records * 1e6,
        done.broker_cpu / records * 1e6,
    )


# -- filling -------------------------------------------------------------------------------


def fill(bootstrap: str, size: int, value_size: int) -> int:
    """Write ``size`` bytes of values to the partition; returns the record count."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
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
                producer.produce(TOPIC, values[i % DISTINCT_VALUES], partition=i % PARTITIONS)
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
    """cProfile of kayak's getmany reader, in this process (no parent to wait for: the
    READY / result handshake reads from an empty stdin)."""
    sys.stdin = open(os.devnull)  # noqa: SIM115 - for the rest of this process
    profiler = cProfile.Profile()
    profiler.enable()
    elapsed = run_async(_kayak(bootstrap, records, config, "records"))
    profiler.disable()
    print(f"\nkayak getmany under cProfile: {records / elapsed:,.0f} records/s (slowed by it)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    args = parse_args()
    global PARTITIONS
    PARTITIONS = args.partitions
    os.environ["BENCH_CONSUME_PARTITIONS"] = str(args.partitions)  # for the readers' processes
    if args.read:
        READ_FUNCTIONS[args.read](args.bootstrap, args.records, json.loads(args.config))
        return
    size = int((64 if args.quick else args.size) * MiB)
    runs = 1 if args.quick else args.runs
    if args.quick:
        args.warm_up = min(args.warm_up, 10_000)
    names = args.readers.split(",") if args.readers else list(READERS)
    readers = [READERS[n] for n in names]
    wanted = [n for n in parse_brokers(args.brokers) if not (args.no_tansu and n == TANSU)]
    brokers: list[tuple[str, BrokerProcess]] = []
    try:
        for name in wanted[:1] if args.profile else wanted:
            broker = start_broker(name, args.data_root, kayak_flush="never", warm=False)
            brokers.append((name, broker))
            if args.warm_up:
                warm_up(broker, args.warm_up)
        counts = {}
        for name, broker in brokers:
            print(f"filling {name} ...", flush=True)
            counts[name] = fill(broker.bootstrap, size, args.value_size)
        if args.profile:
            profile(brokers[0][1].bootstrap, counts[brokers[0][0]], {})
            return
        samples = measure_all(brokers, readers, counts, runs, args.timeout)
    finally:
        for _, broker in brokers:
            broker.stop()
    report([name for name, _ in brokers], readers, samples, args)


def measure_all(
    brokers: list[tuple[str, BrokerProcess]],
    readers: list[Reader],
    counts: dict[str, int],
    runs: int,
    timeout: float,
) -> dict[tuple[str, str], list[Sample]]:
    """Every reader on every broker, ``runs`` times, taking turns."""
    samples: dict[tuple[str, str], list[Sample]] = {}
    for run in range(runs):
        for name, broker in brokers:
            for reader in readers:
                sample = measure(reader, broker, counts[name], timeout)
                samples.setdefault((name, reader.name), []).append(sample)
                print(
                    f"  run {run + 1}: {reader.name} <- {name}: {sample.mib_per_second:,.0f} MiB/s",
                    flush=True,
                )
    return samples


def report(
    broker_names: list[str],
    readers: list[Reader],
    samples: dict[tuple[str, str], list[Sample]],
    args: argparse.Namespace,
) -> None:
    table = Table(["reader", "broker", "MiB/s", "spread", "records/s", "reader CPU µs/rec",
                   "broker CPU µs/rec", "vs confluent", "vs Java"])  # fmt: skip
    names = {key: r.name for key, r in READERS.items()}

    def rates(broker: str, reader_name: str) -> list[float]:
        return [s.mib_per_second for s in samples.get((broker, reader_name), [])]

    for broker in broker_names:
        for reader in readers:
            mine = samples.get((broker, reader.name), [])
            mib = rates(broker, reader.name)
            java = names[reader.java_baseline]
            table.add(
                reader.name,
                broker,
                human(median(mib)),
                spread(mib),
                f"{median(mib) * MiB / args.value_size:,.0f}",
                median([s.client_us for s in mine]),
                median([s.broker_us for s in mine]),
                times(paired_ratio(mib, rates(broker, names[reader.baseline]))),
                "-" if java == reader.name else times(paired_ratio(mib, rates(broker, java))),
            )
    print()
    runs = len(next(iter(samples.values()), []))
    print(
        f"{args.partitions} partition(s), {args.value_size}-byte values, medians of {runs} run(s); "
        "CPU from /proc over the timed read"
    )
    print(table.markdown() if args.markdown else table.text())
    plot_table(args.plot, "client_consume", table)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB, one run, short warm-up")
    parser.add_argument("--size", type=float, default=1024, help="MiB of values to write")
    parser.add_argument("--runs", type=int, default=3, help="runs to take medians of")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions to fill")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per value")
    parser.add_argument("--readers", help=f"comma-separated, of: {','.join(READERS)}")
    parser.add_argument("--brokers", default="kayak,kafka", help="of kayak, kafka, tansu")
    parser.add_argument("--no-tansu", action="store_true", help="leave Tansu out of --brokers")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_MESSAGES, help="messages to warm each broker with"
    )
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
