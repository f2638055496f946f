"""Clients measured in a process of their own, for the client benchmarks (not one itself).

The parent starts a client (Python or JVM) as a child process and reads the CPU clocks of
the child and of the broker only over the child's timed part, with a small line protocol on
the child's stdin and stdout: the child prints READY once set up and warmed up and waits for
``go``; it prints its result as one JSON line and waits for ``done`` before cleaning up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

_READY, _GO, _DONE = "READY", "go", "done"


def child_ready() -> None:
    """In a child run by :func:`run_measured`: set up and warmed up; wait to be timed."""
    print(_READY, flush=True)
    sys.stdin.readline()


def child_result(result: dict[str, Any]) -> None:
    """In a child run by :func:`run_measured`: the timed part's result, one JSON line; then
    wait (idle) while the parent reads the CPU clocks, before cleaning up."""
    print(json.dumps(result), flush=True)
    sys.stdin.readline()


@dataclass(frozen=True)
class Measured:
    """What a child reported, and the CPU seconds (from /proc, in clock ticks: 10 ms) it and
    the broker used over its timed part: between its READY line and its result line, read
    while it waited at both."""

    result: dict[str, Any]
    client_cpu: float
    broker_cpu: float


def run_measured(command: Sequence[str], broker_pid: int, timeout: float) -> Measured:
    """Run a client (Python or JVM) speaking the READY / go / result / done protocol."""
    from usage import server_cpu_seconds

    with (
        tempfile.TemporaryFile("w+") as errors,
        subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True
        ) as child,
    ):
        watchdog = threading.Timer(timeout, child.kill)  # a hung client cannot hang the bench
        watchdog.start()
        try:
            assert child.stdin is not None and child.stdout is not None
            _read_until(child.stdout, lambda line: line == _READY, errors)
            client, broker = server_cpu_seconds(child.pid), server_cpu_seconds(broker_pid)
            child.stdin.write(_GO + "\n")
            child.stdin.flush()
            line = _read_until(child.stdout, lambda line: line.startswith("{"), errors)
            client = server_cpu_seconds(child.pid) - client
            broker = server_cpu_seconds(broker_pid) - broker
            child.stdin.write(_DONE + "\n")
            child.stdin.close()
            child.stdout.read()
            if child.wait() != 0:
                raise RuntimeError(f"{command[0]} exited {child.returncode}: {_tail(errors)}")
        finally:
            watchdog.cancel()
            if child.poll() is None:  # failed on this side: the child must not outlive it
                child.kill()
    return Measured(json.loads(line), client, broker)


def _read_until(stream: IO[str], wanted: Callable[[str], bool], errors: IO[str]) -> str:
    """The first line of ``stream`` that is ``wanted`` (other output is skipped)."""
    for line in stream:
        if wanted(line.strip()):
            return line.strip()
    raise RuntimeError(f"the client stopped early (or timed out): {_tail(errors)}")


def _tail(errors: IO[str]) -> str:
    errors.seek(0)
    return errors.read()[-3000:]
