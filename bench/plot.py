"""SVG plots of the benchmark tables: the same rows a bench script prints, drawn with matplotlib.

Every chart is one shape, :func:`grouped_bars`: horizontal bars, one group per table row, one
bar per series (kayak and its peers measured in the same run), the value written at each bar
and the ratio at the bar that carries it; the title says what was measured, the axis its unit,
and a footnote the command line. What a table's columns mean is data, a :class:`ChartSpec` per
table in :data:`CHARTS`; the cells are parsed from the formatted text the script prints, so a
plot and its table cannot disagree.

Scripts draw their own table with ``--plot PATH.svg`` (through ``peers.plot_table``);
``python bench/plot.py --from-readme`` draws README's benchmark tables as they stand, into
docs/bench/, without re-running anything.

Output is reproducible: the same rows give the same bytes (fixed ``svg.hashsalt``, text kept
as text, no date in the metadata).
"""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.ticker import Formatter

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
OUT_DIR = REPO / "docs" / "bench"

# -- what a table means ----------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One bar per group: the values of the column whose header matches ``column`` (a regex).

    ``part`` picks one number of a cell holding several ("1,593 → 1,720": part 1 is after).
    In a long table (``ChartSpec.pivot``), the series' rows are those whose pivot cell
    matches ``where``. ``spread``: a "min-max" column drawn as an error bar. A series whose
    column is missing from the table is left out (peers that were not measured).
    """

    name: str
    column: str
    part: int = 0
    where: str | None = None
    spread: str | None = None
    peer: bool = False  # drawn in the peers' colours, kayak's series in blues


@dataclass(frozen=True)
class Ratio:
    """Text written at ``series``' bar: the table's ratio column when it has one, else
    ``series / versus`` computed from the two bars' values; ``template`` frames the number."""

    series: str
    template: str
    column: str | None = None
    versus: str | None = None


@dataclass(frozen=True)
class ChartSpec:
    """How one benchmark table becomes a chart."""

    name: str  # file stem: docs/bench/NAME.svg
    title: str  # what was measured
    unit: str  # the value axis' label
    labels: tuple[str, ...]  # regexes of the columns naming a group (missing ones are skipped)
    series: tuple[Series, ...]
    ratios: tuple[Ratio, ...] = ()
    # e.g. "{}, acks={}", or several: the one with as many {} as label cells found; default:
    # the cells joined by ", "
    label_format: str | tuple[str, ...] | None = None
    pivot: str | None = None  # regex of the column saying which series a row belongs to
    log: bool = False  # values spanning orders of magnitude
    times: bool = False  # cells carry time units (s, ms, µs): all shown in milliseconds
    readme_header: tuple[str, ...] | None = None  # README's table with exactly this header


# -- the chart -------------------------------------------------------------------------------


@dataclass
class Bar:
    value: float  # NaN: not measured (``text`` says why, if the cell did)
    text: str
    low: float | None = None
    high: float | None = None
    note: str = ""


@dataclass
class BarChart:
    """What :func:`grouped_bars` draws: bars[group][series]."""

    title: str
    unit: str
    series: list[str]
    groups: list[str]
    bars: dict[str, dict[str, Bar]]
    footnote: str = ""
    log: bool = False
    peers: set[str] = field(default_factory=set)  # series drawn in the peers' colours


