"""Riding out a target that goes away for a while: the retry policy and a reconnecting target.

A target database may refuse connections, restart, have the apply's backend terminated by an
administrator, or (SQLite) stay locked by another writer. Such failures pass: the apply waits
(exponential backoff with jitter, :class:`~kayak.client.backoff.ExponentialBackoff`), opens a
new connection and redoes the transaction, for up to :attr:`RetryPolicy.give_up_after_s`; then
the last error goes up as if it had not been retried (the apply turns it into its usual one
line, and the pipeline stops). Errors that would only recur (a constraint violation, a refused
schema) are never retried. Which is which is decided by the error's class and code, never by
its message (:func:`is_transient`): a database driver's class and SQLSTATE or result code
(:func:`~kayak.cdc.reconnect.transient_database_error`), a Kafka error's retriable flag, a
schema registry that did not answer or answered 5xx/429.

Redoing a transaction is safe whether or not the lost one committed: every target applies a
change only if its source position is newer than the one stored with the key, in the same
transaction (:mod:`kayak.pipeline.targets.base`), so a redo of a committed transaction
changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kayak.cdc.change import Row, TableSchema
from kayak.cdc.reconnect import causes, transient_database_error
from kayak.client.backoff import Deadline, ExponentialBackoff
from kayak.errors import KayakError, SchemaRegistryError
from kayak.pipeline.targets import AppliedChange, Target, open_target
from kayak.pipeline.targets.base import TableChanges, Truncate

__all__ = [
    "DEFAULT_GIVE_UP_AFTER_S",
    "ReconnectingTarget",
    "RetryPolicy",
    "call_with_retries",
    "is_transient",
    "transient_service_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_GIVE_UP_AFTER_S = 300.0


def transient_service_error(error: BaseException) -> bool | None:
    """For a Kafka or schema registry error: True if it may pass (a retriable Kafka error, a
    client-side timeout, a registry that did not answer or answered 5xx or 429), False if not;
    None for anything else."""
    if isinstance(error, SchemaRegistryError):
        status = error.http_status
        return status is None or status >= 500 or status == 429
    if isinstance(error, KayakError):
        retriable = getattr(error, "retriable", None)  # Kafka errors; see kayak.errors
        return retriable if isinstance(retriable, bool) else None
    return None


def is_transient(error: BaseException) -> bool:
    """True when ``error``, or the first database, Kafka or registry error among its causes,
    is one that passes (see the module docstring); False for anything else."""
    for link in causes(error):
        verdict = transient_database_error(link)
        if verdict is None:
            verdict = transient_service_error(link)
        if verdict is not None:
            return verdict
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """How long a transient failure is retried, and the backoff between attempts (picklable
    and hashable: it travels to Spark's executors inside the apply settings)."""

    give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S
    backoff_ms: float = 200.0
    backoff_max_ms: float = 10_000.0

    def backoff(self) -> ExponentialBackoff:
        """A new backoff: ``backoff_ms`` doubling per attempt up to ``backoff_max_ms``, 20%
        jitter (Kafka's defaults for the growth and spread)."""
        return ExponentialBackoff(self.backoff_ms, self.backoff_max_ms)


def call_with_retries(
    action: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy,
    after_failure: Callable[[BaseException], None] | None = None,
    transient: Callable[[BaseException], bool] = is_transient,
    stopping: threading.Event | None = None,
) -> T:
    """``action()``; if it fails transiently, call ``after_failure`` (e.g. to drop a broken
    connection), wait, and call it again, until it succeeds or ``policy.give_up_after_s``
    passed since the first failure: then the last error is raised, as is any error that is
    not transient. ``what`` names the action in the log; ``stopping`` set ends the waiting
    (the last error is raised)."""
    deadline: Deadline | None = None
    backoff = policy.backoff()
    attempt = 0
    while True:
        try:
            result = action()
        except Exception as error:
            if not transient(error):
                raise
            if after_failure is not None:
                after_failure(error)
            if deadline is None:
                deadline = Deadline(policy.give_up_after_s)
                log.warning("%s failed: %s; retrying for up to %.0f s",
                            what, _first_line(error), policy.give_up_after_s)  # fmt: skip
            log.debug("%s failed (attempt %d)", what, attempt + 1, exc_info=error)
            if deadline.expired:
                log.error("%s: gave up after %.0f s of retries: %s",
                          what, policy.give_up_after_s, _first_line(error))  # fmt: skip
                raise
            pause = min(backoff.delay(attempt), deadline.remaining())
            attempt += 1
            if stopping is not None:
                if stopping.wait(pause):
                    raise
            else:
                time.sleep(pause)
            continue
        if attempt:
            log.warning("%s succeeded after %d retries", what, attempt)
        return result


class ReconnectingTarget:
    """A :class:`~kayak.pipeline.targets.Target` by URL that survives its database going
    away for a while: every call that fails transiently drops the connection, waits, opens
    a new one and calls again (see the module docstring). Opening is retried the same way, so
    an executor whose target is restarting waits for it instead of failing its task."""

    def __init__(
        self, url: str, policy: RetryPolicy | None = None, *,
        opener: Callable[[str], Target] = open_target,
    ) -> None:  # fmt: skip
        self.url = url
        self.policy = policy or RetryPolicy()
        self._opener = opener
        self._target: Target | None = None
        self._opened = 0
        self._retrying("opening the target", self._current)

    # Every Target method, each one transaction on the target or a read, so safe to redo
    # (mypy checks this class against the Target protocol where it is used as one).

    def ensure_table(
        self, table: TableSchema, connector: str, position: str = ""
    ) -> dict[str, str] | None:
        return self._retrying(
            f"creating or altering table {table.qualified_name} in the target",
            lambda: self._current().ensure_table(table, connector, position),
        )

    def truncate(self, table: TableSchema, position: str) -> bool:
        return self._retrying(
            f"truncating {table.qualified_name} in the target",
            lambda: self._current().truncate(table, position),
        )

    def apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        return self._retrying(
            f"applying {len(changes)} changes to {table.qualified_name}",
            lambda: self._current().apply(table, changes),
        )

    def apply_batch(
        self, truncates: Sequence[Truncate], tables: Sequence[TableChanges]
    ) -> tuple[list[bool], list[int]]:
        # One transaction: redone whole on a new connection.
        return self._retrying(
            describe_batch(truncates, tables),
            lambda: self._current().apply_batch(truncates, tables),
        )

    def read_rows(self, table: TableSchema) -> list[Row]:
        return self._retrying(
            f"reading {table.qualified_name} from the target",
            lambda: self._current().read_rows(table),
        )

    def close(self) -> None:
        if self._target is not None:
            target, self._target = self._target, None
            target.close()

    def _current(self) -> Target:
        if self._target is None:
            self._target = self._opener(self.url)
            self._opened += 1
        return self._target

    @property
    def reconnects(self) -> int:
        """How many times a connection was opened again after a failure."""
        return max(0, self._opened - 1)

    def _retrying(self, what: str, action: Callable[[], T]) -> T:
        return call_with_retries(action, what=what, policy=self.policy, after_failure=self._drop)

    def _drop(self, error: BaseException) -> None:
        """Forget a connection that failed: a new one is opened for the next attempt (a
        connection that only met a lock or a conflict is dropped too; opening is cheap)."""
        try:
            self.close()
        except Exception:
            log.debug("while closing the failed target connection", exc_info=True)


def describe_batch(truncates: Sequence[Truncate], tables: Sequence[TableChanges]) -> str:
    """What a batch does, for the log: ``applying 12 changes to public.a, public.b``."""
    parts = []
    if truncates:
        parts.append("truncating " + ", ".join(t.qualified_name for t, _ in truncates))
    names = list(dict.fromkeys(t.qualified_name for t, c in tables if c))
    if names:
        count = sum(len(c) for _, c in tables)
        parts.append(f"applying {count} changes to {', '.join(names)}")
    return " and ".join(parts) or "an empty batch"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
