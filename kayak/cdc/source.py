"""The interface every capture source implements, so one capture loop drives them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kayak.cdc.change import Change, TableSchema

__all__ = ["ChangeSource"]


class ChangeSource(Protocol):
    """A database the capture loop reads changes from.

    The loop calls :meth:`read` for the next changes in position order, publishes them,
    waits until the broker acknowledged every one, then calls :meth:`acknowledge` with the
    last: only then may the source forget them (trim its log table, advance its replication
    slot). A source that is restarted before an acknowledgement hands the same changes out
    again, so nothing is lost; the target's position guard makes the repeats harmless.
    """

    def tables(self) -> Sequence[TableSchema]:
        """The captured tables, with their current columns."""
        ...

    def read(self, max_changes: int, timeout_s: float) -> list[Change]:
        """Up to ``max_changes`` changes after the last read, waiting up to ``timeout_s``
        for the first; ``[]`` when none came. A table's schema change shows up as a new
        ``Change.table`` value on the changes that follow it."""
        ...

    def acknowledge(self, last: Change) -> None:
        """Everything up to and including ``last`` is durable on the broker."""
        ...

    def close(self) -> None:
        """Release connections; unacknowledged changes stay for the next run."""
        ...
