"""A capture source that survives its database going away for a while, and which database
errors are worth a retry.

:func:`is_transient` classifies a database error by its driver's class and SQLSTATE (psycopg)
or result code (sqlite3), never by its message: a lost or refused connection, a server
restarting or shutting down, an administrator's ``pg_terminate_backend``, a lock or a
serialization conflict pass; a constraint violation, a type error or a missing object do not.
Both ends of a pipeline use it (the target side in :mod:`kayak.pipeline.transient`).

:class:`ReconnectingSource` wraps a source opened by a factory. When the source fails
transiently, it closes the source and opens a new one, with exponential backoff and jitter
(:class:`~kayak.client.backoff.ExponentialBackoff`), until it works again or
``give_up_after_s`` passed. The new source resumes from the database's own checkpoint (a
PostgreSQL slot's confirmed position), so changes handed out but not acknowledged are handed
out again; those at or before the last change already handed out are dropped here. The
capture loop hands every change it reads to the producer before it reads again (and
acknowledges it to the source once the broker has it), so nothing is lost and nothing
published twice.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from kayak.cdc.change import Change, TableSchema
from kayak.cdc.errors import CaptureError
from kayak.cdc.source import ChangeSource
from kayak.client.backoff import ExponentialBackoff

__all__ = ["ReconnectingSource", "causes", "is_transient", "transient_database_error"]

log = logging.getLogger(__name__)

# SQLSTATEs (PostgreSQL appendix A) that a later attempt, on a new connection if need be, may
# not meet: class 08 connection exception (any code), and these.
_TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown: pg_terminate_backend, or a fast/smart shutdown
        "57P02",  # crash_shutdown: another backend crashed, the server restarts
        "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
        "57P05",  # idle_session_timeout
        "53300",  # too_many_connections
        "40001",  # serialization_failure: the transaction can be redone as is
        "40P01",  # deadlock_detected: idem
        "55P03",  # lock_not_available
        "55006",  # object_in_use: e.g. a replication slot still held by a backend that is exiting
    }
)
# SQLite primary result codes: SQLITE_BUSY ("database is locked") and SQLITE_LOCKED.
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it (``raise … from``, or raised while handling), once each."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def transient_database_error(error: BaseException) -> bool | None:
    """For a database driver's own error: True if transient, False if not; None for any
    other exception (not a database error, so no verdict here)."""
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        # Extended codes (SQLITE_BUSY_SNAPSHOT, …) carry the primary code in the low byte.
        return isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg comes with the postgres extra
        return None
    if not isinstance(error, psycopg.Error):
        return None
    sqlstate = error.sqlstate
    if sqlstate is None:
        # No answer from a server: the connection was refused, lost, or is closed.
        return isinstance(error, psycopg.OperationalError)
    return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


def is_transient(error: BaseException) -> bool:
    """True when ``error``, or the first database error among its causes, is one that passes
    (see the module docstring); False for anything else, e.g. a constraint violation, or an
    error with no database error behind it."""
    for link in causes(error):
        verdict = transient_database_error(link)
        if verdict is not None:
            return verdict
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
        self._backoff = ExponentialBackoff(first_backoff_s * 1000, max_backoff_s * 1000)
        self._give_up_after_s = give_up_after_s
        self._stopping = stopping or threading.Event()
        self._source: ChangeSource | None = open_source()
        self._last_position: str | None = None
        # Since when the source keeps failing (None: it works), and the failed reopens since.
        self._failing_since: float | None = None
        self._last_error: BaseException | None = None
        self._attempt = 0
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
            self._attempt = 0

    def _current(self) -> ChangeSource:
        while self._source is None:
            assert self._failing_since is not None
            waited = time.monotonic() - self._failing_since
            if waited >= self._give_up_after_s:
                raise CaptureError(
                    f"capture source unavailable for {waited:.0f} s: "
                    f"{_first_line(self._last_error or CaptureError('unknown'))}"
                ) from self._last_error
            pause = min(self._backoff.delay(self._attempt), self._give_up_after_s - waited)
            self._attempt += 1
            if self._stopping.wait(pause):
                raise CaptureError("capture stopped while its source was unavailable")
            try:
                self._source = self._open()
            except Exception as e:
                if not self._transient(e):
                    raise
                self._last_error = e
                log.info("capture source still unavailable: %s", _first_line(e))
                continue
            self.reconnects += 1
        return self._source


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
