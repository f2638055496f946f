"""Write tests/durations.json, each test file's seconds, from a pytest JUnit XML report.

``make test`` hands pytest-xdist whole files, longest first (tests/conftest.py orders them by
this table), so that no long file starts last and runs alone at the end. Refresh the table
after a run that wrote a report::

    PYTEST_ADDOPTS=--junitxml=/tmp/junit.xml make test
    .venv/bin/python tools/test_durations.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def file_seconds(report: Path) -> dict[str, int]:
    """Seconds per test file (``tests/x/test_y.py``), summed over its test cases."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        modules = [i for i, part in enumerate(parts) if part.startswith("test_")]
        if not modules:
            continue
        path = "/".join(parts[: modules[0] + 1]) + ".py"
        seconds[path] += float(case.get("time") or 0)
    return {path: round(s) for path, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: tools/test_durations.py JUNIT_XML", file=sys.stderr)
        return 2
    try:
        table = file_seconds(Path(argv[0]))
    except ET.ParseError as exc:
        print(f"{argv[0]}: not a JUnit XML report ({exc})", file=sys.stderr)
        return 2
    if not table:
        print(f"{argv[0]}: no test cases in the report", file=sys.stderr)
        return 2
    TABLE.write_text(json.dumps(table, indent=0) + "\n")
    print(f"{TABLE}: {len(table)} files, {sum(table.values())} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
