"""What a parked JoinGroup or SyncGroup is eventually answered with, before wire encoding.

The coordinator's rebalance logic produces these; turning them into a response of the
request's version (which fields exist, which may be null) happens in one place,
:mod:`kayak.broker.group.coordinator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kayak.errors import ErrorCode
from kayak.protocol.messages.join_group_response import JoinGroupResponseMember


@dataclass(slots=True)
class JoinResult:
    """The outcome of one member's JoinGroup."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[JoinGroupResponseMember] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def failed(cls, error: ErrorCode, member_id: str = "") -> JoinResult:
        return cls(error, member_id)


@dataclass(slots=True)
class SyncResult:
    """The outcome of one member's SyncGroup."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    @classmethod
    def failed(cls, error: ErrorCode) -> SyncResult:
        return cls(error)
