"""End-to-end CDC benchmark: source database → capture → broker → Spark (local[2]) → target.

For each source (SQLite, PostgreSQL) a seeded workload of inserts, updates and deletes runs
against a captured table while the pipeline replicates it; the clock stops when the target
has applied every change. Reported: changes/s end to end and the latency of each applied
change from its source commit to the target's commit (p50/p99). The peer, measured in the
same run, is the source database itself: the same workload against an uncaptured copy of the
table, i.e. how fast changes can be made at all. The ratio says how much of that rate the
replication keeps up with (capture triggers or logical decoding included).

    .venv/bin/python bench/cdc.py --changes 100000 --markdown

Spark's reader alone against Parquet is ``bench/spark_read.py``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from result_tables import Table, add_plot_option, median, plot_table, times

from kayak.pipeline.runner import Pipeline
from kayak.pipeline.session import local_spark
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.workload import create_orders, run_workload

PG_DDL = """
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer text NOT NULL, status text NOT NULL, amount numeric(12,2),
    quantity integer NOT NULL, weight_kg double precision, note text, receipt bytea,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""


def pg_workload(dsn: str, changes: int, *, seed: int = 11, rate: float = 0.0) -> None:
    """The SQLite workload's mix (45 % inserts, 40 % updates, 15 % deletes) in PostgreSQL,
    paced to ``rate`` changes/s when given."""
    import psycopg

    rng = random.Random(seed)
    # autocommit: each `transaction()` block below is then a real transaction of 50 changes
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM orders")]
        next_id = max(ids, default=0) + 1
        done = 0
        started = time.monotonic()
        while done < changes:
            if rate > 0:
                time.sleep(max(0.0, started + done / rate - time.monotonic()))
            with conn.transaction():
                for _ in range(min(50, changes - done)):
                    roll = rng.random()
                    if roll < 0.45 or not ids:
                        conn.execute(
                            "INSERT INTO orders (id, customer, status, amount, quantity, "
                            "weight_kg, note, receipt) VALUES (%s, %s, 'new', %s, %s, %s, %s, %s)",
                            (next_id, f"customer {rng.randint(1, 999)} ✓",
                             f"{rng.randint(0, 9999)}.{rng.randint(0, 99):02d}",
                             rng.randint(1, 20), rng.random() * 40, None,
                             rng.randbytes(rng.randint(0, 32))),
                        )  # fmt: skip
                        ids.append(next_id)
                        next_id += 1
                    elif roll < 0.85:
                        conn.execute(
                            "UPDATE orders SET status = %s, amount = %s, updated_at = now() "
                            "WHERE id = %s",
                            (rng.choice(["paid", "shipped", "returned"]),
                             f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}", rng.choice(ids)),
                        )  # fmt: skip
                    else:
                        index = rng.randrange(len(ids))
                        ids[index], ids[-1] = ids[-1], ids[index]
                        conn.execute("DELETE FROM orders WHERE id = %s", (ids.pop(),))
                    done += 1


