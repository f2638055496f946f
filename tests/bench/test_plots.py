"""bench/plot.py: benchmark tables drawn as SVG, from a script's rows or from README's tables."""

from __future__ import annotations

import argparse
import importlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"

# README tables that --from-readme draws, by chart name (the TLS one sits under Security).
README_CHARTS = {
    "record_batch", "broker_consume", "broker_appends", "broker_produce", "e2e_latency",
    "topics", "client_produce", "cdc", "cdc_issue14", "spark_read", "metrics_overhead",
    "broker_tls", "transactions", "cleaner", "cdc_capture", "broker_memory", "client_consume",
}  # fmt: skip


@dataclass(frozen=True)
class Bench:
    """The modules of bench/ that make the plots."""

    plot: ModuleType  # bench/plot.py: --from-readme
    specs: ModuleType  # bench/chart_specs.py: CHARTS
    data: ModuleType  # bench/chart_data.py: a table's cells as a BarChart
    drawing: ModuleType  # bench/chart_drawing.py: grouped_bars
    tables: ModuleType  # bench/result_tables.py: Table, --plot


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Bench]:
    """bench/'s plotting modules, imported the way the bench scripts import them."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    modules = ("plot", "chart_specs", "chart_data", "chart_drawing", "result_tables")
    yield Bench(*(importlib.import_module(name) for name in modules))


def texts(svg: str) -> list[str]:
    """Every text of an SVG (it must parse): labels, values, ratios, title, footnote."""
    root = ET.fromstring(svg)
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


def test_rows_become_bars_with_values_and_ratios_the_same_bytes_twice(
    bench: Bench,
) -> None:
    table_of, chart_from_table = bench.tables.Table, bench.data.chart_from_table
    # what bench/broker_produce.py prints (its column names, its formatted medians)
    table = table_of(["value", "acks", "kayak (group) msg/s", "kayak (group) MB/s",
                      "Tansu (memory) msg/s", "Tansu MB/s", "kayak / Tansu",
                      "broker CPU kayak / Tansu"])  # fmt: skip
    table.add("10 B", "1", 420390.0, 4.2, 369630.0, 3.7, "1.05x", "0.26 / 0.16")
    table.add("1,000 B", "all", 233611.0, 233.6, 166465.0, 166.5, "1.40x", "0.48 / 0.95")
    command = "$ .venv/bin/python bench/broker_produce.py --runs 3"
    chart = chart_from_table(bench.specs.CHARTS["broker_produce"], table.columns, table.rows,
                             command)  # fmt: skip

    first = bench.drawing.grouped_bars(chart)
    written = texts(first)

    assert chart.groups == ["10 B, acks=1", "1,000 B, acks=all"]
    assert chart.series == ["kayak", "Tansu"]
    for expected in ("10 B, acks=1", "1,000 B, acks=all", "420,390 (1.05x Tansu)", "369,630",
                     "233,611 (1.40x Tansu)", "166,465", "kayak", "Tansu", command):  # fmt: skip
        assert expected in written, expected
    assert any(t.startswith("Produce:") for t in written)
    assert "messages/s (higher is better)" in written
    assert bench.drawing.grouped_bars(chart) == first


def test_cells_parse_with_units_multipliers_and_parts(bench: Bench) -> None:
    numbers = bench.data.numbers
    values = [n.value for n in numbers("1.3 / 3.1 ms", times=True)]
    assert values == [1.3, 3.1]
    assert numbers("3.89 s (514/s)", times=True)[0].value == pytest.approx(3890.0)
    assert numbers("6.9-8.1", times=True, default_unit="ms")[1].value == pytest.approx(8.1)
    assert [n.value for n in numbers("0.35M")] == [350_000.0]
    assert [n.value for n in numbers("1,593 → 1,720")] == [1593.0, 1720.0]
    assert numbers("EMFILE") == []


def test_long_tables_pivot_and_missing_ratios_are_computed(
    bench: Bench,
) -> None:
    columns = ["rate", "broker", "e2e p50 ms", "e2e p99 ms", "ack p99 ms", "broker CPU",
               "records / request"]  # fmt: skip
    rows = [["1,000/s", "kayak", "2.45", "6.98", "7.10", "0.97 cores", "1.01"],
            ["1,000/s", "Tansu", "270", "541", "24.0", "1.19 cores", "1.01"]]  # fmt: skip
    chart = bench.data.chart_from_table(bench.specs.CHARTS["e2e_latency"], columns, rows)
    assert chart.groups == ["1,000/s"]
    assert chart.bars["1,000/s"]["kayak"].value == pytest.approx(6.98)
    assert chart.bars["1,000/s"]["kayak"].note == "0.013x Tansu"  # 6.98 / 541
    assert chart.bars["1,000/s"]["Tansu"].note == ""


def test_from_readme_draws_one_svg_per_benchmark_table(bench: Bench, tmp_path: Path) -> None:
    written = bench.plot.from_readme(REPO / "README.md", tmp_path)

    assert {path.stem for path in written} == README_CHARTS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.svg" for n in README_CHARTS)
    produce = texts((tmp_path / "broker_produce.svg").read_text())
    assert "919,549 (1.51x Kafka)" in produce  # README's first row, as README writes it
    assert any("bench/broker_produce.py --runs 3" in t for t in produce)
    for path in written:
        assert texts(path.read_text())  # parses, and says something


def test_plot_option_of_the_bench_scripts_writes_the_printed_table(
    bench: Bench, tmp_path: Path
) -> None:
    parser = argparse.ArgumentParser()
    bench.tables.add_plot_option(parser)
    target = tmp_path / "consume.svg"
    args = parser.parse_args(["--plot", str(target)])
    table = bench.tables.Table(["reader -> broker", "MiB/s", "runs (min-max)", "of machine limit"])
    table.add("kayak loop, depth 4 -> kayak", 3000.0, "2,832-4,024", "89%")

    bench.tables.plot_table(args.plot, "broker_consume", table)
    bench.tables.plot_table(None, "broker_consume", table)  # no --plot: nothing drawn

    written = texts(target.read_text())
    assert "kayak loop, depth 4 → kayak" in written
    assert "3,000 (89% of machine limit)" in written
    assert bench.tables.command_line(["bench/x.py", "--runs", "3", "--plot", "p.svg"]).endswith(
        "bench/x.py --runs 3"
    )


def test_a_table_with_apache_kafka_draws_its_bars_and_kayaks_ratio_to_it(
    bench: Bench,
) -> None:
    table_of, chart_from_table = bench.tables.Table, bench.data.chart_from_table
    # what bench/broker_produce.py prints with Apache Kafka and Kafka's ProducerPerformance
    table = table_of(["client", "value", "acks", "kayak (group) msg/s", "Apache Kafka msg/s",
                      "Tansu (memory) msg/s", "kayak / Kafka", "kayak / Tansu",
                      "broker CPU µs/msg kayak / Kafka / Tansu"])  # fmt: skip
    table.add("confluent-kafka", "10 B", "all", 295736.0, 92958.0, 307491.0, "3.18x", "0.96x",
              "0.50 / 6.00 / 0.40")  # fmt: skip
    table.add("ProducerPerformance", "1,000 B", "all", 1878.0, 2436.0, 2073.0, "0.77x", "0.91x",
              "5.00 / 70.0 / 5.00")  # fmt: skip

    chart = chart_from_table(bench.specs.CHARTS["broker_produce"], table.columns, table.rows)

    assert chart.groups == [
        "confluent-kafka: 10 B, acks=all",
        "ProducerPerformance: 1,000 B, acks=all",
    ]
    assert chart.series == ["kayak", "Apache Kafka", "Tansu"]
    assert chart.peers == {"Apache Kafka", "Tansu"}
    assert chart.bars["confluent-kafka: 10 B, acks=all"]["kayak"].note == "3.18x Kafka"
    assert chart.bars["ProducerPerformance: 1,000 B, acks=all"]["Apache Kafka"].value == 2436.0


def test_a_run_that_failed_to_measure_is_left_out_not_averaged_in(bench: Bench) -> None:
    nan = float("nan")
    tables = bench.tables
    assert tables.median([3.0, nan, 1.0]) == 2.0
    assert tables.spread([nan, 4.0, 2.0]) == "2.00-4.00"
    # paired within runs: run 2's failure drops run 2's pair, not the others
    assert tables.paired_ratio([2.0, nan, 6.0], [1.0, 5.0, 2.0]) == 2.5
    assert tables.median([nan]) != tables.median([nan])  # NaN: nothing measured
