"""The status line of long-running commands (``kayak pipeline run``, ``kayak cdc run``): its
text from the real counters, the live line on a terminal, the periodic log line elsewhere,
and ``kayak cdc run`` as a process against a real broker, off a terminal and on one."""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from kayak.cdc.capture import CaptureStats
from kayak.cdc.sqlite import enable
from kayak.cli.status_line import Progress, StatusLine, capture_progress, pipeline_progress
from kayak.pipeline.job import ReplicationStats
from kayak.pipeline.workload import create_orders, run_workload
from tests.cli.test_pipeline_stop import TerminalRun
from tests.client.conftest import RunningBroker


def test_pipeline_line_says_captured_applied_backlog_and_last_batch() -> None:
    capture = CaptureStats(changes=1234, events=1300, batches=3, last_batch_changes=34)
    job = ReplicationStats(
        changes=1190, applied=1150, dead_lettered=10, last_batch_changes=500,
        last_batch_s=0.8234, last_batch_behind_ms=1234.0,
    )  # fmt: skip
    text = pipeline_progress(capture, job).describe()
    assert text == (
        "captured 1,234 · applied 1,150 · backlog 34 · dead-lettered 10 · "
        "last batch 500 in 823 ms, 1.2 s behind source"
    )


def test_backlog_is_never_negative_and_snapshot_batches_have_no_delay() -> None:
    # The job read what an earlier run captured; the last batch held snapshot rows only.
    capture = CaptureStats(changes=5)
    job = ReplicationStats(changes=200, applied=200, last_batch_changes=200,
                           last_batch_s=0.012, last_batch_behind_ms=None)  # fmt: skip
    assert pipeline_progress(capture, job).describe() == (
        "captured 5 · applied 200 · backlog 0 · last batch 200 in 12 ms"
    )
    # Before Spark's job exists everything captured is still to be read.
    assert pipeline_progress(capture, None).describe() == "captured 5 · applied 0 · backlog 5"


def test_capture_line_and_long_durations() -> None:
    stats = CaptureStats(changes=70_000, last_batch_changes=5000, last_batch_s=125.0,
                         last_batch_behind_ms=7_300_000.0)  # fmt: skip
    assert capture_progress(stats).describe() == (
        "captured 70,000 · last batch 5,000 in 2m05s, 2h01m behind source"
    )
    assert capture_progress(CaptureStats()).describe() == "captured 0"


def test_terminal_line_is_redrawn_erased_and_log_records_go_above_it() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    stats = CaptureStats()
    handler = logging.StreamHandler(sys.stderr)
    stream = handler.stream
    logging.getLogger().addHandler(handler)
    try:
        with StatusLine(console, lambda: capture_progress(stats), label="capturing",
                        interval_s=3600) as status:  # fmt: skip
            assert status.on_terminal
            _wait_for(lambda: "capturing: captured 0" in out.getvalue())
            stats.changes = 42
            _wait_for(lambda: "capturing: captured 42" in out.getvalue())
            logging.getLogger("kayak.test").warning("a warning while the line shows")
            _wait_for(lambda: "a warning while the line shows\n" in out.getvalue())
        console.print("final line")
    finally:
        logging.getLogger().removeHandler(handler)
    assert handler.stream is stream  # given back
    text = out.getvalue()
    # The warning is a line of its own, not appended to the status line's text.
    assert "captured 42a warning" not in text and "showscapturing" not in text
    # Erased before the final line: that line starts at the beginning of an empty line.
    before_final = text[: text.index("final line")]
    assert before_final.endswith("\x1b[2K") or before_final.endswith("\n"), repr(text[-200:])


def test_off_a_terminal_the_line_is_logged_periodically_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console = Console(file=io.StringIO(), force_terminal=False)
    sample = Progress(captured=7, applied=7, backlog=0)
    with StatusLine(console, lambda: sample, label="replicating", interval_s=0.05):
        time.sleep(0.3)
    lines = [line for line in capsys.readouterr().err.splitlines() if "kayak.status" in line]
    assert len(lines) >= 2, lines
    assert lines[0].endswith("INFO kayak.status: replicating: captured 7 · applied 7 · backlog 0")
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]
    assert logging.getLogger("kayak.status").handlers == []  # its stderr handler removed


def _wait_for(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _capture_argv(db: Path, broker: RunningBroker, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kayak", "cdc", "run", f"sqlite:{db}", "orders",
            "-b", broker.bootstrap_servers, "--format", "json", *extra]  # fmt: skip


def test_cdc_run_off_a_terminal_logs_a_summary_line(
    kayak_broker: RunningBroker, tmp_path: Path
) -> None:
    db = tmp_path / "shop.db"
    create_orders(str(db), 100)
    enable(str(db), "orders")
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            _capture_argv(db, kayak_broker, "--status-interval", "0.5"),
            stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    try:
        _wait_for(lambda: "capturing: captured 100" in stderr_path.read_text(), 30)
        run_workload(str(db), 50)
        _wait_for(lambda: "last batch" in stderr_path.read_text()
                  and "behind source" in stderr_path.read_text(), 30)  # fmt: skip
    finally:
        process.send_signal(signal.SIGTERM)
        status = process.wait(30)
    text = stderr_path.read_text()
    assert status == 0, text
    summaries = [line for line in text.splitlines() if "kayak.status" in line]
    assert summaries, text
    # One plain line each: a timestamp, INFO, the counters; no terminal control codes.
    assert all(" INFO kayak.status: capturing: captured " in line for line in summaries)
    assert "\x1b[" not in text and "\r" not in text
    last = summaries[-1]
    captured = int(last.split("captured ")[1].split(" ")[0].replace(",", ""))
    assert captured == 150  # the snapshot (100 rows) and the workload (50 changes)


def test_cdc_run_on_a_terminal_shows_a_live_line_and_stops_on_ctrl_c(
    kayak_broker: RunningBroker, tmp_path: Path
) -> None:
    db = tmp_path / "shop.db"
    create_orders(str(db), 100)
    enable(str(db), "orders")
    run = TerminalRun.start(_capture_argv(db, kayak_broker), cwd=tmp_path)
    try:
        run.wait_for("capturing: captured 100", timeout_s=30)
        run.press_ctrl_c()
        status = run.wait(timeout_s=30)
    finally:
        if run.process.poll() is None:
            run.process.kill()
    output = run.output
    assert status == 0, output
    assert "captured 100 changes" in output.splitlines()[-1], output
    assert "Traceback" not in output and "kayak.status" not in output, output
