"""Spark batch reads: its own Kafka source from kayak and from Apache Kafka, kayak's data
source, and Parquet holding the same rows.

A topic of ``--mib`` MiB (default 512) of ``--value-size`` byte values (1 KiB) over
``--partitions`` partitions (4) is produced with kayak's producer into kayak's broker
(``--flush never``) and into a single-node KRaft Apache Kafka (bench/kafka_peer.py, Kafka's
defaults: page cache only too). Spark (``local[2]``, with Spark's Kafka connector jars from
``make jvm``) then runs the same query on four sources, taking turns, ``--runs`` times (3):

* ``format("kafka")`` from kayak, and from Apache Kafka: Spark's own Kafka source (JVM);
* ``format("kayak")`` from kayak: kayak's Python data source (one task per partition, each
  reading its partition with kayak's consumer and handing Spark Arrow batches);
* ``parquet``: the same rows, written once (in this run) by Spark to Parquet from the topic.

The query is ``count(*)`` plus ``sum(length(value))``, so every value is materialised. The
table shows rows/s and MiB/s (value bytes) as medians, the medians of the per-run ratios to
Parquet and to ``format("kafka")`` from Apache Kafka, and CPU µs per record (user + system,
/proc) of the Spark JVM, its Python workers and the broker read from.

Run: ``.venv/bin/python bench/spark_read.py [--mib 512] [--runs 3] [--partitions 4]``
(``--quick``: 16 MiB, one run, a smoke); ``--profile`` profiles one partition's read from
kayak in this process (cProfile, top functions) instead of running Spark.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cdc_cpu import own_cpu_s, tree_cpu_s
from kafka_peer import start_apache_kafka
from peers import MiB, start_kayak
from result_tables import Table, add_plot_option, median, paired_ratio, plot_table, spread, times

TOPIC = "spark-bench"
CHUNK = 2_000  # records per send_batch call
KAFKA_AT_KAYAK = 'format("kafka") from kayak'
KAFKA_AT_KAFKA = 'format("kafka") from Apache Kafka'
KAYAK = 'format("kayak") from kayak'
PARQUET = "parquet"


def fill(bootstrap: str, mib: int, value_size: int, partitions: int) -> int:
    """Produce ``mib`` MiB of values spread evenly over the partitions; returns the count."""
    from kayak.client.admin import NewTopic
    from kayak.client.sync import Admin, Producer

    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])
    records = max(partitions, mib * MiB // value_size)
    distinct = [os.urandom(value_size) for _ in range(256)]
    values = [distinct[i % 256] for i in range(CHUNK)]
    started = time.perf_counter()
    with Producer(
        bootstrap_servers=bootstrap, linger_ms=5, batch_size=1_000_000, acks=1
    ) as producer:
        pending = []
        sent = 0
        while sent < records:
            count = min(CHUNK, records - sent)
            partition = (sent // CHUNK) % partitions
            pending.append(producer.send_batch(TOPIC, values[:count], partition=partition))
            sent += count
            if len(pending) >= 64:
                for future in pending:
                    future.result()
                pending.clear()
        producer.flush()
        for future in pending:
            future.result()
    elapsed = time.perf_counter() - started
    print(
        f"  filled {records:,} records ({records * value_size / MiB:,.0f} MiB) in {elapsed:.1f} s"
    )
    return records


def spark_session() -> Any:
    from kayak.pipeline.session import local_spark

    settings: dict[str, Any] = {"spark.driver.memory": "2g"}  # keys are Spark's, not keywords
    return local_spark("local[2]", "kayak-spark-read-bench", kafka_connector=True, **settings)


def query(df: Any) -> tuple[int, int, float]:
    """Run the benchmark query; (rows, value bytes, seconds)."""
    started = time.perf_counter()
    row = df.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()[0]
    return int(row["n"]), int(row["bytes"]), time.perf_counter() - started


def profile_read(bootstrap: str, partitions: int) -> None:
    """cProfile one partition's read (the executor's code path) in this process."""
    from kayak.client.sync import Admin
    from kayak.client.types import TopicPartition
    from kayak.spark.arrow import kafka_arrow_schema
    from kayak.spark.options import parse_read_options
    from kayak.spark.reader import KafkaInputPartition, read_range

    with Admin(bootstrap_servers=bootstrap) as admin:
        end = admin.list_offsets({TopicPartition(TOPIC, 0): -1})[TopicPartition(TOPIC, 0)].offset
    options = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False
    )
    work = KafkaInputPartition(TOPIC, 0, 0, end)
    schema = kafka_arrow_schema(False)
    sum(batch.num_rows for batch in read_range(options, work, schema))  # warm: imports, caches
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    rows = sum(batch.num_rows for batch in read_range(options, work, schema))
    profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"  one partition: {rows:,} rows in {elapsed:.2f} s ({rows / elapsed:,.0f} rows/s)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def spark_processes() -> dict[str, Callable[[], float]]:
    """CPU seconds so far of the Spark JVM this process launched and of its Python workers."""
    from cdc_measure import spark_jvm_pid

    jvm = spark_jvm_pid()
    return {
        "Spark JVM": lambda: own_cpu_s(jvm),
        "Python workers": lambda: tree_cpu_s(jvm, without_root=True),
    }


def main() -> None:
    args = parse_args()
    root = Path(args.data_root)
    kayak = start_kayak(root, "never")
    kafka = start_apache_kafka(root)
    parquet_dir = Path(tempfile.mkdtemp(prefix="kayak-spark-bench-parquet-", dir=root))
    try:
        print(f"kayak broker at {kayak.bootstrap}, Apache Kafka at {kafka.bootstrap}")
        records = fill(kayak.bootstrap, args.mib, args.value_size, args.partitions)
        if fill(kafka.bootstrap, args.mib, args.value_size, args.partitions) != records:
            raise RuntimeError("the two brokers were filled with different counts")
        if args.profile:
            profile_read(kayak.bootstrap, args.partitions)
            return
        spark = spark_session()
        sources: dict[str, tuple[Any, int | None]] = {
            KAFKA_AT_KAYAK: (reader(spark, "kafka", kayak.bootstrap), kayak.pid),
            KAFKA_AT_KAFKA: (reader(spark, "kafka", kafka.bootstrap), kafka.pid),
            KAYAK: (reader(spark, "kayak", kayak.bootstrap), kayak.pid),
        }
        started = time.perf_counter()
        sources[KAYAK][0].write.mode("overwrite").parquet(str(parquet_dir / "data"))
        print(f"  wrote Parquet in {time.perf_counter() - started:.1f} s")
        sources[PARQUET] = (spark.read.parquet(str(parquet_dir / "data")), None)
        spark_cpu = spark_processes()
        # One untimed pass each: Python workers, JIT and page cache warm.
        for df, _ in sources.values():
            query(df)
        results: dict[str, list[float]] = {name: [] for name in sources}
        byte_rates: dict[str, list[float]] = {name: [] for name in sources}
        cpu_us: dict[str, dict[str, list[float]]] = {name: {} for name in sources}
        for run in range(args.runs):
            for name, (df, broker_pid) in sources.items():
                groups = dict(spark_cpu)
                if broker_pid is not None:
                    groups["broker"] = partial(tree_cpu_s, broker_pid)
                before = {part: read() for part, read in groups.items()}
                rows, value_bytes, seconds = query(df)
                for part, read in groups.items():
                    used = read() - before[part]
                    cpu_us[name].setdefault(part, []).append(used / rows * 1e6)
                if rows != records:
                    raise RuntimeError(f"{name}: {rows:,} rows, expected {records:,}")
                results[name].append(rows / seconds)
                byte_rates[name].append(value_bytes / MiB / seconds)
                print(f"  run {run + 1} {name}: {seconds:.2f} s")
        spark.stop()
        report(args, records, results, byte_rates, cpu_us)
    finally:
        kayak.stop()
        kafka.stop()
        shutil.rmtree(parquet_dir, ignore_errors=True)


def reader(spark: Any, source: str, bootstrap: str) -> Any:
    """``spark.read.format(source)`` over the whole topic (earliest to latest)."""
    return (
        spark.read.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def report(
    args: argparse.Namespace,
    records: int,
    results: dict[str, list[float]],
    byte_rates: dict[str, list[float]],
    cpu_us: dict[str, dict[str, list[float]]],
) -> None:
    print(
        f"\n{records:,} records of {args.value_size} B, {args.partitions} partitions, "
        f"Spark local[2], medians of {args.runs} runs\n"
    )
    parts = ("Spark JVM", "Python workers", "broker")
    table = Table(
        ["source", "rows/s", "MiB/s", "MiB/s runs (min-max)", "x parquet",
         f"x {KAFKA_AT_KAFKA}", *(f"{part} CPU µs/record" for part in parts)]
    )  # fmt: skip
    for name in results:
        cpu = cpu_us[name]
        table.add(
            name,
            median(results[name]),
            median(byte_rates[name]),
            spread(byte_rates[name]),
            times(paired_ratio(results[name], results[PARQUET])),
            times(paired_ratio(results[name], results[KAFKA_AT_KAFKA])),
            *(median(cpu[part]) if part in cpu else float("nan") for part in parts),
        )
    print(table.markdown() if args.markdown else table.text())
    plot_table(args.plot, "spark_read", table)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="topic size in MiB (512)")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per value (1024)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians are shown (3)")
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="scratch space")
    parser.add_argument("--profile", action="store_true", help="cProfile one partition's read")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--quick", action="store_true", help="a smoke: 16 MiB, one run")
    add_plot_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.mib, args.runs = 16, 1
    return args


if __name__ == "__main__":
    main()