def pg_source(server: object, name: str, rows: int) -> str:
    import psycopg

    dsn_of = server.dsn  # type: ignore[attr-defined]
    with psycopg.connect(dsn_of(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = str(dsn_of(name))
    with psycopg.connect(dsn) as conn:
        conn.execute(PG_DDL)
    pg_workload(dsn, rows, seed=3)  # seed rows: the workload's insert-heavy mix
    return dsn


def drop_pg_database(server: object, name: str) -> None:
    """Drop a run's database and its replication slots (slots are the cluster's: one left
    behind keeps its WAL and a slot of the cluster's few)."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as admin:  # type: ignore[attr-defined]
        admin.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active_pid IS NOT NULL", (name,))  # fmt: skip
        for (slot,) in admin.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchall():
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def replicate(spark: object, spec: PipelineSpec, workload: Callable[[], None], changes: int
              ) -> tuple[float, float, float]:  # fmt: skip
    """(changes/s end to end, p50 ms, p99 ms) with the pipeline running during ``workload``."""
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        pipeline.catch_up()  # the initial snapshot, so the clock measures streaming only
        assert pipeline.job is not None
        pipeline.job.stats.latency.clear()
        started = time.monotonic()
        workload()
        pipeline.catch_up()
        elapsed = time.monotonic() - started
        (verification,) = pipeline.verify()
        if not verification.equal:
            raise SystemExit(f"replica differs: {verification.differences[:3]}")
        stats = pipeline.job.stats
        print(spark_batches(pipeline.job.query.recentProgress), file=sys.stderr)
        return changes / elapsed, stats.percentile(50), stats.percentile(99)


def spark_batches(progress: list[object]) -> str:
    """Where Spark's time per micro-batch went: medians of its ``durationMs`` parts over the
    batches that read records (Spark keeps the last 100)."""
    busy = [p for p in progress if getattr(p, "numInputRows", 0)]
    if not busy:
        return "spark: no batch read records"
    parts = sorted({k for p in busy for k in p.durationMs})  # type: ignore[attr-defined]
    medians = ", ".join(
        f"{k} {median([p.durationMs.get(k, 0) for p in busy]):,.0f}"  # type: ignore[attr-defined]
        for k in parts
    )
    rows = median([p.numInputRows for p in busy])  # type: ignore[attr-defined]
    return (
        f"spark: {len(busy)} batches with records, {rows:,.0f} records each; median ms: {medians}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=10_000, help="rows before capture starts")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--sources", default="sqlite,postgresql")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="pace the workload to this many changes/s (latency below "
                        "saturation); 0 = as fast as the source takes them")  # fmt: skip
    parser.add_argument("--markdown", action="store_true")
    add_plot_option(parser)
    args = parser.parse_args()
    spark = local_spark()
    root = Path(tempfile.mkdtemp(prefix="kayak-bench-cdc-"))
    table = Table(["source", "changes", "workload rate", "source alone changes/s",
                   "pipeline changes/s", "ratio", "latency p50 ms", "latency p99 ms"])  # fmt: skip
    server = None
    try:
        for kind in args.sources.split(","):
            alone, rates, p50s, p99s = [], [], [], []
            for run in range(args.runs):
                work = root / f"{kind}-{run}"
                work.mkdir()
                databases: list[str] = []  # PostgreSQL: this run's, dropped after it
                if kind == "sqlite":
                    plain, captured = str(work / "plain.db"), str(work / "source.db")
                    for path in (plain, captured):
                        create_orders(path, args.rows)
                    t = time.monotonic()
                    run_workload(plain, args.changes)
                    alone.append(args.changes / (time.monotonic() - t))
                    source = f"sqlite:{captured}"

                    def workload(path: str = captured) -> None:
                        run_workload(path, args.changes, rate=args.rate)
                else:
                    if server is None:
                        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
                        from tests.fixtures.postgres import find_bin_dir, start_cluster

                        bin_dir = find_bin_dir()
                        if bin_dir is None:
                            raise SystemExit("PostgreSQL not installed (make test installs it)")
                        server = start_cluster(bin_dir)
                    # A database per run, each with its own slot (named after it by
                    # default: slots are shared by the whole cluster).
                    databases += [f"plain{run}", f"source{run}"]
                    plain = pg_source(server, databases[0], args.rows)
                    source = pg_source(server, databases[1], args.rows)
                    t = time.monotonic()
                    pg_workload(plain, args.changes)
                    alone.append(args.changes / (time.monotonic() - t))

                    def workload(dsn: str = source) -> None:
                        pg_workload(dsn, args.changes, rate=args.rate)

                spec = PipelineSpec(
                    source=source,
                    tables=["orders"],
                    target=f"sqlite:{work / 'target.db'}",
                    work_dir=work / "pipeline",
                )
                try:
                    rate, p50, p99 = replicate(spark, spec, workload, args.changes)
                finally:
                    for name in databases:
                        drop_pg_database(server, name)
                rates.append(rate)
                p50s.append(p50)
                p99s.append(p99)
                print(f"{kind} run {run + 1}: {rate:,.0f} changes/s (source alone "
                      f"{alone[-1]:,.0f}/s), p50 {p50:,.0f} ms, p99 {p99:,.0f} ms")  # fmt: skip
            paced = f"{args.rate:,.0f}/s" if args.rate else "max"
            table.add(kind, f"{args.changes:,}", paced, f"{median(alone):,.0f}",
                      f"{median(rates):,.0f}",
                      times(median(rates) / median(alone)), f"{median(p50s):,.0f}",
                      f"{median(p99s):,.0f}")  # fmt: skip
    finally:
        if server is not None:
            server.stop()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(table.markdown() if args.markdown else table.text())
    plot_table(args.plot, "cdc", table)


if __name__ == "__main__":
    main()
