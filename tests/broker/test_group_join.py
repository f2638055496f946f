"""JoinGroup: member ids, generations, leaders, protocol choice and the checks on the way in."""

from __future__ import annotations

import asyncio
import time

import pytest

from kayak.broker.group import GroupCoordinatorConfig
from kayak.errors import ErrorCode
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from tests.broker.test_group_harness import (
    CONSUMER,
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


async def group_state(c: Consumer) -> str:
    described = await call(c.coordinator.describe_groups, DescribeGroupsRequest([c.group_id]), 5)
    state: str = described.groups[0].group_state
    return state


def test_first_join_gets_member_id_required_then_succeeds() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice")
        first = await alice.join_once()
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("alice-")
        assert first.generation_id == -1
        assert first.members == []

        second = await alice.join_once()  # same member id, as the client must
        assert second.error_code == ErrorCode.NONE
        assert second.member_id == first.member_id
        assert second.generation_id == 1
        assert second.leader == first.member_id
        assert second.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in second.members] == [
            (first.member_id, b"meta-alice")
        ]
        assert await group_state(alice) == "CompletingRebalance"
        await coord.close()

    run(scenario)


def test_member_ids_are_unique_per_join() -> None:
    async def scenario() -> None:
        coord = coordinator()
        a, b = consumers(coord, "app", "app")
        ids = {(await a.join_once()).member_id, (await b.join_once()).member_id}
        assert len(ids) == 2
        await coord.close()

    run(scenario)


def test_two_members_joining_concurrently_share_one_generation() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        ra, rb = await asyncio.gather(alice.join(), bob.join())
        assert ra.error_code == rb.error_code == ErrorCode.NONE
        assert ra.generation_id == rb.generation_id == 1
        assert ra.leader == rb.leader == alice.member_id  # the first to join leads
        # Only the leader sees the members and their metadata.
        assert sorted((m.member_id, m.metadata) for m in ra.members) == sorted(
            [(alice.member_id, b"meta-alice"), (bob.member_id, b"meta-bob")]
        )
        assert rb.members == []
        await coord.close()

    run(scenario)


def test_initial_delay_holds_the_first_rebalance_for_late_joiners() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(
                group_initial_rebalance_delay_ms=150, group_min_session_timeout_ms=100
            )
        )
        alice, bob = consumers(coord, "alice", "bob")
        first = asyncio.create_task(alice.join())
        await settle(0.05)
        assert not first.done()  # still inside the initial delay
        second = await bob.join()  # arrives late, but still in generation 1
        assert (await first).generation_id == second.generation_id == 1
        assert len((await first).members) == 2
        await coord.close()

    run(scenario)


def test_initial_delay_is_extended_while_new_members_keep_arriving() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(
                group_initial_rebalance_delay_ms=200, group_min_session_timeout_ms=100
            )
        )
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        started = time.monotonic()
        first = asyncio.create_task(alice.join())
        await settle(0.15)
        second = asyncio.create_task(bob.join())  # within the first delay: extends it
        await settle(0.15)  # 0.3 s: past the first delay, inside the extension
        assert not first.done()
        third = await carol.join()  # joins the same generation after all
        waited = time.monotonic() - started
        # three delays of 0.2 s: bob's and carol's arrivals each extended the phase once
        assert 0.55 <= waited < 1.5
        ra, rb = await first, await second
        assert ra.generation_id == rb.generation_id == third.generation_id == 1
        assert len(ra.members) == 3
        await coord.close()

    run(scenario)


def test_without_initial_delay_an_empty_group_rebalances_at_once() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(
                group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100
            )
        )
        alice = Consumer(coord, "alice")
        joined = await asyncio.wait_for(alice.join(), timeout=1)
        assert joined.generation_id == 1
        await coord.close()

    run(scenario)


def test_protocol_is_chosen_by_the_members_votes() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", [("range", b"r"), ("roundrobin", b"rr")])
        bob = Consumer(coord, "bob", [("roundrobin", b"rr"), ("range", b"r")])
        carol = Consumer(coord, "carol", [("roundrobin", b"rr"), ("sticky", b"s"), ("range", b"r")])
        ra, *_ = await asyncio.gather(alice.join(), bob.join(), carol.join())
        assert ra.protocol_name == "roundrobin"  # two votes to one; sticky isn't common
        # The leader gets each member's metadata for the chosen protocol.
        assert {m.metadata for m in ra.members} == {b"rr"}
        await coord.close()

    run(scenario)


def test_only_a_protocol_every_member_supports_can_win() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", [("sticky", b"s"), ("range", b"r")])
        bob = Consumer(coord, "bob", [("range", b"r")])
        ra, rb = await asyncio.gather(alice.join(), bob.join())
        assert ra.protocol_name == rb.protocol_name == "range"
        await coord.close()

    run(scenario)


