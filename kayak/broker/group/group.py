"""One classic group: its members, state, generation, leader and chosen protocol.

This is bookkeeping only; deciding *when* to rebalance, and answering parked requests, is
:mod:`kayak.broker.group.membership`'s job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kayak.broker.group.member import Member
from kayak.broker.group.protocol_selection import select_protocol
from kayak.broker.group.state import GroupState, can_transition, check_transition
from kayak.errors import ErrorCode
from kayak.protocol.messages.join_group_response import JoinGroupResponseMember


class Group:
    """A classic (JoinGroup/SyncGroup) group as the coordinator holds it in memory."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        # Kept after the group empties, so ListGroups still reports what kind of group it was.
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # insertion order: the next leader is the oldest
        # Members told MEMBER_ID_REQUIRED, not yet back: id -> their expiry timer.
        self.pending_members: dict[str, asyncio.TimerHandle] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # The join phase's timer: the initial delay, or the rebalance timeout.
        self.rebalance_timer: asyncio.TimerHandle | None = None
        self.in_initial_delay = False
        self.new_member_added = False  # during the initial delay: extend it once more
        self.initial_delay_remaining_ms = 0

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"members={list(self.members)})"
        )

    # -- state --------------------------------------------------------------------------

    def transition_to(self, target: GroupState) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target

    @property
    def can_rebalance(self) -> bool:
        return can_transition(self.state, GroupState.PREPARING_REBALANCE)

    # -- membership ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Members plus members-to-be (told MEMBER_ID_REQUIRED), as ``group.max.size`` counts."""
        return len(self.members) + len(self.pending_members)

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_member_id(self, member: Member, new_member_id: str) -> None:
        """Give a static member a new member id, keeping its place, assignment and leadership."""
        old_member_id = member.member_id
        self.members = {
            (new_member_id if mid == old_member_id else mid): m for mid, m in self.members.items()
        }
        member.member_id = new_member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """Whether ``group_instance_id`` belongs to a member other than ``member_id``."""
        current = self.static_member_id(group_instance_id)
        return current is not None and current != member_id

    def check_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Why a request claiming to be this member must be refused, or ``None``.

        A static member's instance id must map to exactly this member id (FENCED_INSTANCE_ID
        when another process took it over); otherwise the member id must be known.
        """
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    # -- protocols ----------------------------------------------------------------------

    def supports_protocols(
        self, protocol_type: str, protocol_names: Sequence[str], *, joining_member_id: str = ""
    ) -> bool:
        """Whether a member with these protocols may join (or rejoin as ``joining_member_id``).

        An empty group takes any non-empty protocol type and protocol list. Otherwise the type
        must match and at least one protocol must be supported by every *other* member; the
        rejoining member's own previous protocols do not count, so it may change them.
        """
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        if protocol_type != self.protocol_type:
            return False
        others = [
            set(m.protocol_names()) for mid, m in self.members.items() if mid != joining_member_id
        ]
        return any(all(name in names for names in others) for name in protocol_names)

    def select_protocol(self) -> str:
        return select_protocol([m.protocol_names() for m in self.members.values()])

    def current_member_metadata(self) -> list[JoinGroupResponseMember]:
        """What the leader receives to compute assignments: every member's chosen metadata."""
        protocol = self.protocol_name or ""
        return [
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in self.members.values()
        ]

    # -- rebalance bookkeeping ----------------------------------------------------------

    @property
    def rebalance_timeout_ms(self) -> int:
        """How long a rebalance waits for members: the longest any member asked for."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def elect_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; return ``False`` if none did.

        The leader must be among those waiting for a JoinGroup answer, or nobody would receive
        the member list and compute the assignment.
        """
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.is_awaiting_join:
            return True
        joined = next((m for m in self.members.values() if m.is_awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    def init_next_generation(self) -> None:
        """Start the next generation: CompletingRebalance with members, Empty without."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.leader_id = None
            self.transition_to(GroupState.EMPTY)

    def cancel_rebalance_timer(self) -> None:
        if self.rebalance_timer is not None:
            self.rebalance_timer.cancel()
            self.rebalance_timer = None
        self.in_initial_delay = False
