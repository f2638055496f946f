"""tools/test_durations.py: the table of seconds per test file that orders the collection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, load_tool

REPORT = """<testsuites><testsuite>
<testcase classname="tests.broker.test_slow" name="test_a" time="40.5"/>
<testcase classname="tests.broker.test_slow" name="test_b" time="20.2"/>
<testcase classname="tests.spark.test_model.TestMachine" name="runTest" time="9.4"/>
<testcase classname="tests.test_top" name="test_c" time="70"/>
<testcase classname="conftest" name="setup" time="5"/>
</testsuite></testsuites>"""


def test_seconds_are_summed_per_file_longest_first(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    table = load_tool("test_durations.py").file_seconds(report)
    assert list(table.items()) == [
        ("tests/test_top.py", 70),
        ("tests/broker/test_slow.py", 61),
        ("tests/spark/test_model.py", 9),
    ]


def test_bad_reports_exit_2_with_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites")
    empty = tmp_path / "empty.xml"
    empty.write_text("<testsuites/>")
    for args, message in [
        ([], "usage"),
        ([str(tmp_path / "missing.xml")], "usage"),
        ([str(broken)], "not a JUnit XML report"),
        ([str(empty)], "no test cases"),
    ]:
        run = subprocess.run(
            [sys.executable, str(REPO / "tools" / "test_durations.py"), *args],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert run.returncode == 2, (args, run.stderr)
        assert message in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_the_committed_table_names_test_files() -> None:
    table = json.loads((REPO / "tests" / "durations.json").read_text())
    assert table and all(path.startswith("tests/") and path.endswith(".py") for path in table)
    assert list(table.values()) == sorted(table.values(), reverse=True)
