"""The one chart shape of the benchmark plots, :func:`grouped_bars`, drawn with matplotlib.

Horizontal bars, one group per table row, one bar per series (kayak and its peers measured in
the same run), the value written at each bar and the ratio at the bar that carries it; the
title says what was measured, the axis its unit, and a footnote the command line.

Output is reproducible: the same chart gives the same bytes (fixed ``svg.hashsalt``, text
kept as text, no date in the metadata).
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.ticker import Formatter

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

    with matplotlib.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "kayak-bench",
            "font.size": 9,
            "font.family": "DejaVu Sans",
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    ):
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
