"""SyncGroup, Heartbeat and session expiry: assignments reach members, rebalances reach members."""

from __future__ import annotations

import asyncio
import time

import pytest

from kayak.errors import ErrorCode
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.heartbeat_request import HeartbeatRequest
from kayak.protocol.messages.sync_group_request import SyncGroupRequest
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


def test_leaders_assignment_reaches_the_waiting_follower() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await asyncio.gather(alice.join(), bob.join())
        follower_sync = asyncio.create_task(bob.sync())
        await settle()
        assert not follower_sync.done()  # waits for the leader
        leader_sync = await alice.sync({alice.member_id: b"p0,p1", bob.member_id: b"p2"})
        assert leader_sync.error_code == ErrorCode.NONE
        assert leader_sync.assignment == b"p0,p1"
        follower = await follower_sync
        assert follower.error_code == ErrorCode.NONE
        assert follower.assignment == b"p2"
        described = await call(coord.describe_groups, DescribeGroupsRequest([GROUP]), 5)
        assert described.groups[0].group_state == "Stable"
        await coord.close()

    run(scenario)


def test_member_left_out_of_the_assignment_gets_an_empty_one() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob", sync_version=5, join_version=9)
        await asyncio.gather(alice.join(), bob.join())
        follower_sync = asyncio.create_task(bob.sync())
        await settle()
        await alice.sync({alice.member_id: b"everything"})
        follower = await follower_sync
        assert follower.error_code == ErrorCode.NONE
        assert follower.assignment == b""  # present and empty, not null
        assert follower.protocol_type == "consumer"
        assert follower.protocol_name == "range"
        await coord.close()

    run(scenario)


def test_sync_after_the_group_is_stable_returns_the_current_assignment() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        again = await asyncio.wait_for(bob.sync(), timeout=1)
        assert again.assignment == b"a-bob"
        await coord.close()

    run(scenario)


