"""A benchmark table's formatted cells read as a :class:`BarChart`, the way a :class:`ChartSpec`
says: the numbers of each cell (units, k/M multipliers, several numbers per cell), the group
labels, the series and the ratio written at a bar. The cells are the text a script prints, so
a plot and its table cannot disagree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from chart_drawing import Bar, BarChart
from chart_specs import ChartSpec, Ratio, Series

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