def test_inconsistent_protocols_are_refused() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", [("range", b"r")])
        await alice.join()
        other_type = Consumer(coord, "connect", protocol_type="connect")
        assert (await other_type.join()).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        no_common = Consumer(coord, "bob", [("sticky", b"s")])
        assert (await no_common.join()).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        nothing = Consumer(coord, "x", group_id="fresh", protocols=[("range", b"")])
        nothing.protocols = []
        assert (await nothing.join()).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        untyped = Consumer(coord, "y", group_id="fresh2", protocol_type="")
        assert (await untyped.join()).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        await coord.close()

    run(scenario)


@pytest.mark.parametrize("session_timeout_ms", [99, 60_001])
def test_session_timeout_outside_the_bounds_is_refused(session_timeout_ms: int) -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", session_timeout_ms=session_timeout_ms)
        response = await alice.join_once()
        assert response.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert response.member_id == ""
        await coord.close()

    run(scenario)


def test_empty_group_id_is_refused() -> None:
    async def scenario() -> None:
        coord = coordinator()
        response = await Consumer(coord, "alice", group_id="").join_once()
        assert response.error_code == ErrorCode.INVALID_GROUP_ID
        await coord.close()

    run(scenario)


def test_unknown_member_id_is_refused() -> None:
    async def scenario() -> None:
        coord = coordinator()
        ghost = Consumer(coord, "ghost", member_id="ghost-123")
        assert (await ghost.join_once()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        alice = Consumer(coord, "alice")
        await alice.join()
        assert (await ghost.join_once()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        await coord.close()

    run(scenario)


def test_group_max_size_counts_members_awaiting_their_id() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(
                group_initial_rebalance_delay_ms=0,
                group_min_session_timeout_ms=100,
                group_max_size=2,
            )
        )
        a, b, c = consumers(coord, "a", "b", "c")
        assert (await a.join_once()).error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert (await b.join_once()).error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert (await c.join_once()).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        await coord.close()

    run(scenario)


def test_old_versions_join_without_member_id_required() -> None:
    async def scenario() -> None:
        coord = coordinator()
        # v0 has no rebalance timeout; the session timeout stands in for it.
        legacy = Consumer(coord, "legacy", join_version=0, session_timeout_ms=5000)
        response = await legacy.join_once()
        assert response.error_code == ErrorCode.NONE
        assert response.generation_id == 1
        assert response.member_id.startswith("legacy-")
        await coord.close()

    run(scenario)


def test_flexible_v9_join_reports_protocol_type_and_name() -> None:
    async def scenario() -> None:
        coord = coordinator()
        java = Consumer(coord, "java", join_version=9, sync_version=5, heartbeat_version=4)
        first = await java.join_once()
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert first.protocol_name is None  # nullable from v7: no protocol yet
        joined = await java.join_once()
        assert joined.protocol_type == CONSUMER
        assert joined.protocol_name == "range"
        assert joined.skip_assignment is False
        await coord.close()

    run(scenario)


def test_v5_response_has_no_null_protocol_name() -> None:
    async def scenario() -> None:
        coord = coordinator()
        first = await Consumer(coord, "alice").join_once()
        assert first.protocol_name == ""  # not nullable before v7; encoding would fail
        await coord.close()

    run(scenario)


def test_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        again = await asyncio.wait_for(bob.join(), timeout=1)  # no rebalance to wait for
        assert again.generation_id == 1
        assert again.leader == alice.member_id
        assert again.members == []
        assert await group_state(bob) == "Stable"
        assert await alice.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)


def test_leader_rejoining_a_stable_group_starts_a_rebalance() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        leader_join = asyncio.create_task(alice.join())
        await settle()
        assert not leader_join.done()
        assert await group_state(alice) == "PreparingRebalance"
        assert await bob.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        rb = await bob.join()
        ra = await leader_join
        assert ra.generation_id == rb.generation_id == 2
        await coord.close()

    run(scenario)


def test_changed_metadata_starts_a_rebalance() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        bob.protocols = [("range", b"new-subscription")]
        bob_join = asyncio.create_task(bob.join())
        await settle()
        assert await alice.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        ra = await alice.join()
        await bob_join
        assert {m.metadata for m in ra.members} == {b"meta-alice", b"new-subscription"}
        await coord.close()

    run(scenario)


def test_a_sole_member_may_change_its_protocols() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", [("range", b"r")])
        await form_group(alice)
        alice.protocols = [("cooperative-sticky", b"cs")]
        again = await alice.join()
        assert again.error_code == ErrorCode.NONE
        assert again.protocol_name == "cooperative-sticky"
        await coord.close()

    run(scenario)


def test_raw_v5_request_without_client_helpers() -> None:
    """The coordinator takes a decoded request directly, as the network layer will call it."""

    async def scenario() -> None:
        coord = coordinator()
        request = JoinGroupRequest(
            GROUP, 10_000, 10_000, "", None, CONSUMER, [JoinGroupRequestProtocol("range", b"m")]
        )
        response = await coord.join_group(request, 5, "raw", "/10.0.0.1")
        assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert response.member_id.startswith("raw-")
        await coord.close()

    run(scenario)