# -- cells -----------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:\s*(M|k|µs|us|ms|seconds|s)\b)?")
_SCALE = {"M": 1e6, "k": 1e3}
_TO_MS = {"µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3, "seconds": 1e3}
_LABEL_UNIT = re.compile(r"(?:^|[\s:,])(seconds|ms|µs|s)$")
_DASHES = {"", "-", "\u2013", "\u2014"}  # -, en and em dash


@dataclass(frozen=True)
class Number:
    value: float  # scaled: M and k applied, times in ms when asked
    text: str  # as written in the cell, with the unit it inherited
    unit: str | None


def numbers(cell: str, times: bool = False, default_unit: str | None = None) -> list[Number]:
    """The numbers of a formatted cell ("3,933", "19.2M", "1.3 / 3.1 ms", "3.89 s (514/s)").

    With ``times``, a number without a unit takes the next unit written after it in the cell
    ("1.3 / 3.1 ms": both ms), else ``default_unit``; values are returned in milliseconds.
    """
    found = [(m.group(1), m.group(2)) for m in _NUMBER.finditer(cell)]
    result = []
    for index, (digits, suffix) in enumerate(found):
        value = float(digits.replace(",", ""))
        if times:
            unit = suffix or next((u for _, u in found[index + 1 :] if u), default_unit)
            if unit not in _TO_MS:
                result.append(Number(math.nan, digits, None))
                continue
            text = f"{digits} {'s' if unit == 'seconds' else unit}"
            result.append(Number(value * _TO_MS[unit], text, unit))
        else:
            scale = _SCALE.get(suffix or "", 1.0)
            result.append(Number(value * scale, digits + (suffix if scale != 1.0 else ""), None))
    return result


def label_unit(label: str) -> str | None:
    """The time unit a row label ends with ("…: seconds", "…p99, ms"), if any."""
    found = _LABEL_UNIT.search(label.strip())
    return found.group(1) if found else None


def clean(text: str) -> str:
    """A cell as a label: no Markdown code marks or bold, arrows as arrows, times signs as x."""
    text = text.replace("`", "").replace("**", "").replace("->", "→")
    return text.replace("\u00d7", "x").replace("\u2013", "-").strip()  # times sign, en dash


def _column(columns: Sequence[str], pattern: str | None) -> int | None:
    if pattern is None:
        return None
    for index, name in enumerate(columns):
        if re.search(pattern, clean(name), re.IGNORECASE):
            return index
    return None


# -- table -> chart --------------------------------------------------------------------------


def chart_from_table(
    spec: ChartSpec, columns: Sequence[str], rows: Sequence[Sequence[str]], command: str = ""
) -> BarChart:
    """The chart of a table's formatted cells, as ``spec`` reads them."""
    label_columns = [i for p in spec.labels if (i := _column(columns, p)) is not None]
    if not label_columns:
        raise ValueError(f"{spec.name}: no label column among {list(columns)}")
    pivot = _column(columns, spec.pivot)
    present = [s for s in spec.series if _column(columns, s.column) is not None]
    if not present:
        raise ValueError(f"{spec.name}: no series column among {list(columns)}")
    groups: list[str] = []
    bars: dict[str, dict[str, Bar]] = {}
    rows_of: dict[tuple[str, str], Sequence[str]] = {}
    for row in rows:
        group = _group_label(spec, [clean(row[i]) for i in label_columns])
        for series in present:
            if pivot is not None and not re.search(series.where or "", clean(row[pivot])):
                continue
            bar = _bar(spec, series, columns, row, group)
            if group not in bars:
                groups.append(group)
                bars[group] = {}
            bars[group][series.name] = bar
            rows_of[(group, series.name)] = row
    groups = [g for g in groups if any(not math.isnan(b.value) for b in bars[g].values())]
    names = [s.name for s in present if any(s.name in bars[g] for g in groups)]
    for group in groups:
        for ratio in spec.ratios:
            _note(spec, ratio, columns, rows_of, bars[group], group)
    peers = {s.name for s in present if s.peer}
    return BarChart(spec.title, spec.unit, names, groups, {g: bars[g] for g in groups},
                    command, spec.log, peers)  # fmt: skip


def _group_label(spec: ChartSpec, cells: list[str]) -> str:
    formats = (spec.label_format,) if isinstance(spec.label_format, str) else spec.label_format
    for template in formats or ():
        if template.count("{}") == len(cells):
            return template.format(*cells)
    return ", ".join(cells)


def _bar(spec: ChartSpec, series: Series, columns: Sequence[str], row: Sequence[str],
         group: str) -> Bar:  # fmt: skip
    cell = row[_column(columns, series.column) or 0]
    default = label_unit(group)
    parsed = numbers(cell, spec.times, default)
    if len(parsed) <= series.part or math.isnan(parsed[series.part].value):
        text = clean(cell)
        return Bar(math.nan, "" if text in _DASHES else text)
    number = parsed[series.part]
    bar = Bar(number.value, number.text)
    spread_column = _column(columns, series.spread)
    if spread_column is not None:
        ends = numbers(row[spread_column], spec.times, number.unit or default)
        if len(ends) >= 2 and not any(math.isnan(e.value) for e in ends[:2]):
            bar.low, bar.high = ends[0].value, ends[1].value
    return bar


def _note(spec: ChartSpec, ratio: Ratio, columns: Sequence[str],
          rows_of: dict[tuple[str, str], Sequence[str]], bars: dict[str, Bar],
          group: str) -> None:  # fmt: skip
    bar = bars.get(ratio.series)
    if bar is None or math.isnan(bar.value):
        return
    column = _column(columns, ratio.column)
    if column is not None:
        text = clean(rows_of[(group, ratio.series)][column])
        if text not in _DASHES and numbers(text):
            bar.note = ratio.template.format(text.removesuffix("x"))
        return
    other = bars.get(ratio.versus or "")
    if other is not None and other.value > 0 and not math.isnan(other.value):
        bar.note = ratio.template.format(_ratio_text(bar.value / other.value))


def _ratio_text(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


# -- the one chart shape ---------------------------------------------------------------------

_KAYAK_COLOURS = ("#2563eb", "#93c5fd", "#1e3a8a")
_PEER_COLOURS = ("#9ca3af", "#f59e0b", "#10b981", "#a855f7")
_WHISKERS = {"elinewidth": 0.8, "capsize": 2, "ecolor": "#374151"}
_BAR = 0.26  # inches per bar
_GAP = 0.22  # inches between groups
_LABEL_WIDTH = 30  # characters per line of a group label
_FOOTNOTE_WIDTH = 120
_WIDTH = 8.0  # inches
_CHAR = 0.068  # inches per character of a 9 pt label (DejaVu Sans, a little generous)
_TEXT_CHAR = 0.062  # inches per character of the 7.5 pt text after a bar


def grouped_bars(chart: BarChart) -> str:
    """Grouped horizontal bars, one group per row; returns the SVG text (same input, same bytes).

    The layout is computed in inches from the texts' lengths rather than measured by a second
    drawing pass (``bbox_inches="tight"``), which would double the cost of every chart.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kayak-bench",
                                "font.size": 9, "font.family": "DejaVu Sans",
                                "axes.spines.top": False, "axes.spines.right": False}):
        n = max(1, len(chart.series))
        group_height = n * _BAR + _GAP
        labels = [_wrap(g) for g in chart.groups]
        footnote = _wrap(chart.footnote, _FOOTNOTE_WIDTH, indent="  ") if chart.footnote else ""
        left = 0.2 + _CHAR * max((len(line) for g in labels for line in g.splitlines()), default=4)
        top = 0.4 + (0.22 if len(chart.series) > 1 else 0.0)
        bottom = 0.6 + 0.14 * (footnote.count("\n") + 1 if footnote else 0)
        plot_height = len(chart.groups) * group_height
        height = top + plot_height + bottom
        axes_width = _WIDTH - left - 0.2
        figure = Figure(figsize=(_WIDTH, height))
        axes = figure.add_axes((left / _WIDTH, bottom / height, axes_width / _WIDTH,
                                plot_height / height))  # fmt: skip
        _draw_bars(axes, chart, group_height)
        _set_value_axis(axes, chart, axes_width)
        _write_texts(axes, chart, group_height)
        axes.set_yticks([i * group_height + (n - 1) * _BAR / 2 for i in range(len(chart.groups))])
        axes.set_yticklabels(labels)
        axes.set_ylim(plot_height - _GAP / 2, -_BAR / 2 - _GAP / 2)
        axes.tick_params(axis="y", length=0)
        axes.set_xlabel(chart.unit)
        axes.grid(axis="x", color="#e5e7eb", linewidth=0.6)
        axes.set_axisbelow(True)
        figure.text(0.12 / _WIDTH, 1 - 0.12 / height, chart.title, va="top", ha="left",
                    fontsize=10, fontweight="bold")  # fmt: skip
        if len(chart.series) > 1:
            axes.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(chart.series),
                        frameon=False, fontsize=8, borderaxespad=0.2)  # fmt: skip
        if footnote:
            figure.text(0.12 / _WIDTH, 0.1 / height, footnote, va="bottom", ha="left",
                        fontsize=7, family="DejaVu Sans Mono", color="#4b5563")  # fmt: skip
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _wrap(text: str, width: int = _LABEL_WIDTH, indent: str = "") -> str:
    return textwrap.fill(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)  # fmt: skip


def _draw_bars(axes: Axes, chart: BarChart, group_height: float) -> None:
    for j, name in enumerate(chart.series):
        ys, values, lows, highs = [], [], [], []
        for i, group in enumerate(chart.groups):
            bar = chart.bars[group].get(name)
            if bar is None or math.isnan(bar.value):
                continue
            ys.append(i * group_height + j * _BAR)
            values.append(bar.value)
            lows.append(bar.value - bar.low if bar.low is not None else 0.0)
            highs.append(bar.high - bar.value if bar.high is not None else 0.0)
        spread = [lows, highs] if any(lows) or any(highs) else None
        axes.barh(ys, values, height=_BAR * 0.9, color=_colour(chart, name), label=name,
                  xerr=spread, error_kw=_WHISKERS)  # fmt: skip


def _colour(chart: BarChart, name: str) -> str:
    peer = name in chart.peers
    same_kind = [s for s in chart.series if (s in chart.peers) == peer]
    palette = _PEER_COLOURS if peer else _KAYAK_COLOURS
    return palette[same_kind.index(name) % len(palette)]


def _bar_text(bar: Bar) -> str:
    return f"{bar.text} ({bar.note})" if bar.note else bar.text


def _set_value_axis(axes: Axes, chart: BarChart, width: float) -> None:
    """Limits that leave room on the right for the text written after each bar."""
    measured = [b for g in chart.bars.values() for b in g.values() if b.value > 0]
    # (end of the bar or its whisker, share of the axis the text after it needs)
    needs = [(max(b.value, b.high or b.value), min(0.7, (len(_bar_text(b)) + 1) * _TEXT_CHAR
              / width)) for b in measured]  # fmt: skip
    if chart.log:
        low = 10 ** math.floor(math.log10(min((b.value for b in measured), default=1.0)))
        decades = max((math.log10(end / low) / (0.98 - share) for end, share in needs),
                      default=1.0)  # fmt: skip
        axes.set_xscale("log")
        axes.set_xlim(low, low * 10 ** max(decades, 1.0))
    else:
        axes.set_xlim(0, max((end / (0.98 - share) for end, share in needs), default=1.0))
        axes.ticklabel_format(axis="x", style="plain")
        axes.xaxis.set_major_formatter(_thousands())


def _thousands() -> Formatter:
    from matplotlib.ticker import FuncFormatter

    def fmt(value: float, _: object) -> str:
        if abs(value) >= 1e6:
            return f"{value / 1e6:g}M"
        return f"{value:,.0f}" if value == int(value) else f"{value:g}"

    return FuncFormatter(fmt)


def _write_texts(axes: Axes, chart: BarChart, group_height: float) -> None:
    left = axes.get_xlim()[0]
    for j, name in enumerate(chart.series):
        for i, group in enumerate(chart.groups):
            bar = chart.bars[group].get(name)
            if bar is None or not (bar.text or bar.note):
                continue
            y = i * group_height + j * _BAR
            measured = not math.isnan(bar.value)
            x = max(bar.value, bar.high or bar.value) if measured else left
            text = _bar_text(bar)
            axes.annotate(text, xy=(x, y), xytext=(3, 0), textcoords="offset points",
                          va="center", ha="left", fontsize=7.5,
                          color="#111827" if measured else "#9ca3af",
                          fontweight="bold" if bar.note else "normal")  # fmt: skip


# -- the benchmarks' tables ------------------------------------------------------------------

# The kayak bar's note: against Apache Kafka when the table has it, else against Tansu.
_KAYAK_TANSU = (Ratio("kayak", "{}x Tansu", column=r"^kayak / Tansu$", versus="Tansu"),
                Ratio("kayak", "{}x Kafka", column=r"^kayak / Kafka$", versus="Apache Kafka"))

CHARTS: dict[str, ChartSpec] = {
    spec.name: spec
    for spec in (
        ChartSpec(
            "record_batch", "Record batches: encode and decode, 1,000 uncompressed records",
            "records/s (higher is better)", (r"^value$", r"^(operation|op)$"),
            (Series("pure Python", r"^pure Python$"), Series("with C codec", r"^with C codec$"),
             Series("kayak", r"^kayak$"), Series("kafka-python", r"^kafka-python$", peer=True),
             Series("aiokafka", r"^aiokafka$", peer=True)),
            (Ratio("with C codec", "{}x aiokafka", column=r"^x aiokafka$"),
             Ratio("kayak", "{}x aiokafka", column=r"^x aiokafka$")),
            readme_header=("value", "operation", "pure Python", "with C codec", "x aiokafka"),
        ),
        ChartSpec(
            "broker_consume", "One consumer, one partition: 1 GiB of 1,000 B records",
            "MiB/s (higher is better; bars: medians, whiskers: runs min-max)", (r"^reader",),
            (Series("MiB/s", r"^MiB/s$", spread=r"^runs \(min.max\)$"),),
            (Ratio("MiB/s", "{} of machine limit", column=r"^of machine limit$"),),
            readme_header=("reader → broker", "MiB/s", "runs (min-max)", "of machine limit"),
        ),
        ChartSpec(
            "broker_appends", "Durable appends: 128 producers, one 2 KiB record per acks=all "
            "request", "acknowledged appends/s (higher is better)", (r"^connections$",),
            (Series("--flush group", r"^group$"), Series("--flush always", r"^always$"),
             Series("--flush never", r"^never$"),
             Series("Apache Kafka", r"^Apache Kafka$", peer=True),
             Series("Kafka, fsync per message", r"^Apache Kafka, flush every message$",
                    peer=True),
             Series("Tansu (memory)", r"^Tansu", peer=True)),
            (Ratio("--flush group", "{}x always", column=r"^group / always$"),),
            label_format="{} connections",
            readme_header=("connections", "group", "always", "never", "group / always",
                           "group / group@1", "group / fdatasync", "group broker CPU",
                           "broker CPU µs / request (group, never)",
                           "empty server µs / request (floor)"),
        ),
        ChartSpec(
            "broker_produce", "Produce: one producer, kayak durable (--flush group) vs "
            "Apache Kafka (page cache) vs Tansu in memory", "messages/s (higher is better)",
            (r"^client$", r"^value$", r"^acks$"),
            (Series("kayak", r"^kayak.*msg/s$"),
             Series("Apache Kafka", r"^Apache Kafka.*msg/s$", peer=True),
             Series("Tansu", r"^Tansu.*msg/s$", peer=True)),
            _KAYAK_TANSU, label_format=("{}, acks={}", "{}: {}, acks={}"),
            readme_header=("value", "acks", "kayak msg/s", "Tansu msg/s", "kayak / Tansu",
                           "broker CPU kayak / Tansu"),
        ),
        ChartSpec(
            "e2e_latency", "End-to-end latency p99: confluent-kafka producer → consumer, "
            "100 B, acks=all", "p99 send → receive, ms (log scale; lower is better)",
            (r"^rate", r"^linger", r"^consumer$"),
            (Series("kayak", r"^(e2e )?p99 ms$", where=r"^kayak"),
             Series("Apache Kafka", r"^(e2e )?p99 ms$", where=r"^Apache Kafka", peer=True),
             Series("Tansu", r"^(e2e )?p99 ms$", where=r"^Tansu", peer=True)),
            (Ratio("kayak", "{}x Tansu", column=r"^p99 kayak / Tansu$", versus="Tansu"),
             Ratio("kayak", "{}x Kafka", column=r"^p99 kayak / Kafka$", versus="Apache Kafka")),
            label_format=("{}", "{}, {}", "{}, linger.ms={}, {}"), pivot=r"^broker$", log=True,
            readme_header=("rate", "broker", "e2e p50 ms", "e2e p99 ms", "ack p99 ms",
                           "broker CPU", "records / request"),
        ),
        ChartSpec(
            "topics", "Topics at scale: kayak vs Apache Kafka vs Tansu (memory)",
            "milliseconds (log scale; lower is better)", (r"^measure$",),
            (Series("kayak", r"^kayak$", spread=r"^runs \(min.max\)$"),
             Series("Apache Kafka", r"^Apache Kafka$", peer=True),
             Series("Tansu (memory)", r"^Tansu", peer=True),
             Series("before issue 13", r"^before", peer=True)),
            (Ratio("kayak", "{}x Tansu", column=r"^kayak / Tansu$", versus="Tansu (memory)"),
             Ratio("kayak", "{}x Kafka", column=r"^kayak / Kafka$", versus="Apache Kafka")),
            log=True, times=True,
            readme_header=("measure", "kayak", "runs (min-max)", "Tansu (memory)",
                           "before issue 13"),
        ),
        ChartSpec(
            "client_produce", "Client produce: groups of 1,000 messages, acks=1, kayak's "
            "broker (--flush never)", "messages/s (higher is better)", (r"^(value|size)$",),
            (Series("kayak send", r"^(kayak send$|msg/s)", where=r"^kayak send$",
                    spread=r"^min-max$"),
             Series("kayak send_batch", r"^(kayak send_batch$|msg/s)", where=r"^kayak send_batch$",
                    spread=r"^min-max$"),
             Series("confluent-kafka", r"^(confluent-kafka$|msg/s)", where=r"^confluent-kafka$",
                    peer=True, spread=r"^min-max$"),
             Series("aiokafka", r"^(aiokafka$|msg/s)", where=r"^aiokafka$", peer=True,
                    spread=r"^min-max$"),
             Series("kafka-python", r"^(kafka-python$|msg/s)", where=r"^kafka-python$", peer=True,
                    spread=r"^min-max$")),
            (Ratio("kayak send", "{}x aiokafka", versus="aiokafka"),
             Ratio("kayak send_batch", "{}x confluent-kafka", versus="confluent-kafka")),
            pivot=r"^client$",
            readme_header=("value", "kayak send", "kayak send_batch", "confluent-kafka",
                           "aiokafka"),
        ),
        ChartSpec(
            "client_consume", "Client consume: 1 GiB of 1 KiB values, one partition",
            "MiB/s (higher is better; whiskers: runs min-max)", (r"^reader$", r"^broker$"),
            (Series("MiB/s", r"^MiB/s$", spread=r"^spread$"),),
            (Ratio("MiB/s", "{}x confluent-kafka", column=r"^vs confluent$"),),
            label_format="{} → {}",
        ),
        ChartSpec(
            "cdc", "CDC pipeline: source → kayak → Spark local[2] → SQLite, vs the source "
            "alone", "changes/s (higher is better)",
            (r"^source$", r"^changes$", r"^workload rate$"),
            (Series("source alone", r"^source alone changes/s$", peer=True),
             Series("pipeline", r"^pipeline changes/s$")),
            (Ratio("pipeline", "{}x source alone", column=r"^(x source alone|ratio)$"),),
            label_format="{}, {} changes, workload {}",
            readme_header=("source", "changes", "workload rate", "source alone changes/s",
                           "pipeline changes/s", "x source alone", "latency p50",
                           "latency p99"),
        ),
        ChartSpec(
            "cdc_issue14", "CDC pipeline before and after one Spark stage per micro-batch",
            "pipeline changes/s (higher is better)",
            (r"^source$", r"^changes$", r"^workload rate$"),
            (Series("before (decode, shuffle, apply)", r"^pipeline changes/s, before", part=0,
                    peer=True),
             Series("after (one stage)", r"^pipeline changes/s, before", part=1)),
            (Ratio("after (one stage)", "{}x before",
                   versus="before (decode, shuffle, apply)"),),
            label_format="{}, {} changes, workload {}",
            readme_header=("source", "changes", "workload rate",
                           "source alone changes/s", "pipeline changes/s, before → after",
                           "x source alone, before → after", "latency p50, before → after",
                           "latency p99, before → after"),
        ),
        ChartSpec(
            "spark_read", "Spark reader: count(*) + sum(length(value)) over 1 GiB, local[2]",
            "MiB/s (higher is better)", (r"^source$",),
            (Series("MiB/s", r"^MiB/s$", spread=r"^MiB/s runs"),),
            (Ratio("MiB/s", "{}x Parquet", column=r"^x parquet$"),),
            readme_header=("source", "rows/s", "MiB/s", "x Parquet"),
        ),
        ChartSpec(
            "metrics_overhead", "Metrics overhead: two brokers but for Broker(metrics=...)",
            "records/s (higher is better)", (r"^point$",),
            (Series("metrics off", r"^metrics off /s$", peer=True),
             Series("metrics on", r"^metrics on /s$")),
            (Ratio("metrics on", "{}x off", column=r"^on / off$"),),
            readme_header=("point", "metrics off /s", "metrics on /s", "on / off",
                           "broker CPU µs off / on"),
        ),
        ChartSpec(
            "broker_tls", "What TLS costs: one broker, PLAINTEXT and SSL listeners, 1,000 B "
            "values", "MiB/s (higher is better)", (r"^measure$",),
            (Series("PLAINTEXT", r"^PLAINTEXT MiB/s$", peer=True), Series("SSL", r"^SSL MiB/s$")),
            (Ratio("SSL", "{}x PLAINTEXT", column=r"^SSL / PLAINTEXT$"),),
            readme_header=("measure", "PLAINTEXT MiB/s", "SSL MiB/s", "SSL / PLAINTEXT",
                           "broker CPU s/GiB, PLAINTEXT / SSL"),
        ),
    )
}  # fmt: skip


def write_chart(path: Path, chart: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
                command: str = "") -> Path:  # fmt: skip
    """Draw a table with the chart :data:`CHARTS` names ``chart``; write the SVG to ``path``."""
    svg = grouped_bars(chart_from_table(CHARTS[chart], columns, rows, command))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg, encoding="utf-8")
    return path


# -- README ----------------------------------------------------------------------------------


@dataclass
class MarkdownTable:
    header: tuple[str, ...]
    rows: list[list[str]] = field(default_factory=list)
    command: str = ""  # the bench command(s) written between the table's heading and it


_CODE = re.compile(r"`([^`]+)`")


def markdown_tables(text: str) -> list[MarkdownTable]:
    """Every pipe table of a Markdown text, with the bench commands quoted above it."""
    tables: list[MarkdownTable] = []
    lines = text.splitlines()
    since = 0  # where the text that introduces the next table starts
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith(("#", "**")):
            since = index
        if not (line.startswith("|") and index + 1 < len(lines)
                and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[index + 1].strip())):  # fmt: skip
            index += 1
            continue
        table = MarkdownTable(tuple(_cells(line)), command=_commands(lines[since:index]))
        index += 2
        while index < len(lines) and lines[index].startswith("|"):
            table.rows.append(_cells(lines[index]))
            index += 1
        tables.append(table)
        since = index
    return tables


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _commands(lines: Sequence[str]) -> str:
    spans = _CODE.findall(" ".join(line.strip() for line in lines))
    found = [s for s in spans if s.startswith((".venv/bin/python bench/", "… "))]
    return " and ".join(found)


def from_readme(readme: Path = README, out_dir: Path = OUT_DIR) -> list[Path]:
    """One SVG per README table that a :data:`CHARTS` entry recognises by its exact header."""
    by_header = {spec.readme_header: spec for spec in CHARTS.values() if spec.readme_header}
    written = []
    for table in markdown_tables(readme.read_text(encoding="utf-8")):
        spec = by_header.get(tuple(clean(c) for c in table.header))
        if spec is None:
            continue
        chart = chart_from_table(spec, table.header, table.rows, _footnote(table.command))
        path = out_dir / f"{spec.name}.svg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(grouped_bars(chart), encoding="utf-8")
        written.append(path)
    return written


def _footnote(command: str) -> str:
    return f"$ {command}" if command else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--from-readme",
        action="store_true",
        help="draw README's benchmark tables as they stand (runs nothing)",
    )
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where the SVGs go")
    args = parser.parse_args(argv)
    if not args.from_readme:
        parser.error("nothing to do: --from-readme (the bench scripts draw with --plot PATH.svg)")
    written = from_readme(args.readme, args.out)
    for path in written:
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    missing = sorted({s.name for s in CHARTS.values() if s.readme_header}
                     - {p.stem for p in written})  # fmt: skip
    if missing:
        print(f"not found in {args.readme.name}: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
