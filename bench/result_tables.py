"""Result tables of the benchmarks (not one itself): medians, spreads and ratios of the
samples, formatted into a :class:`Table` printed as aligned text or as Markdown for the
README; and their plots (``--plot PATH.svg``, drawn by bench/plot.py from the same rows).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from peers import REPO


def median(samples: Sequence[float]) -> float:
    """The median of the measured samples (NaN: a run that failed to measure it)."""
    measured = [s for s in samples if s == s]
    return statistics.median(measured) if measured else float("nan")


def spread(samples: Sequence[float]) -> str:
    """``min-max`` of the samples, compactly, to show how noisy a median is."""
    measured = [s for s in samples if s == s]
    if not measured:
        return "-"
    return f"{human(min(measured))}-{human(max(measured))}"


def human(value: float) -> str:
    if value != value:  # NaN: not measured
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def paired_ratio(mine: Sequence[float], theirs: Sequence[float]) -> float:
    """Median over runs of mine/theirs within each run: noise that hits a whole run cancels."""
    pairs = [a / b for a, b in zip(mine, theirs, strict=False) if b and a == a and b == b]
    return median(pairs) if pairs and len(mine) == len(theirs) else float("nan")


def times(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


def percent(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"


@dataclass
class Table:
    """Rows of already formatted cells; rendered as aligned text or as Markdown."""

    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([c if isinstance(c, str) else human(float(c)) for c in cells])  # type: ignore[arg-type]

    def text(self) -> str:
        widths = [
            max(len(self.columns[i]), *(len(row[i]) for row in self.rows))
            for i in range(len(self.columns))
        ]
        lines = [_aligned(self.columns, widths), "  ".join("-" * w for w in widths)]
        lines += [_aligned(row, widths) for row in self.rows]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "| " + " | ".join(["---"] + ["---:"] * (len(self.columns) - 1)) + " |",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def _aligned(cells: Sequence[str], widths: Sequence[int]) -> str:
    first, *rest = cells
    return "  ".join(
        [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
    )


# -- plots ---------------------------------------------------------------------------------


def add_plot_option(parser: argparse.ArgumentParser) -> None:
    """``--plot PATH.svg``: also draw the printed table (bench/plot.py; needs matplotlib)."""
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PATH.svg",
        help="also draw the table as an SVG chart (needs matplotlib: pip install -e '.[bench]')",
    )


def plot_table(path: Path | None, chart: str, table: Table) -> None:
    """Draw the rows ``table`` prints with bench/plot.py's chart ``chart``, into ``path``.

    The plot reads the same formatted medians as the printed table, so the two agree.
    """
    if path is None:
        return
    from plot import write_chart  # matplotlib is imported only when a plot is asked for

    write_chart(path, chart, table.columns, table.rows, f"$ {command_line()}")
    print(f"plot: {path}")


def command_line(argv: Sequence[str] | None = None) -> str:
    """This run's command line as README quotes it, without ``--plot`` (it changes nothing)."""
    args = list(sys.argv if argv is None else argv)
    script = Path(args[0]).resolve()
    shown = [_python(), str(script.relative_to(REPO)) if script.is_relative_to(REPO) else args[0]]
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--plot":
            next(rest, None)
        elif not arg.startswith("--plot="):
            shown.append(arg)
    return shlex.join(shown)


def _python() -> str:
    python = Path(sys.executable)
    return str(python.relative_to(REPO)) if python.is_relative_to(REPO) else "python"
