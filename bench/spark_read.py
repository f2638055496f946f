"""Spark batch reads through kayak's data source, against Parquet holding the same rows.

A topic of ``--mib`` MiB (default 1024) of ``--value-size`` byte values (1 KiB) over
``--partitions`` partitions (4) is produced into kayak's broker (``--flush never``) with
kayak's producer. Spark (``local[2]``) then runs the same query on two sources, taking
turns, ``--runs`` times (3):

* ``kayak``: ``spark.read.format("kayak")`` over the topic (one task per partition, each
  reading its partition with kayak's consumer and handing Spark Arrow batches);
* ``parquet``: the same rows, written once (in this run) by Spark to Parquet from the topic.

The query is ``count(*)`` plus ``sum(length(value))``, so every value is materialised. The
table shows rows/s and MiB/s (value bytes) as medians, and the median of the per-run ratios.

Run: ``.venv/bin/python bench/spark_read.py [--mib 1024] [--runs 3] [--partitions 4]``;
``--profile`` profiles one partition's read in this process (cProfile, top functions)
instead of running Spark.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import MiB, start_kayak
from result_tables import Table, add_plot_option, median, paired_ratio, plot_table, spread, times

TOPIC = "spark-bench"
CHUNK = 2_000  # records per send_batch call


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

    return local_spark("local[2]", "kayak-spark-read-bench", **{"spark.driver.memory": "2g"})


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


def main() -> None:
    args = parse_args()
    root = Path(args.data_root)
    broker = start_kayak(root, "never")
    parquet_dir = Path(tempfile.mkdtemp(prefix="kayak-spark-bench-parquet-", dir=root))
    try:
        print(f"kayak broker at {broker.bootstrap}")
        records = fill(broker.bootstrap, args.mib, args.value_size, args.partitions)
        if args.profile:
            profile_read(broker.bootstrap, args.partitions)
            return
        spark = spark_session()
        kafka_df = (
            spark.read.format("kayak")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .load()
        )
        started = time.perf_counter()
        kafka_df.write.mode("overwrite").parquet(str(parquet_dir / "data"))
        print(f"  wrote Parquet in {time.perf_counter() - started:.1f} s")
        parquet_df = spark.read.parquet(str(parquet_dir / "data"))
        # One untimed pass each: Python workers, JIT and page cache warm.
        query(kafka_df)
        query(parquet_df)
        results: dict[str, list[float]] = {"kayak": [], "parquet": []}
        byte_rates: dict[str, list[float]] = {"kayak": [], "parquet": []}
        for run in range(args.runs):
            for name, df in (("kayak", kafka_df), ("parquet", parquet_df)):
                rows, value_bytes, seconds = query(df)
                if rows != records:
                    raise RuntimeError(f"{name}: {rows:,} rows, expected {records:,}")
                results[name].append(rows / seconds)
                byte_rates[name].append(value_bytes / MiB / seconds)
                print(f"  run {run + 1} {name}: {seconds:.2f} s")
        spark.stop()
        report(args, records, results, byte_rates)
    finally:
        broker.stop()
        shutil.rmtree(parquet_dir, ignore_errors=True)


def report(
    args: argparse.Namespace,
    records: int,
    results: dict[str, list[float]],
    byte_rates: dict[str, list[float]],
) -> None:
    print(
        f"\n{records:,} records of {args.value_size} B, {args.partitions} partitions, "
        f"Spark local[2], medians of {args.runs} runs\n"
    )
    table = Table(["source", "rows/s", "MiB/s", "MiB/s runs (min-max)", "x parquet"])
    for name in ("kayak", "parquet"):
        table.add(
            name,
            median(results[name]),
            median(byte_rates[name]),
            spread(byte_rates[name]),
            times(paired_ratio(results[name], results["parquet"])),
        )
    print(table.markdown() if args.markdown else table.text())
    plot_table(args.plot, "spark_read", table)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="topic size in MiB (1024)")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per value (1024)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians are shown (3)")
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="scratch space")
    parser.add_argument("--profile", action="store_true", help="cProfile one partition's read")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    add_plot_option(parser)
    return parser.parse_args()


if __name__ == "__main__":
    main()
