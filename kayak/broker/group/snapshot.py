"""What of a classic group outlives the broker: Kafka's ``GroupMetadataValue``.

Kafka writes a group's generation, protocol, leader and members with their assignments to
``__consumer_offsets`` each time a generation settles (or the group empties), and reloads
them on start: the members keep their ids and generation, and go on heartbeating and
committing without a rebalance. kayak does the same, with Kafka's record as the snapshot.
"""

from __future__ import annotations

from kayak.broker.group.group import Group
from kayak.broker.group.member import Member
from kayak.broker.group.state import GroupState
from kayak.protocol.messages.group_coordinator.group_metadata_value import (
    GroupMetadataValue,
    MemberMetadata,
)


def snapshot_of(group: Group, timestamp_ms: int) -> GroupMetadataValue:
    """A Stable group's members and assignments, or an Empty group's generation."""
    protocol = group.protocol_name
    members = [
        MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata_for(protocol) if protocol is not None else b"",
            assignment=m.assignment,
        )
        for m in group.members.values()
    ]
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp=timestamp_ms,
        members=members,
    )


def restored_group(group_id: str, snapshot: GroupMetadataValue) -> Group:
    """The group as it was when ``snapshot`` was taken: Stable with its members (whose
    sessions the caller starts), or Empty."""
    group = Group(group_id)
    group.generation_id = snapshot.generation
    group.protocol_type = snapshot.protocol_type or None
    if not snapshot.members or not snapshot.protocol:
        return group
    for m in snapshot.members:
        group.add_member(
            Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout,
                # Version 0 has no rebalance timeout: the session timeout served as both.
                rebalance_timeout_ms=(
                    m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout
                ),
                protocol_type=snapshot.protocol_type,
                protocols=[(snapshot.protocol, m.subscription)],
                assignment=m.assignment,
            )
        )
    group.protocol_name = snapshot.protocol
    if snapshot.leader in group.members:
        group.leader_id = snapshot.leader
    # Loaded, not reached by a transition: the generation settled before the restart.
    group.state = GroupState.STABLE
    return group
