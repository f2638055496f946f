"""LeaveGroup: single (v0-2) and batch (v3+) leaves, the rebalances they cause, and Empty."""

from __future__ import annotations

import asyncio

import pytest

from kayak.broker.group import GroupCoordinator
from kayak.errors import ErrorCode
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.describe_groups_response import DescribedGroup
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from tests.broker.test_group_harness import (
    GROUP,
    Consumer,
    call,
    consumers,
    coordinator,
    form_group,
    run,
    settle,
)

pytestmark = pytest.mark.timeout(30)


async def describe(coord: GroupCoordinator, group_id: str = GROUP) -> DescribedGroup:
    described = await call(coord.describe_groups, DescribeGroupsRequest([group_id]), 5)
    group: DescribedGroup = described.groups[0]
    return group


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)

        left = await bob.leave()  # v1: one member, top-level error
        assert left.error_code == ErrorCode.NONE
        assert (await describe(coord)).group_state == "PreparingRebalance"
        assert await alice.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = await alice.join()
        assert rejoined.generation_id == 2
        assert [m.member_id for m in rejoined.members] == [alice.member_id]
        await alice.sync({alice.member_id: b"all"})

        alice.leave_version = 4  # flexible, batch form
        last = await alice.leave()
        assert last.error_code == ErrorCode.NONE
        assert [(m.member_id, m.error_code) for m in last.members] == [
            (alice.member_id, ErrorCode.NONE)
        ]
        group = await describe(coord)
        assert group.group_state == "Empty"
        assert group.members == []
        assert group.protocol_type == "consumer"  # remembered for ListGroups
        # An empty group's next join starts over with the initial delay and a new generation.
        alice.member_id = ""  # as a client does after leaving
        again = await alice.join()
        assert again.generation_id == 4
        await coord.close()

    run(scenario)


def test_leave_of_a_member_waiting_in_join_completes_the_rebalance_without_it() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await form_group(alice, bob)
        carol_join = asyncio.create_task(carol.join())
        alice_join = asyncio.create_task(alice.join())
        await settle()
        assert not carol_join.done()  # bob has not rejoined yet
        await bob.leave()
        ra, rc = await asyncio.gather(alice_join, carol_join)
        assert ra.generation_id == rc.generation_id == 2
        assert {m.member_id for m in ra.members} == {alice.member_id, carol.member_id}
        await coord.close()

    run(scenario)


def test_batch_leave_reports_each_member() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await form_group(alice, bob, carol)
        request = LeaveGroupRequest(
            GROUP,
            members=[
                MemberIdentity(bob.member_id, None, "scale down"),
                MemberIdentity("nobody-1", None, None),
                MemberIdentity(carol.member_id, None, None),
            ],
        )
        response = await call(coord.leave_group, request, 4)
        assert response.error_code == ErrorCode.NONE
        assert [(m.member_id, m.error_code) for m in response.members] == [
            (bob.member_id, ErrorCode.NONE),
            ("nobody-1", ErrorCode.UNKNOWN_MEMBER_ID),
            (carol.member_id, ErrorCode.NONE),
        ]
        assert [m.member_id for m in (await alice.join()).members] == [alice.member_id]
        await coord.close()

    run(scenario)


def test_single_leave_of_an_unknown_member_reports_it_at_the_top_level() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice")
        await form_group(alice)
        ghost = Consumer(coord, "ghost", member_id="ghost-1")
        assert (await ghost.leave()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        stranger = Consumer(coord, "s", group_id="elsewhere", member_id="s-1")
        assert (await stranger.leave()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        nameless = Consumer(coord, "n", group_id="", member_id="n-1")
        assert (await nameless.leave()).error_code == ErrorCode.INVALID_GROUP_ID
        assert await alice.heartbeat() == ErrorCode.NONE  # nothing happened to the group
        await coord.close()

    run(scenario)


def test_pending_member_may_leave() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice)
        assert (await bob.join_once()).error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert (await bob.leave()).error_code == ErrorCode.NONE
        # bob's id is no longer reserved
        assert (await bob.join_once()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert await alice.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)
