"""Progress of a long-running command: one live line on a terminal, a log line otherwise.

``kayak pipeline run`` and ``kayak cdc run`` sample their counters into a :class:`Progress`
(``captured 1,234 · applied 1,200 · backlog 34 · last batch 500 in 820 ms, 1.2 s behind
source``). While a :class:`StatusLine` is open, a terminal shows that line under a spinner,
redrawn a few times a second, with log records printed above it and the line erased at the
end, so the command's final lines come out clean. Elsewhere (a pipe, a file, a service's
journal) the same text is logged at INFO on ``kayak.status`` every ``interval_s``, one line
each, on stderr and in any log file the command keeps.

What the numbers mean:

- *captured*: changes the capture read from the source and the broker acknowledged, in
  this run;
- *applied*: rows the target was written with; fewer than the changes read when a batch
  held several changes of one key (only the latest is written);
- *backlog*: changes captured in this run that the replication job has not read yet;
  approximate (an update changing a primary key is two events on the log);
- *last batch*: the last batch that held changes, how many and how long it took; *behind
  source* is the largest delay in it from a change's commit in the source to its commit in
  the target (``kayak cdc run``: to the broker's acknowledgement). It is not a clock that
  runs while nothing happens: an idle source is not behind.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, TextIO

import click
from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner

__all__ = [
    "DEFAULT_INTERVAL_S",
    "STATUS_INTERVAL_OPTION",
    "LastBatch",
    "Progress",
    "StatusLine",
    "capture_progress",
    "pipeline_progress",
]

log = logging.getLogger("kayak.status")

DEFAULT_INTERVAL_S = 30.0
# Redraws per second of the terminal line: enough for a spinner, not enough to flicker.
_REFRESHES_PER_SECOND = 4


STATUS_INTERVAL_OPTION = click.option(
    "--status-interval", type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_INTERVAL_S, show_default=True, metavar="SECONDS",
    help="Log the status line this often (INFO; on stderr when not on a terminal).",
)  # fmt: skip


class CaptureCounters(Protocol):
    """What a capture loop counts (:class:`kayak.cdc.capture.CaptureStats`)."""

    @property
    def changes(self) -> int: ...
    @property
    def last_batch_changes(self) -> int: ...
    @property
    def last_batch_s(self) -> float: ...
    @property
    def last_batch_behind_ms(self) -> float | None: ...


class ApplyCounters(CaptureCounters, Protocol):
    """What the replication job counts (:class:`kayak.pipeline.job.ReplicationStats`)."""

    @property
    def applied(self) -> int: ...
    @property
    def dead_lettered(self) -> int: ...


@dataclass(frozen=True)
class LastBatch:
    """The last batch that held changes."""

    changes: int
    duration_s: float
    behind_source_s: float | None  # None: snapshot rows only, which have no commit time

    def describe(self) -> str:
        text = f"last batch {self.changes:,} in {format_duration(self.duration_s)}"
        if self.behind_source_s is not None:
            text += f", {format_duration(self.behind_source_s)} behind source"
        return text


@dataclass(frozen=True)
class Progress:
    """One sample of a long-running command's counters; ``None`` where a command has no
    such number (``kayak cdc run`` applies nothing)."""

    captured: int
    applied: int | None = None
    backlog: int | None = None
    dead_lettered: int = 0
    last_batch: LastBatch | None = None

    def describe(self) -> str:
        """The counters as one line of text."""
        parts = [f"captured {self.captured:,}"]
        if self.applied is not None:
            parts.append(f"applied {self.applied:,}")
        if self.backlog is not None:
            parts.append(f"backlog {self.backlog:,}")
        if self.dead_lettered:
            parts.append(f"dead-lettered {self.dead_lettered:,}")
        if self.last_batch is not None:
            parts.append(self.last_batch.describe())
        return " · ".join(parts)


def format_duration(seconds: float) -> str:
    """``12 ms``, ``1.5 s``, ``2m05s``: short, and precise enough for a status line."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _last_batch(counters: CaptureCounters) -> LastBatch | None:
    if not counters.last_batch_changes:
        return None
    behind_ms = counters.last_batch_behind_ms
    return LastBatch(
        changes=counters.last_batch_changes,
        duration_s=counters.last_batch_s,
        behind_source_s=None if behind_ms is None else behind_ms / 1000,
    )


