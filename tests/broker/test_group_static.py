"""Static membership (KIP-345): restarts without rebalances, and fencing of the old process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kayak.broker.group import GroupCoordinator
from kayak.errors import ErrorCode
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from tests.broker.test_group_harness import (
    GROUP,
    Consumer,
    call,
    coordinator,
    form_group,
    run,
    settle,
)

pytestmark = pytest.mark.timeout(30)


def static(coord: GroupCoordinator, name: str, **settings: Any) -> Consumer:
    return Consumer(coord, name, group_instance_id=f"{name}-instance", **settings)


async def state_of(c: Consumer) -> str:
    described = await call(c.coordinator.describe_groups, DescribeGroupsRequest([GROUP]), 5)
    state: str = described.groups[0].group_state
    return state


def test_static_members_join_without_member_id_required() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = static(coord, "alice")
        joined = await alice.join_once()
        assert joined.error_code == ErrorCode.NONE
        assert joined.member_id.startswith("alice-instance-")
        assert joined.members[0].group_instance_id == "alice-instance"
        await coord.close()

    run(scenario)


def test_restarted_static_follower_rejoins_without_a_rebalance() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = static(coord, "alice"), static(coord, "bob")
        await form_group(alice, bob)
        old_bob_id = bob.member_id

        restarted = static(coord, "bob")  # same instance id, no member id
        joined = await asyncio.wait_for(restarted.join_once(), timeout=1)
        assert joined.error_code == ErrorCode.NONE
        assert joined.member_id not in ("", old_bob_id)
        assert joined.generation_id == 1  # same generation: nobody rebalanced
        assert joined.leader == alice.member_id
        assert await state_of(alice) == "Stable"
        assert await alice.heartbeat() == ErrorCode.NONE
        synced = await asyncio.wait_for(restarted.sync(), timeout=1)
        assert synced.assignment == b"a-bob"  # keeps what it had
        # The old process, should it still be around, is fenced.
        assert await bob.heartbeat() == ErrorCode.FENCED_INSTANCE_ID
        assert (await bob.join_once()).error_code == ErrorCode.FENCED_INSTANCE_ID
        await coord.close()

    run(scenario)


def test_restart_during_sync_fences_the_old_process_and_rebalances() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = static(coord, "alice"), static(coord, "bob")
        await asyncio.gather(alice.join(), bob.join())
        old_bob_sync = asyncio.create_task(bob.sync())  # waits for alice's assignment
        await settle()
        restarted = static(coord, "bob")
        restarted_join = asyncio.create_task(restarted.join_once())
        assert (await old_bob_sync).error_code == ErrorCode.FENCED_INSTANCE_ID
        # The leader may have been assigning to the old id: everyone rejoins.
        assert await state_of(alice) == "PreparingRebalance"
        ra = await alice.join()
        rb = await restarted_join
        assert ra.generation_id == rb.generation_id == 2
        assert {m.member_id for m in ra.members} == {alice.member_id, restarted.member_id}
        await coord.close()

    run(scenario)


def test_restarted_static_leader_on_v5_is_not_told_it_leads() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = static(coord, "alice"), static(coord, "bob")
        await form_group(alice, bob)
        old_leader = alice.member_id
        restarted = static(coord, "alice")
        joined = await restarted.join_once()
        assert joined.generation_id == 1
        # The previous leader id keeps an old client from running a useless assignment.
        assert joined.leader == old_leader != joined.member_id
        assert joined.members == []
        assert await state_of(alice) == "Stable"
        await coord.close()

    run(scenario)


def test_restarted_static_leader_on_v9_leads_but_skips_assignment() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = static(coord, "alice", join_version=9, sync_version=5, heartbeat_version=4)
        bob = static(coord, "bob", join_version=9, sync_version=5, heartbeat_version=4)
        await form_group(alice, bob)
        restarted = static(coord, "alice", join_version=9, sync_version=5, heartbeat_version=4)
        joined = await restarted.join_once()
        assert joined.leader == joined.member_id
        assert joined.skip_assignment is True
        assert {m.group_instance_id for m in joined.members} == {"alice-instance", "bob-instance"}
        assert await state_of(alice) == "Stable"
        assert await bob.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)


def test_static_rejoin_that_changes_the_protocol_choice_rebalances() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = static(coord, "alice", protocols=[("range", b"r"), ("sticky", b"s")])
        await form_group(alice)
        restarted = static(coord, "alice", protocols=[("sticky", b"s")])
        joined = await restarted.join_once()  # alone, so the rebalance completes at once
        assert joined.generation_id == 2
        assert joined.protocol_name == "sticky"
        await coord.close()

    run(scenario)


def test_static_member_that_misses_a_rebalance_keeps_its_place() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = static(coord, "alice", rebalance_timeout_ms=200)
        bob = static(coord, "bob", rebalance_timeout_ms=200)
        await form_group(alice, bob)
        leader_join = await alice.join()  # rebalances; bob is restarting and does not rejoin
        assert leader_join.generation_id == 2
        assert {m.member_id for m in leader_join.members} == {alice.member_id, bob.member_id}
        # bob comes back with its old id, learns the generation moved on, and rejoins
        assert await bob.heartbeat() == ErrorCode.ILLEGAL_GENERATION
        await coord.close()

    run(scenario)


def test_static_member_fenced_on_commit() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = static(coord, "alice")
        await form_group(alice)
        old_id = alice.member_id
        await static(coord, "alice").join_once()
        request = OffsetCommitRequest(
            GROUP,
            1,
            old_id,
            "alice-instance",
            topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 5)])],
        )
        response = await call(coord.offset_commit, request, 7)
        assert response.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
        await coord.close()

    run(scenario)


def test_admin_removes_a_static_member_by_instance_id() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = static(coord, "alice"), static(coord, "bob")
        await form_group(alice, bob)
        request = LeaveGroupRequest(GROUP, members=[MemberIdentity("", "bob-instance", None)])
        response = await call(coord.leave_group, request, 3)
        assert response.members[0].error_code == ErrorCode.NONE
        assert response.members[0].group_instance_id == "bob-instance"
        await settle()
        assert await alice.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        fenced = LeaveGroupRequest(GROUP, members=[MemberIdentity("stale", "alice-instance")])
        response = await call(coord.leave_group, fenced, 3)
        assert response.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID
        await coord.close()

    run(scenario)
