"""A capture source that survives its database going away for a while.

:class:`ReconnectingSource` wraps a source opened by a factory. When the source fails in a
way that passes (connection refused, server restart, the backend shut down by an
administrator, a slot still held by the backend that just died), it closes the source and
opens a new one, with exponential backoff, until it works again or ``give_up_after_s`` passed.
The new source resumes from the database's own checkpoint (a PostgreSQL slot's confirmed
position), so changes handed out but not acknowledged are handed out again; those at or
before the last change already handed out are dropped here. The capture loop publishes every
change it reads before it reads again, so nothing is lost and nothing published twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from kayak.cdc.change import Change, TableSchema
from kayak.cdc.errors import CaptureError
from kayak.cdc.source import ChangeSource

__all__ = ["ReconnectingSource", "is_transient"]

log = logging.getLogger(__name__)


def is_transient(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) is a database connection problem that a new
    connection may not have: psycopg's ``OperationalError`` family (connection refused or
    lost, admin shutdown, server starting up or shutting down, object in use by a backend
    being terminated)."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, psycopg.OperationalError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class ReconnectingSource:
    """A :class:`~kayak.cdc.source.ChangeSource` that reopens ``open_source()`` after a
    transient failure (see the module docstring). The first open happens here and is not
    retried: a source that cannot start fails at once. Setting ``stopping`` ends the waiting
    between attempts (with :class:`~kayak.cdc.errors.CaptureError`)."""

    def __init__(
        self,
        open_source: Callable[[], ChangeSource],
        *,
        transient: Callable[[BaseException], bool] = is_transient,
        first_backoff_s: float = 0.2,
        max_backoff_s: float = 10.0,
        give_up_after_s: float = 300.0,
        stopping: threading.Event | None = None,
    ) -> None:
        self._open = open_source
        self._transient = transient
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        self._give_up_after_s = give_up_after_s
        self._stopping = stopping or threading.Event()
        self._source: ChangeSource | None = open_source()
        self._last_position: str | None = None
        # Since when the source keeps failing (None: it works), and the next pause.
        self._failing_since: float | None = None
        self._last_error: BaseException | None = None
        self._backoff_s = first_backoff_s
        self.reconnects = 0

    def tables(self) -> Sequence[TableSchema]:
        return self._current().tables()

    def read(self, max_changes: int, timeout_s: float) -> list[Change]:
        """The next changes after the last handed out, reconnecting first if needed."""
        while True:
            source = self._current()
            try:
                changes = source.read(max_changes, timeout_s)
            except Exception as e:
                if not self._transient(e):
                    raise
                self._lost(e)
                continue
            self._working()
            if self._last_position is not None:
                changes = [c for c in changes if c.position > self._last_position]
            if changes:
                self._last_position = changes[-1].position
            return changes

    def acknowledge(self, last: Change) -> None:
        """Forward the acknowledgement; if the connection is gone, the source reopened later
        starts from the previous acknowledgement and its repeats are dropped on read."""
        source = self._current()
        try:
            source.acknowledge(last)
        except Exception as e:
            if not self._transient(e):
                raise
            self._lost(e)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None

    def _lost(self, error: BaseException) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning("capture source lost: %s; reconnecting", _first_line(error))
        log.debug("capture source failure", exc_info=error)
        self._last_error = error
        if self._source is not None:
            try:
                self._source.close()
            except Exception:
                log.debug("while closing the lost source", exc_info=True)
            self._source = None

    def _working(self) -> None:
        if self._failing_since is not None:
            log.warning("capture source reconnected after %.1f s",
                        time.monotonic() - self._failing_since)  # fmt: skip
            self._failing_since = None
            self._backoff_s = self._first_backoff_s

    def _current(self) -> ChangeSource:
        while self._source is None:
            assert self._failing_since is not None
            waited = time.monotonic() - self._failing_since
            if waited >= self._give_up_after_s:
                raise CaptureError(
                    f"capture source unavailable for {waited:.0f} s: "
                    f"{_first_line(self._last_error or CaptureError('unknown'))}"
                ) from self._last_error
            if self._stopping.wait(self._backoff_s):
                raise CaptureError("capture stopped while its source was unavailable")
            self._backoff_s = min(self._backoff_s * 2, self._max_backoff_s)
            try:
                self._source = self._open()
            except Exception as e:
                if not self._transient(e):
                    raise
                self._last_error = e
                log.info("capture source still unavailable (%s); next try in %.1f s",
                         _first_line(e), self._backoff_s)  # fmt: skip
                continue
            self.reconnects += 1
        return self._source


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