def capture_progress(capture: CaptureCounters) -> Progress:
    """``kayak cdc run``'s progress: what the capture published, its last batch."""
    return Progress(captured=capture.changes, last_batch=_last_batch(capture))


def pipeline_progress(capture: CaptureCounters | None, job: ApplyCounters | None) -> Progress:
    """``kayak pipeline run``'s progress: captured by the capture, read and applied by the
    replication job (its last batch); either may not have started yet."""
    captured = capture.changes if capture is not None else 0
    if job is None:
        return Progress(captured=captured, applied=0, backlog=captured)
    read = job.changes + job.dead_lettered
    return Progress(
        captured=captured,
        applied=job.applied,
        # The job may first read what an earlier run captured: never below zero.
        backlog=max(0, captured - read),
        dead_lettered=job.dead_lettered,
        last_batch=_last_batch(job),
    )


class _LiveText:
    """The terminal line's content: sampled at each redraw, so it is never stale."""

    def __init__(self, status: StatusLine) -> None:
        self._status = status
        self._spinner = Spinner("dots", text=status.label)

    def __rich__(self) -> Spinner:
        try:
            self._spinner.update(text=self._status.text())
        except Exception:  # a failed sample must not kill rich's refresh thread: keep the line
            log.debug("status sample failed", exc_info=True)
        return self._spinner


class StatusLine:
    """Shows ``sample()``'s progress while open: see the module's doc. ``label`` (what the
    command does now, e.g. ``replicating``, ``catching up``) may change while it is open."""

    def __init__(
        self, console: Console, sample: Callable[[], Progress], *, label: str,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:  # fmt: skip
        self.console = console
        self.label = label
        self.interval_s = interval_s
        self._sample = sample
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._undo: list[Callable[[], None]] = []

    @property
    def on_terminal(self) -> bool:
        return self.console.is_terminal

    def text(self) -> str:
        """``label: counters``, as the line shows it and the log line says it."""
        return f"{self.label}: {self._sample().describe()}"

    def __enter__(self) -> StatusLine:
        if self.on_terminal:
            handlers = _console_handlers()  # before rich replaces sys.stdout and sys.stderr
            self._live = Live(
                _LiveText(self), console=self.console, transient=True,
                refresh_per_second=_REFRESHES_PER_SECOND,
            )  # fmt: skip
            self._live.start()
            self._undo.append(_route_to(handlers, sys.stderr))  # rich's proxy now
        else:
            self._undo.append(_status_log_to_stderr())
        self._thread = threading.Thread(target=self._log_periodically, name="kayak-status",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._live is not None:
            self._live.stop()
        while self._undo:
            self._undo.pop()()

    def _log_periodically(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                log.info("%s", self.text())
            except Exception:  # a counter read mid-update must not end the reports
                log.debug("status sample failed", exc_info=True)


def _console_handlers() -> list[logging.StreamHandler[TextIO]]:
    """The root logger's handlers writing to this process's stdout or stderr."""
    streams = {id(s) for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}
    return [
        h for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler) and id(h.stream) in streams
    ]  # fmt: skip


def _route_to(handlers: list[logging.StreamHandler[TextIO]], stream: TextIO) -> Callable[[], None]:
    """While the live line shows, log records written to the terminal go through rich's
    proxy (printed above the line) instead of into it; returns the undo."""
    previous = [(h, h.setStream(stream)) for h in handlers]

    def undo() -> None:
        for handler, old in previous:
            if old is not None:
                handler.setStream(old)

    return undo


def _status_log_to_stderr() -> Callable[[], None]:
    """Off a terminal, the INFO status lines must reach stderr whatever the command's log
    level: through the root's stream handler when it passes INFO, else through one of their
    own (the record still reaches the root's other handlers, such as a log file)."""
    old_level = log.level
    log.setLevel(logging.INFO)
    handlers = _console_handlers()
    extra: logging.Handler | None = None
    if not any(h.level <= logging.INFO for h in handlers):
        extra = logging.StreamHandler(sys.stderr)
        fmt = handlers[0].formatter if handlers else None
        extra.setFormatter(fmt or logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                                    "%(message)s"))  # fmt: skip
        log.addHandler(extra)

    def undo() -> None:
        log.setLevel(old_level)
        if extra is not None:
            log.removeHandler(extra)

    return undo
