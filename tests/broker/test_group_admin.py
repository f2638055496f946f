"""ListGroups, DescribeGroups, DeleteGroups, and closing the coordinator."""

from __future__ import annotations

import asyncio

import pytest

from kayak.broker.group import GroupCoordinator, GroupCoordinatorConfig, InMemoryOffsetStore
from kayak.errors import ErrorCode
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from tests.broker.test_group_harness import (
    FAST_CONFIG,
    GROUP,
    HOST,
    Consumer,
    call,
    consumers,
    coordinator,
    form_group,
    run,
    settle,
)

pytestmark = pytest.mark.timeout(30)


async def standalone_commit(coord: GroupCoordinator, group_id: str) -> None:
    request = OffsetCommitRequest(
        group_id, topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 1)])]
    )
    response = await call(coord.offset_commit, request, 2)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE


def test_describe_a_stable_group() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        response = await call(coord.describe_groups, DescribeGroupsRequest([GROUP, "nope"]), 5)
        stable, unknown = response.groups
        assert (stable.error_code, stable.group_state) == (ErrorCode.NONE, "Stable")
        assert (stable.protocol_type, stable.protocol_data) == ("consumer", "range")
        assert [
            (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
            for m in stable.members
        ] == [
            (alice.member_id, "alice", HOST, b"meta-alice", b"a-alice"),
            (bob.member_id, "bob", HOST, b"meta-bob", b"a-bob"),
        ]
        # Kafka reports a group it doesn't know as Dead, without an error (v0-5).
        assert (unknown.error_code, unknown.group_state, unknown.members) == (
            ErrorCode.NONE,
            "Dead",
            [],
        )
        await coord.close()

    run(scenario)


def test_describe_a_rebalancing_group_hides_metadata_and_assignments() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice)
        bob_join = asyncio.create_task(bob.join())
        await settle()
        response = await call(coord.describe_groups, DescribeGroupsRequest([GROUP]), 0)
        group = response.groups[0]
        assert group.group_state == "PreparingRebalance"
        assert group.protocol_data == ""
        assert [(m.member_metadata, m.member_assignment) for m in group.members] == [
            (b"", b""),
            (b"", b""),
        ]
        await alice.join()
        await bob_join
        await coord.close()

    run(scenario)


def test_list_groups_with_state_and_type_filters() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice")
        await form_group(alice)
        await standalone_commit(coord, "offsets-only")
        everything = await call(coord.list_groups, ListGroupsRequest(), 0)
        assert sorted((g.group_id, g.protocol_type) for g in everything.groups) == [
            ("offsets-only", ""),
            (GROUP, "consumer"),
        ]
        stable = await call(coord.list_groups, ListGroupsRequest(["stable"]), 4)
        assert [(g.group_id, g.group_state) for g in stable.groups] == [(GROUP, "Stable")]
        empty = await call(coord.list_groups, ListGroupsRequest(["Empty"]), 4)
        assert [g.group_id for g in empty.groups] == ["offsets-only"]
        classic = await call(coord.list_groups, ListGroupsRequest([], ["Classic"]), 5)
        assert {g.group_type for g in classic.groups} == {"classic"}
        assert len(classic.groups) == 2
        consumer_type = await call(coord.list_groups, ListGroupsRequest([], ["consumer"]), 5)
        assert consumer_type.groups == []
        await coord.close()

    run(scenario)


def test_delete_groups() -> None:
    async def scenario() -> None:
        store = InMemoryOffsetStore()
        coord = GroupCoordinator(FAST_CONFIG, store)
        alice = Consumer(coord, "alice")
        await form_group(alice)
        await standalone_commit(coord, "old")
        request = DeleteGroupsRequest([GROUP, "old", "never", "old"])
        response = await call(coord.delete_groups, request, 2)
        assert [(r.group_id, r.error_code) for r in response.results] == [
            (GROUP, ErrorCode.NON_EMPTY_GROUP),
            ("old", ErrorCode.NONE),
            ("never", ErrorCode.GROUP_ID_NOT_FOUND),
        ]
        assert store.fetch_all("old") == {}
        listed = await call(coord.list_groups, ListGroupsRequest(), 3)
        assert [g.group_id for g in listed.groups] == [GROUP]
        again = await call(coord.delete_groups, DeleteGroupsRequest(["old"]), 1)
        assert again.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        await coord.close()

    run(scenario)


def test_delete_a_group_whose_members_all_left() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", leave_version=4)
        await form_group(alice)
        await alice.leave()
        response = await call(coord.delete_groups, DeleteGroupsRequest([GROUP]), 2)
        assert response.results[0].error_code == ErrorCode.NONE
        described = await call(coord.describe_groups, DescribeGroupsRequest([GROUP]), 5)
        assert described.groups[0].group_state == "Dead"
        # The name is free again.
        fresh = Consumer(coord, "bob")
        assert (await fresh.join()).generation_id == 1
        await coord.close()

    run(scenario)


def test_groups_known_only_to_the_store_are_listed_described_and_deletable() -> None:
    async def scenario() -> None:
        store = InMemoryOffsetStore()
        await store.commit("restored", "t", 0, 5, -1, "", 0)  # e.g. loaded from a durable log
        coord = GroupCoordinator(FAST_CONFIG, store)
        listed = await call(coord.list_groups, ListGroupsRequest(["Empty"]), 4)
        assert [(g.group_id, g.group_state) for g in listed.groups] == [("restored", "Empty")]
        described = await call(coord.describe_groups, DescribeGroupsRequest(["restored"]), 5)
        assert (described.groups[0].group_state, described.groups[0].members) == ("Empty", [])
        response = await call(coord.delete_groups, DeleteGroupsRequest(["restored"]), 2)
        assert response.results[0].error_code == ErrorCode.NONE
        assert store.fetch("restored", "t", 0) is None
        listed = await call(coord.list_groups, ListGroupsRequest(), 4)
        assert listed.groups == []
        await coord.close()

    run(scenario)


def test_close_answers_parked_requests_and_refuses_new_ones() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(
                group_initial_rebalance_delay_ms=10_000, group_min_session_timeout_ms=100
            )
        )
        alice, bob = consumers(coord, "alice", "bob")
        parked = asyncio.create_task(alice.join())  # held by the long initial delay
        await settle()
        assert not parked.done()
        await coord.close()
        assert coord.closed
        assert (await asyncio.wait_for(parked, timeout=1)).error_code == ErrorCode.NOT_COORDINATOR
        assert (await bob.join_once()).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await alice.heartbeat() == ErrorCode.COORDINATOR_NOT_AVAILABLE
        listed = await call(coord.list_groups, ListGroupsRequest(), 0)
        assert listed.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        described = await call(coord.describe_groups, DescribeGroupsRequest([GROUP]), 5)
        assert described.groups[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        deleted = await call(coord.delete_groups, DeleteGroupsRequest([GROUP]), 2)
        assert deleted.results[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario)


def test_close_leaves_no_timers_behind() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob", session_timeout_ms=10_000)
        await form_group(alice, bob)
        assert (await Consumer(coord, "carol").join_once()).member_id  # a pending member
        loop = asyncio.get_running_loop()
        scheduled_before = len(loop._scheduled)  # type: ignore[attr-defined]
        assert scheduled_before >= 3  # two sessions, one pending member
        await coord.close()
        assert all(h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    run(scenario)
