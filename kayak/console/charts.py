"""Small time-series charts for the console: samples kept server-side, drawn as inline SVG.

Why server-rendered SVG and no charting library: the charts are a few lines over the last
minutes, which a ``<polyline>`` draws in a few hundred bytes; a JavaScript library would
be a dependency to vendor and serve (the console's Content-Security-Policy allows no script
from elsewhere), and the page would show nothing without it. SVG is markup, so a chart is
escaped and tested like any other part of a page, and works with scripts off.

:class:`SampleRing` keeps the samples in bounded memory (a ``deque`` with a maximum length:
the oldest sample goes when a new one comes). :func:`sparkline` draws one or more series of
a ring's values, a gap where a value is unknown.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kayak.console.html import Html, join, render

__all__ = ["COLOURS", "SampleRing", "Series", "format_value", "span", "sparkline"]

T = TypeVar("T")

# Series colours, in order (presentation attributes: the page's CSP allows no inline style).
COLOURS = ("#1f6feb", "#cf222e", "#1a7f37", "#9a6700")


class SampleRing(Generic[T]):
    """The last ``capacity`` samples, oldest first; safe to add to from one thread while
    another reads (each read is a copy)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a chart needs room for at least 2 samples")
        self._samples: deque[T] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        maxlen = self._samples.maxlen
        assert maxlen is not None
        return maxlen

    def add(self, sample: T) -> None:
        with self._lock:
            self._samples.append(sample)

    def samples(self) -> list[T]:
        with self._lock:
            return list(self._samples)

    def __len__(self) -> int:
        return len(self._samples)

    def __iter__(self) -> Iterator[T]:
        return iter(self.samples())


@dataclass(frozen=True)
class Series:
    """One line of a chart: its name and values (None: unknown, drawn as a gap)."""

    label: str
    values: Sequence[float | None]


def format_value(value: float | None, unit: str) -> str:
    """A chart's number: ``—`` when unknown, else 3 significant digits and the unit."""
    if value is None or math.isnan(value):
        return "—"
    if unit == "s" and value < 1:
        return f"{value * 1000:.3g} ms"
    if unit == "B/s":
        for scale, name in ((1 << 30, "GiB/s"), (1 << 20, "MiB/s"), (1 << 10, "KiB/s")):
            if value >= scale:
                return f"{value / scale:.3g} {name}"
    number = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{number} {unit}".rstrip()


def span(seconds: float) -> str:
    """How much time a chart covers: ``10 minutes``, ``45 s``."""
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} s"


def _segments(values: Sequence[float | None]) -> Iterator[list[tuple[int, float]]]:
    """Runs of known values, with their index."""
    run: list[tuple[int, float]] = []
    for i, value in enumerate(values):
        if value is None or math.isnan(value):
            if run:
                yield run
            run = []
        else:
            run.append((i, value))
    if run:
        yield run


def sparkline(
    series: Sequence[Series], *, chart_id: str, title: str, unit: str = "",
    capacity: int | None = None, width: int = 360, height: int = 72,
    describe: Callable[[float | None, str], str] = format_value,
) -> Html:  # fmt: skip
    """A small line chart with a caption naming each series and its latest value; the
    y axis runs from 0 to the largest value shown (written at the top left). ``capacity``
    (the ring's) fixes the x scale, so a chart fills from the left as samples come."""
    points = max((len(s.values) for s in series), default=0)
    slots = max(capacity or points, 2)
    known = [v for s in series for _, v in (p for run in _segments(s.values) for p in run)]
    top = max(known, default=0.0) or 1.0
    pad_top, pad_bottom = 14, 4
    plot_height = height - pad_top - pad_bottom

    def xy(index: int, value: float) -> str:
        x = index * (width - 2) / (slots - 1) + 1
        y = pad_top + plot_height * (1 - value / top)
        return f"{x:.1f},{y:.1f}"

    lines: list[Html] = []
    legend: list[Html] = []
    for colour, line in zip(COLOURS, series, strict=False):
        for run in _segments(line.values):
            if len(run) == 1:  # a lone point: a dot
                x, y = xy(*run[0]).split(",")
                lines.append(render('<circle cx="{}" cy="{}" r="2" fill="{}"/>', x, y, colour))
            else:
                lines.append(render(
                    '<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5" '
                    'stroke-linejoin="round"/>', " ".join(xy(i, v) for i, v in run), colour,
                ))  # fmt: skip
        latest = next((v for v in reversed(line.values) if v is not None), None)
        legend.append(render(
            '<span class="series"><svg width="10" height="10" aria-hidden="true"><rect '
            'width="10" height="10" fill="{}"/></svg> {} {}</span>',
            colour, line.label, describe(latest, unit),
        ))  # fmt: skip
    svg = render(
        '<svg class="spark" id="{}" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}"><rect x="0.5" y="0.5" width="{}" height="{}" fill="#fff" '
        'stroke="#d8dde6"/><text x="4" y="11" font-size="10" fill="#667085">{}</text>{}</svg>',
        chart_id, width, height, width, height, title, width - 1, height - 1,
        describe(max(known) if known else None, unit), join(lines),
    )  # fmt: skip
    return render(
        '<figure class="spark"><figcaption><strong>{}</strong> {}</figcaption>{}</figure>',
        title, join(legend, " "), svg,
    )


def series_chart(
    capacity: int, chart_id: str, title: str, unit: str, *series: tuple[str, list[float | None]]
) -> Html:
    """A :func:`sparkline` of named value lists over a ring of ``capacity`` samples."""
    return sparkline([Series(label, values) for label, values in series], chart_id=chart_id,
                     title=title, unit=unit, capacity=capacity)  # fmt: skip
