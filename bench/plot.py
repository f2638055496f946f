"""SVG plots of the benchmark tables: the same rows a bench script prints, drawn with matplotlib.

Every chart is one shape, :func:`chart_drawing.grouped_bars`: horizontal bars, one group per
table row, one bar per series (kayak and its peers measured in the same run), the value
written at each bar and the ratio at the bar that carries it; the title says what was
measured, the axis its unit, and a footnote the command line. What a table's columns mean is
data, a :class:`chart_specs.ChartSpec` per table in :data:`chart_specs.CHARTS`; the cells are
parsed from the formatted text the script prints (bench/chart_data.py), so a plot and its
table cannot disagree.

Scripts draw their own table with ``--plot PATH.svg`` (through ``result_tables.plot_table``);
``python bench/plot.py --from-readme`` draws README's benchmark tables as they stand
(bench/readme_tables.py finds them), into docs/bench/, without re-running anything.

Output is reproducible: the same rows give the same bytes (fixed ``svg.hashsalt``, text kept
as text, no date in the metadata).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from chart_data import chart_from_table, clean
from chart_drawing import grouped_bars
from chart_specs import CHARTS
from readme_tables import markdown_tables

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
OUT_DIR = REPO / "docs" / "bench"


def write_chart(path: Path, chart: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
                command: str = "") -> Path:  # fmt: skip
    """Draw a table with the chart :data:`CHARTS` names ``chart``; write the SVG to ``path``."""
    svg = grouped_bars(chart_from_table(CHARTS[chart], columns, rows, command))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg, encoding="utf-8")
    return path


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
