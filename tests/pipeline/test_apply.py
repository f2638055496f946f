"""The executor side of the apply: bounded latency statistics, DDL that concurrent tasks can
share, and what one task returns to the driver."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from kayak.cdc import Column, ColumnType, TableSchema
from kayak.pipeline.apply import ApplySettings, apply_partitions, executor_id
from kayak.pipeline.latency import LatencyHistogram
from kayak.pipeline.targets import open_target

TABLE = TableSchema(
    "public",
    "race",
    (
        Column("id", ColumnType.LONG, False, "bigint"),
        Column("note", ColumnType.STRING, True, "text"),
    ),
    ("id",),
)


# -- latency histogram ------------------------------------------------------------------------


def test_percentiles_are_within_a_bucket_of_the_exact_ones() -> None:
    rng = random.Random(5)
    values = [int(rng.lognormvariate(5, 1.5)) for _ in range(20_000)]
    histogram = LatencyHistogram()
    histogram.extend(values)
    ordered = sorted(values)
    for p in (1, 50, 90, 99, 99.9):
        exact = ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]
        assert exact <= histogram.percentile(p) <= max(exact * 1.023, exact + 1), p
    assert len(histogram) == 20_000


def test_memory_does_not_grow_with_the_count() -> None:
    histogram = LatencyHistogram()
    histogram.extend(range(100_000))
    buckets = len(histogram.counts)
    histogram.extend(range(100_000))
    assert len(histogram.counts) == buckets < 500
    assert histogram.percentile(100) >= 99_999


def test_histograms_merge_as_executors_send_them() -> None:
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    a.extend([1, 5, 700])
    b.extend([40, 40_000])
    both.extend([1, 5, 700, 40, 40_000])
    merged = LatencyHistogram()
    merged.merge(a)
    merged.merge({int(k): v for k, v in json.loads(json.dumps(b.counts)).items()})
    assert merged.counts == both.counts and len(merged) == 5
    assert LatencyHistogram().percentile(50) == 0.0


# -- DDL shared by concurrent tasks -----------------------------------------------------------


def _ensure_concurrently(url: str, tables: list[TableSchema], connector: str) -> None:
    """Eight connections ensure the same tables at the same moment (as the tasks of one
    micro-batch meeting a new table do); every one must succeed."""
    targets = [open_target(url) for _ in range(8)]
    start = threading.Barrier(len(targets))
    failures: list[BaseException] = []

    def ensure(target: object) -> None:
        start.wait()
        try:
            for table in tables:
                target.ensure_table(table, connector)  # type: ignore[attr-defined]
        except BaseException as exc:  # collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=ensure, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for target in targets:
        target.close()
    assert not failures, failures


def _wider(table: TableSchema, extra: int) -> TableSchema:
    columns = tuple(Column(f"c{i}", ColumnType.STRING, True, "text") for i in range(extra))
    return TableSchema(table.schema, table.name, (*table.columns, *columns), table.key)


def test_concurrent_tasks_create_and_widen_a_postgresql_table(postgres_dsn: str) -> None:
    for attempt in range(3):  # a race lost once in a while would be missed by one try
        table = TableSchema("s" + str(attempt), "race", TABLE.columns, TABLE.key)
        _ensure_concurrently(postgres_dsn, [table, _wider(table, 3)], "postgresql")
    with psycopg.connect(postgres_dsn) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 's2' "
            "AND table_name = 'race' ORDER BY ordinal_position"
        ).fetchall()
    assert [c for (c,) in columns] == ["id", "note", "c0", "c1", "c2"]


def test_concurrent_tasks_create_and_widen_a_sqlite_table(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'target.db'}"
    table = TableSchema("main", "race", TABLE.columns, TABLE.key)
    _ensure_concurrently(url, [table, _wider(table, 3)], "postgresql")
    columns = [r[1] for r in sqlite3.connect(tmp_path / "target.db").execute(
        "PRAGMA table_info(race)")]  # fmt: skip
    assert columns == ["id", "note", "c0", "c1", "c2"]


# -- one task ---------------------------------------------------------------------------------


def test_a_task_outside_spark_reports_no_executor() -> None:
    # pytest is not a Python worker under a Spark JVM: neither an executor nor the driver.
    assert executor_id() == "unknown"


def test_an_empty_partition_returns_zero_counts(tmp_path: Path) -> None:
    settings = ApplySettings(
        target_url=f"sqlite:{tmp_path / 't.db'}", registry_url="http://127.0.0.1:1",
        bootstrap_servers="127.0.0.1:1", dead_letter_topic="dead",
    )  # fmt: skip
    (out,) = list(apply_partitions(iter([]), settings))
    assert isinstance(out, pa.RecordBatch)
    row = out.to_pylist()[0]
    assert (row["changes"], row["applied"], row["dead_lettered"]) == (0, 0, 0)
    assert json.loads(row["latency"]) == {}


@pytest.fixture(autouse=True)
def _fresh_executor_id() -> None:
    executor_id.cache_clear()
