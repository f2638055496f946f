"""bench/produce.py and bench/consume.py in their smallest mode: every client kind (kayak's,
confluent-kafka, the Java client compiled from bench/java) against kayak's broker and Apache
Kafka in one run, with CPU per message from /proc and the ratio columns; and the
READY / go / result protocol (``measured_clients.run_measured``) their child processes speak."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def measured_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """bench/measured_clients.py, imported the way the bench scripts import it."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module("measured_clients")


def _child(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(BENCH)!r})\n{body}")
    return [sys.executable, str(script)]


# Burns CPU before READY and after its result too: neither may be counted.
BURNING_CHILD = """\
import time
from measured_clients import child_ready, child_result

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

burn(0.3)
print("some other output")
child_ready()
burn(0.4)
child_result({"seconds": 0.4})
burn(0.3)
"""


def test_only_the_timed_part_is_charged_to_the_client_and_the_broker(
    measured_clients: ModuleType, tmp_path: Path
) -> None:
    command = _child(tmp_path, BURNING_CHILD)
    # A "broker" busy all the time: it is charged what it used over the timed part only.
    busy = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"
    broker = subprocess.Popen([sys.executable, "-c", busy])
    try:
        started = time.perf_counter()
        measured = measured_clients.run_measured(command, broker.pid, timeout=60)
        elapsed = time.perf_counter() - started
    finally:
        broker.kill()
        broker.wait()
    assert measured.result == {"seconds": 0.4}
    assert 0.35 <= measured.client_cpu <= 0.55  # 0.4 s, give or take a clock tick
    assert 0.01 <= measured.broker_cpu <= elapsed - 0.5  # not the 0.6 s outside the timed part


def test_a_client_failing_before_it_is_ready_is_an_error_with_its_stderr(
    measured_clients: ModuleType, tmp_path: Path
) -> None:
    command = _child(tmp_path, "raise SystemExit('no broker at port 1')\n")
    with pytest.raises(RuntimeError, match="no broker at port 1"):
        measured_clients.run_measured(command, 1, timeout=60)


def test_a_hung_client_is_killed_at_the_timeout(
    measured_clients: ModuleType, tmp_path: Path
) -> None:
    command = _child(tmp_path, "import time\ntime.sleep(60)\n")
    with pytest.raises(RuntimeError, match="timed out"):
        measured_clients.run_measured(command, 1, timeout=1)


# -- the benches end to end ------------------------------------------------------------------


def _markdown_rows(stdout: str, first_column: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose header starts with ``first_column``."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    names = [cell.strip() for cell in lines[header].strip("|").split("|")]
    return [
        dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[header + 2 :]
    ]


def _number(cell: str) -> float:
    return float(cell.removesuffix("x").replace(",", ""))


@pytest.fixture(scope="module")
def java_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of its own: the Java clients are compiled from their sources in this run."""
    return tmp_path_factory.mktemp("bench-java")


def _run_bench(script: str, args: list[str], tmp_path: Path, java_cache: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--data-root", str(tmp_path / "data"),
         "--markdown", "--plot", str(tmp_path / "chart.svg")],
        capture_output=True, text=True, timeout=200, check=False, cwd=REPO,
        env={**os.environ, "KAYAK_BENCH_JAVA_CACHE": str(java_cache), "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    svg = (tmp_path / "chart.svg").read_text()
    assert "Java" in svg and "Apache Kafka" in svg
    return done.stdout


def test_produce_measures_every_client_kind_on_both_brokers(
    tmp_path: Path, java_cache: Path
) -> None:
    stdout = _run_bench(
        "produce.py",
        ["--runs", "1", "--messages", "1000", "--sizes", "10", "--brokers", "kayak,kafka",
         "--clients", "kayak-send,confluent-kafka,java", "--warm-up", "0"],
        tmp_path, java_cache,
    )  # fmt: skip
    rows = {(row["broker"], row["client"]): row for row in _markdown_rows(stdout, "broker")}
    assert set(rows) == {
        (broker, client)
        for broker in ("kayak", "Apache Kafka")
        for client in ("kayak send", "confluent-kafka", "Java producer")
    }
    for row in rows.values():
        assert _number(row["msg/s (median)"]) > 0
        assert _number(row["client CPU µs/msg"]) >= 0
        assert _number(row["broker CPU µs/msg"]) >= 0
    for broker in ("kayak", "Apache Kafka"):
        send = rows[(broker, "kayak send")]
        assert _number(send["vs confluent-kafka"]) > 0 and _number(send["vs Java"]) > 0
        assert rows[(broker, "Java producer")]["vs Java"] == "-"
    # (the bench itself fails unless every topic's high watermark is the messages sent, and
    # the Java client unless every per-record callback came back without an error)


def test_consume_measures_every_client_kind_on_both_brokers(
    tmp_path: Path, java_cache: Path
) -> None:
    stdout = _run_bench(
        "consume.py",
        ["--runs", "1", "--size", "1", "--brokers", "kayak,kafka",
         "--readers", "kayak-iter,confluent,java", "--warm-up", "0"],
        tmp_path, java_cache,
    )  # fmt: skip
    rows = {(row["broker"], row["reader"]): row for row in _markdown_rows(stdout, "reader")}
    assert set(rows) == {
        (broker, reader)
        for broker in ("kayak", "Apache Kafka")
        for reader in ("kayak async for", "confluent-kafka consume", "Java consumer poll")
    }
    for (_, reader), row in rows.items():
        assert _number(row["records/s"]) > 0
        assert _number(row["reader CPU µs/rec"]) >= 0
        if reader != "Java consumer poll":
            assert _number(row["vs Java"]) > 0
    assert _number(rows[("Apache Kafka", "kayak async for")]["vs confluent"]) > 0
