"""``kayak pipeline run`` stops cleanly: a terminal's Ctrl-C and SIGTERM both catch up, verify,
stop Spark and leave no process behind.

The command runs on a real pseudo-terminal, as the session leader with the pty as its
controlling terminal, so a ``^C`` written to the master makes the kernel signal the whole
foreground process group, exactly as a user's Ctrl-C does.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kayak.pipeline.workload import create_orders, run_workload

MARKER = "KAYAK_TEST_PIPELINE_RUN"
# rich's spinner glyphs (the Braille block), stripped to count the lines a run shows.
_SPINNER = "".join(chr(c) for c in range(0x2800, 0x2900))
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _foreground_job() -> None:
    """In the child, before exec: what an interactive shell does for a foreground job. The
    pty becomes the controlling terminal, and Ctrl-C is restored to its default: a harness
    that started the tests in the background (no job control) leaves SIGINT ignored, and
    an ignored SIGINT is inherited, so Ctrl-C would never reach the command."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class TerminalRun:
    """A command on a pseudo-terminal; the terminal's output is collected as it comes."""

    process: subprocess.Popen[bytes]
    master: int
    marker: str
    chunks: list[bytes] = field(default_factory=list)

    @classmethod
    def start(cls, argv: list[str], cwd: Path) -> TerminalRun:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        marker = uuid.uuid4().hex
        process = subprocess.Popen(
            argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
            # faulthandler: a run that hangs is aborted by wait() with every thread's stack
            env={**os.environ, MARKER: marker, "TERM": "xterm", "PYTHONFAULTHANDLER": "1"},
            start_new_session=True,  # then the pty becomes its controlling terminal
            preexec_fn=_foreground_job,
        )  # fmt: skip
        os.close(slave)
        run = cls(process, master, marker)
        threading.Thread(target=run._read, daemon=True).start()
        return run

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal is gone
                return
            if not data:
                return
            self.chunks.append(data)

    @property
    def output(self) -> str:
        """What the terminal shows, without colours and cursor moves (the spinner's lines
        each end up on a line of their own)."""
        text = b"".join(self.chunks).decode(errors="replace")
        return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            assert self.process.poll() is None, f"exited early:\n{self.output}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output}"
            time.sleep(0.1)

    def press_ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)  # dumps the stacks onto the terminal
            time.sleep(1.0)
            raise AssertionError(f"still running {timeout_s} s on:\n{self.output}") from None
        finally:
            time.sleep(0.2)  # the reader drains what is left
            os.close(self.master)


def processes_with(marker: str) -> dict[int, str]:
    """Living processes (zombies aside) whose environment holds ``MARKER=marker``: every
    process the pipeline started inherits it (broker, Spark JVM, Python workers)."""
    needle = f"{MARKER}={marker}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :].split()[0] != b"Z":
            found[int(entry)] = cmdline[:200]
    return found


def wait_for_python_workers(marker: str) -> None:
    """Until Spark runs Python workers (its first batch), so that their end is checked too."""
    deadline = time.monotonic() + 120
    while not any("pyspark" in cmd for cmd in processes_with(marker).values()):
        assert time.monotonic() < deadline, "Spark started no Python worker"
        time.sleep(0.1)


def assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 5
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of the pipeline still running: {left}"


def start_pipeline(tmp_path: Path) -> tuple[TerminalRun, Path]:
    source = tmp_path / "shop.db"
    create_orders(str(source), 200)
    run = TerminalRun.start(
        [sys.executable, "-m", "kayak", "pipeline", "run", "--source", f"sqlite:{source}",
         "--table", "orders", "--target", f"sqlite:{tmp_path / 'copy.db'}",
         "--work-dir", str(tmp_path / "work")],
        cwd=tmp_path,
    )  # fmt: skip
    run.wait_for("replicating orders", timeout_s=180)
    return run, source


def assert_stopped_cleanly(run: TerminalRun, source: Path, status: int) -> None:
    output = run.output
    assert status == 0, output
    expected = sqlite3.connect(source).execute("SELECT count(*) FROM orders").fetchone()[0]
    assert f"verified: {expected} rows, source == target" in output
    for dump in ("Traceback", "Exception", "\tat ", "ERROR", "Error"):
        assert dump not in output, output
    # Each spinner frame is a line of its own: without its glyph (Braille block), one line.
    lines = {line.strip().lstrip(_SPINNER).strip() for line in output.splitlines()}
    assert len(lines - {""}) < 40, output  # the spinners, the table, a few lines: no Spark dump
    assert_nothing_left(run.marker)


def test_ctrl_c_in_a_terminal_catches_up_verifies_and_leaves_nothing(tmp_path: Path) -> None:
    run, source = start_pipeline(tmp_path)
    try:
        run_workload(str(source), 500)
        wait_for_python_workers(run.marker)
        run.press_ctrl_c()
        status = run.wait(timeout_s=180)
    finally:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
    assert "stopping: catching up" in run.output
    assert_stopped_cleanly(run, source, status)


# SIGTERM (catch up, verify, nothing left, no dump) is tested under load, with the source and
# the target restarted first, by tests/cli/test_pipeline_restarts.py.
