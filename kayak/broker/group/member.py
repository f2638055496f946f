"""One member of a classic group: who it is, what it supports, and its parked requests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kayak.broker.group.results import JoinResult, SyncResult
from kayak.errors import ErrorCode

Protocols = list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
T = TypeVar("T")

# A client that sends a second JoinGroup/SyncGroup has given up on the first; if it is somehow
# still listening, this retriable error makes it rejoin rather than act on a stale answer.
_SUPERSEDED = ErrorCode.REBALANCE_IN_PROGRESS


@dataclass(eq=False, slots=True)
class Member:
    """A group member as the coordinator tracks it between requests."""

    member_id: str
    group_instance_id: str | None  # set for static members (KIP-345)
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    # The session timer fires at most once per session timeout and re-arms itself for the time
    # left, so a heartbeat only moves the deadline instead of rescheduling a timer.
    session_deadline: float = 0.0
    session_timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        """Whether this member sent JoinGroup in the current rebalance."""
        return self.join_waiter is not None

    @property
    def has_parked_request(self) -> bool:
        """Whether a JoinGroup or SyncGroup of this member is still waiting for its answer.

        Such a member cannot heartbeat, so its session must not expire meanwhile.
        """
        return any(w is not None and not w.done() for w in (self.join_waiter, self.sync_waiter))

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        """This member's metadata for ``protocol_name`` (empty if it does not support it)."""
        return next((meta for name, meta in self.protocols if name == protocol_name), b"")

    def has_protocols(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` equals what this member declared, metadata and order included."""
        return list(protocols) == self.protocols

    def park_join(self, waiter: asyncio.Future[JoinResult]) -> None:
        """Remember a JoinGroup to answer later; an older one still parked is superseded."""
        self.answer_join(JoinResult.failed(_SUPERSEDED, self.member_id))
        self.join_waiter = waiter

    def park_sync(self, waiter: asyncio.Future[SyncResult]) -> None:
        """Remember a SyncGroup to answer later; an older one still parked is superseded."""
        self.answer_sync(SyncResult.failed(_SUPERSEDED))
        self.sync_waiter = waiter

    def answer_join(self, result: JoinResult) -> bool:
        """Answer the parked JoinGroup, if any; return whether there was one."""
        waiter, self.join_waiter = self.join_waiter, None
        return _resolve(waiter, result)

    def answer_sync(self, result: SyncResult) -> bool:
        """Answer the parked SyncGroup, if any; return whether there was one."""
        waiter, self.sync_waiter = self.sync_waiter, None
        return _resolve(waiter, result)

    def cancel_session_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


def _resolve(waiter: asyncio.Future[T] | None, result: T) -> bool:
    if waiter is None:
        return False
    if not waiter.done():  # the caller may have been cancelled (client went away)
        waiter.set_result(result)
    return True
