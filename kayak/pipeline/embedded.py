"""The embedded broker (with its schema registry) as a child process of a pipeline.

A child process rather than a thread: it gets its own interpreter lock, so the broker, the
capture loop and Spark's driver do not take turns on one core. It watches its parent and
shuts down cleanly when the parent is gone, so a killed pipeline leaves no broker behind. It
runs in a session of its own, so a terminal's Ctrl-C reaches the pipeline only, which stops
the broker last.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from kayak.errors import KayakError

__all__ = ["EmbeddedBroker"]

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")
_REGISTRY = re.compile(r"schema registry on (http://[\w.\-]+:\d+)")


class EmbeddedBroker:
    """``kayak broker`` on ``data_dir`` with ephemeral ports for Kafka and the registry."""

    def __init__(self, data_dir: Path, *, start_timeout_s: float = 30.0) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.start_timeout_s = start_timeout_s
        self.bootstrap_servers = ""
        self.registry_url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            start = out.tell()
            self._process = subprocess.Popen(
                [sys.executable, "-m", "kayak", "-v", "broker", "--data-dir", str(self.data_dir),
                 "--port", "0", "--schema-registry-port", "0", "--exit-with-parent"],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                # Out of the terminal's process group: a Ctrl-C is the pipeline's to handle,
                # and it needs the broker running while it catches up.
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            listening, registry = _LISTENING.findall(text), _REGISTRY.findall(text)
            if listening and registry:
                self.bootstrap_servers = f"{listening[-1][0]}:{listening[-1][1]}"
                self.registry_url = registry[-1]
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise KayakError(f"embedded broker did not start; its log is {self.log_path}")

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs."""
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
