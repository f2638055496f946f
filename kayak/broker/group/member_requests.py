"""What a member asks of its group (JoinGroup, SyncGroup, LeaveGroup), with the differences
between the requests' versions already resolved by the coordinator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kayak.broker.group.member import Protocols


@dataclass(frozen=True, slots=True)
class JoinParams:
    """A JoinGroup request with its version differences already resolved."""

    group_id: str
    member_id: str  # "" for a member without an id yet
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool  # v4+: a new member first gets MEMBER_ID_REQUIRED (KIP-394)
    supports_skip_assignment: bool  # v9+: a rejoining static leader may skip assigning


@dataclass(frozen=True, slots=True)
class SyncParams:
    """A SyncGroup request with its version differences already resolved."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None  # None: not sent (before v5)
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class LeavingMember:
    """One member a LeaveGroup names (from v3 one request may name several)."""

    member_id: str
    group_instance_id: str | None