def test_sync_with_wrong_generation_or_member_is_refused() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        bob.generation_id = 7
        assert (await bob.sync()).error_code == ErrorCode.ILLEGAL_GENERATION
        ghost = Consumer(coord, "ghost", member_id="ghost-1", generation_id=1)
        assert (await ghost.sync()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        stranger = Consumer(coord, "s", group_id="nope", member_id="s-1", generation_id=1)
        assert (await stranger.sync()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        empty_id = Consumer(coord, "e", group_id="", member_id="e-1", generation_id=1)
        assert (await empty_id.sync()).error_code == ErrorCode.INVALID_GROUP_ID
        await coord.close()

    run(scenario)


def test_sync_v5_with_a_different_protocol_is_refused() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", sync_version=5)
        await alice.join()
        request = SyncGroupRequest(
            GROUP, alice.generation_id, alice.member_id, None, "consumer", "roundrobin", []
        )
        response = await call(coord.sync_group, request, 5)
        assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        await coord.close()

    run(scenario)


def test_sync_during_a_rebalance_gets_rebalance_in_progress() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await form_group(alice, bob)
        carol_join = asyncio.create_task(carol.join())
        await settle()
        assert (await bob.sync()).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        await asyncio.gather(alice.join(), bob.join(), carol_join)
        await coord.close()

    run(scenario)


def test_rebalance_while_followers_wait_in_sync_sends_them_back_to_join() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await asyncio.gather(alice.join(), bob.join())
        follower_sync = asyncio.create_task(bob.sync())
        await settle()
        carol_join = asyncio.create_task(carol.join())  # arrives before the leader syncs
        assert (await follower_sync).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        joins = await asyncio.gather(alice.join(), bob.join(), carol_join)
        assert {j.generation_id for j in joins} == {2}
        await coord.close()

    run(scenario)


def test_heartbeat_gets_rebalance_in_progress_after_a_third_member_joins() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await form_group(alice, bob)
        assert await alice.heartbeat() == ErrorCode.NONE
        carol_join = asyncio.create_task(carol.join())
        await settle()
        assert not carol_join.done()  # waits for the others to rejoin
        assert await alice.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        assert await bob.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
        ra, rb, rc = await asyncio.gather(alice.join(), bob.join(), carol_join)
        assert ra.generation_id == rb.generation_id == rc.generation_id == 2
        assert ra.leader == alice.member_id
        assert len(ra.members) == 3
        # The new generation's heartbeats are fine even before SyncGroup (CompletingRebalance)
        assert await carol.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)


def test_heartbeat_errors() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice")
        await form_group(alice)
        alice.generation_id = 0
        assert await alice.heartbeat() == ErrorCode.ILLEGAL_GENERATION
        alice.generation_id = 1
        alice.heartbeat_version = 4  # flexible
        assert await alice.heartbeat() == ErrorCode.NONE
        ghost = Consumer(coord, "ghost", member_id="ghost-1", generation_id=1)
        assert await ghost.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
        nowhere = await call(coord.heartbeat, HeartbeatRequest("nowhere", 1, "x", None), 3)
        assert nowhere.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        invalid = await call(coord.heartbeat, HeartbeatRequest("", 1, "x", None), 3)
        assert invalid.error_code == ErrorCode.INVALID_GROUP_ID
        await coord.close()

    run(scenario)


def test_member_that_stops_heartbeating_is_expired_and_the_rest_rebalance() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob", session_timeout_ms=300)
        await form_group(alice, bob)
        bob_last_seen = time.monotonic()
        # alice keeps heartbeating, bob falls silent
        expired_after = None
        while time.monotonic() - bob_last_seen < 2:
            await settle(0.05)
            if await alice.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
                expired_after = time.monotonic() - bob_last_seen
                break
        assert expired_after is not None
        assert 0.28 <= expired_after < 1.0  # bob's 0.3 s session, plus a heartbeat period
        joined = await asyncio.wait_for(alice.join(), timeout=1)
        assert joined.generation_id == 2
        assert [m.member_id for m in joined.members] == [alice.member_id]
        assert await bob.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
        await coord.close()

    run(scenario)


def test_heartbeats_keep_a_member_alive_past_its_session_timeout() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", session_timeout_ms=300)
        await form_group(alice)
        for _ in range(8):  # 0.6 s in all, two session timeouts
            await settle(0.075)
            assert await alice.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)


def test_member_waiting_in_sync_is_not_expired() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob", session_timeout_ms=250)
        await asyncio.gather(alice.join(), bob.join())
        follower_sync = asyncio.create_task(bob.sync())
        for _ in range(10):  # 0.5 s: twice bob's session timeout, but bob is blocked in SyncGroup
            await settle(0.05)
            assert await alice.heartbeat() == ErrorCode.NONE
        await alice.sync({bob.member_id: b"p"})
        assert (await follower_sync).assignment == b"p"
        await coord.close()

    run(scenario)


def test_member_that_does_not_rejoin_in_the_rebalance_timeout_is_removed() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol", rebalance_timeout_ms=300)
        await form_group(alice, bob)
        carol_join = asyncio.create_task(carol.join())
        await settle()
        ra = await alice.join()  # bob never comes back
        rc = await carol_join
        assert ra.generation_id == rc.generation_id == 2
        assert {m.member_id for m in ra.members} == {alice.member_id, carol.member_id}
        assert await bob.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
        await coord.close()

    run(scenario)


def test_pending_member_that_never_returns_does_not_block_the_rebalance_forever() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob", session_timeout_ms=200)
        await form_group(alice)
        # bob is told MEMBER_ID_REQUIRED and vanishes; alice's rejoin must still complete
        assert (await bob.join_once()).error_code == ErrorCode.MEMBER_ID_REQUIRED
        alice_join = asyncio.create_task(alice.join())  # the leader's join rebalances
        await settle()
        assert not alice_join.done()  # waits for the pending member...
        joined = await asyncio.wait_for(alice_join, timeout=2)  # ...until its session ends
        assert joined.generation_id == 2
        assert len(joined.members) == 1
        await coord.close()

    run(scenario)
