"""OffsetCommit and OffsetFetch through the coordinator: who may commit, and what comes back."""

from __future__ import annotations

import asyncio

import pytest

from kayak.broker.group import (
    CommittedOffset,
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetStore,
    OffsetStoreError,
)
from kayak.errors import ErrorCode
from kayak.protocol.messages.group_coordinator.group_metadata_value import GroupMetadataValue
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse
from kayak.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse
from tests.broker.test_group_harness import (
    FAST_CONFIG,
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


def commit_request(
    group_id: str,
    generation_id: int,
    member_id: str,
    offsets: dict[tuple[str, int], int],
    metadata: str | None = "",
    leader_epoch: int = -1,
) -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition, offset, leader_epoch, -1, metadata)
        )
    return OffsetCommitRequest(
        group_id,
        generation_id,
        member_id,
        None,
        -1,
        [OffsetCommitRequestTopic(t, ps) for t, ps in topics.items()],
    )


async def commit(
    coord: GroupCoordinator, request: OffsetCommitRequest, version: int
) -> dict[tuple[str, int], ErrorCode]:
    response: OffsetCommitResponse = await call(coord.offset_commit, request, version)
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for t in response.topics
        for p in t.partitions
    }


async def fetch_v1(
    coord: GroupCoordinator, group_id: str, partitions: dict[str, list[int]]
) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    request = OffsetFetchRequest(
        group_id, [OffsetFetchRequestTopic(t, ps) for t, ps in partitions.items()]
    )
    response: OffsetFetchResponse = await call(coord.offset_fetch, request, 1)
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def test_member_of_a_stable_group_commits_and_fetches() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob = consumers(coord, "alice", "bob")
        await form_group(alice, bob)
        request = commit_request(
            GROUP, 1, alice.member_id, {("orders", 0): 42, ("orders", 1): 7}, metadata="checkpoint"
        )
        assert await commit(coord, request, 2) == {
            ("orders", 0): ErrorCode.NONE,
            ("orders", 1): ErrorCode.NONE,
        }
        fetched = await fetch_v1(coord, GROUP, {"orders": [0, 1, 2]})
        assert fetched == {
            ("orders", 0): (42, "checkpoint", ErrorCode.NONE),
            ("orders", 1): (7, "checkpoint", ErrorCode.NONE),
            ("orders", 2): (-1, "", ErrorCode.NONE),  # nothing committed: -1, no error
        }
        await coord.close()

    run(scenario)


def test_commit_checks_generation_and_member() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice")
        await form_group(alice)
        stale = commit_request(GROUP, 0, alice.member_id, {("t", 0): 1})
        assert await commit(coord, stale, 2) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        stranger = commit_request(GROUP, 1, "stranger-1", {("t", 0): 1})
        assert await commit(coord, stranger, 8) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        # Without generation in a group that has members: not one of them.
        outsider = commit_request(GROUP, -1, "", {("t", 0): 1})
        assert await commit(coord, outsider, 2) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert (await fetch_v1(coord, GROUP, {"t": [0]}))[("t", 0)][0] == -1
        await coord.close()

    run(scenario)


def test_standalone_consumer_commits_without_a_group() -> None:
    async def scenario() -> None:
        coord = coordinator()
        request = commit_request("standalone", -1, "", {("logs", 3): 100})
        assert await commit(coord, request, 2) == {("logs", 3): ErrorCode.NONE}
        assert (await fetch_v1(coord, "standalone", {"logs": [3]}))[("logs", 3)][0] == 100
        listed = await call(coord.list_groups, ListGroupsRequest(), 4)
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [
            ("standalone", "", "Empty")
        ]
        # A generation for a group nobody joined: a stale member, refused.
        stale = commit_request("ghost-group", 3, "m-1", {("logs", 3): 1})
        assert await commit(coord, stale, 8) == {("logs", 3): ErrorCode.ILLEGAL_GENERATION}
        assert await commit(coord, stale, 9) == {("logs", 3): ErrorCode.GROUP_ID_NOT_FOUND}
        # v0 carries no generation at all: always a standalone commit.
        v0 = commit_request("legacy", -1, "", {("logs", 0): 5})
        assert await commit(coord, v0, 0) == {("logs", 0): ErrorCode.NONE}
        await coord.close()

    run(scenario)


def test_commit_while_completing_a_rebalance_is_refused_but_allowed_while_preparing() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice, bob, carol = consumers(coord, "alice", "bob", "carol")
        await form_group(alice, bob)
        carol_join = asyncio.create_task(carol.join())
        await settle()
        # PreparingRebalance: generation 1 members may still commit what they processed.
        preparing = commit_request(GROUP, 1, bob.member_id, {("t", 0): 10})
        assert await commit(coord, preparing, 2) == {("t", 0): ErrorCode.NONE}
        await asyncio.gather(alice.join(), bob.join(), carol_join)
        # CompletingRebalance: generation 2, but no assignment yet.
        completing = commit_request(GROUP, 2, bob.member_id, {("t", 0): 11})
        assert await commit(coord, completing, 2) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
        assert (await fetch_v1(coord, GROUP, {"t": [0]}))[("t", 0)][0] == 10
        await coord.close()

    run(scenario)


def test_oversized_metadata_fails_only_its_partition() -> None:
    async def scenario() -> None:
        coord = coordinator(
            GroupCoordinatorConfig(group_min_session_timeout_ms=100, offset_metadata_max_bytes=10)
        )
        request = commit_request("g", -1, "", {("t", 0): 1, ("t", 1): 2})
        request.topics[0].partitions[0].committed_metadata = "x" * 11
        request.topics[0].partitions[1].committed_metadata = "y" * 10
        assert await commit(coord, request, 2) == {
            ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE,
            ("t", 1): ErrorCode.NONE,
        }
        assert await fetch_v1(coord, "g", {"t": [0, 1]}) == {
            ("t", 0): (-1, "", ErrorCode.NONE),
            ("t", 1): (2, "y" * 10, ErrorCode.NONE),
        }
        await coord.close()

    run(scenario)


def test_null_metadata_is_stored_as_empty() -> None:
    async def scenario() -> None:
        coord = coordinator()
        request = commit_request("g", -1, "", {("t", 0): 1}, metadata=None)
        assert await commit(coord, request, 8) == {("t", 0): ErrorCode.NONE}
        assert (await fetch_v1(coord, "g", {"t": [0]}))[("t", 0)][1] == ""
        await coord.close()

    run(scenario)


def test_fetch_v7_null_topics_returns_everything_committed() -> None:
    async def scenario() -> None:
        coord = coordinator()
        request = commit_request(
            "g", -1, "", {("b", 1): 11, ("a", 0): 5, ("b", 0): 10}, leader_epoch=3
        )
        await commit(coord, request, 8)
        response = await call(coord.offset_fetch, OffsetFetchRequest("g", None), 7)
        assert response.error_code == ErrorCode.NONE
        assert [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch)
            for t in response.topics
            for p in t.partitions
        ] == [("a", 0, 5, 3), ("b", 0, 10, 3), ("b", 1, 11, 3)]
        unknown = await call(coord.offset_fetch, OffsetFetchRequest("nobody", None), 7)
        assert unknown.error_code == ErrorCode.NONE
        assert unknown.topics == []
        await coord.close()

    run(scenario)


def test_fetch_v8_answers_several_groups() -> None:
    async def scenario() -> None:
        coord = coordinator()
        await commit(coord, commit_request("g1", -1, "", {("t", 0): 1}), 8)
        await commit(coord, commit_request("g2", -1, "", {("t", 0): 2, ("u", 4): 3}), 8)
        request = OffsetFetchRequest(
            groups=[
                OffsetFetchRequestGroup("g1", topics=[OffsetFetchRequestTopics("t", [0, 1])]),
                OffsetFetchRequestGroup("g2", topics=None),
                OffsetFetchRequestGroup("g3", topics=[OffsetFetchRequestTopics("t", [0])]),
            ]
        )
        response = await call(coord.offset_fetch, request, 8)
        answers = {
            g.group_id: [
                (t.name, p.partition_index, p.committed_offset, p.error_code)
                for t in g.topics
                for p in t.partitions
            ]
            for g in response.groups
        }
        assert answers == {
            "g1": [("t", 0, 1, 0), ("t", 1, -1, 0)],
            "g2": [("t", 0, 2, 0), ("u", 4, 3, 0)],
            "g3": [("t", 0, -1, 0)],
        }
        assert all(g.error_code == ErrorCode.NONE for g in response.groups)
        await coord.close()

    run(scenario)


def test_commit_v1_keeps_the_client_timestamp() -> None:
    async def scenario() -> None:
        store = InMemoryOffsetStore()
        coord = GroupCoordinator(FAST_CONFIG, store, wall_clock=lambda: 1_700_000_000.0)
        request = commit_request("g", -1, "", {("t", 0): 1, ("t", 1): 2})
        request.topics[0].partitions[0].commit_timestamp = 1234
        await commit(coord, request, 1)
        assert store.fetch("g", "t", 0) == CommittedOffset(1, -1, "", 1234)
        assert store.fetch("g", "t", 1) == CommittedOffset(2, -1, "", 1_700_000_000_000)
        await commit(coord, commit_request("g", -1, "", {("t", 2): 3}, leader_epoch=9), 2)
        assert store.fetch("g", "t", 2) == CommittedOffset(3, -1, "", 1_700_000_000_000)
        await coord.close()

    run(scenario)


class FailingStore(InMemoryOffsetStore):
    async def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int,
        metadata: str,
        commit_timestamp: int,
    ) -> None:
        if topic == "broken":
            raise OffsetStoreError("disk full")
        await super().commit(
            group, topic, partition, offset, leader_epoch, metadata, commit_timestamp
        )


def test_store_failure_is_a_retriable_error_for_that_partition() -> None:
    async def scenario() -> None:
        coord = GroupCoordinator(FAST_CONFIG, FailingStore())
        request = commit_request("g", -1, "", {("broken", 0): 1, ("fine", 0): 2})
        assert await commit(coord, request, 8) == {
            ("broken", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ("fine", 0): ErrorCode.NONE,
        }
        await coord.close()

    run(scenario)


def test_commit_counts_as_a_sign_of_life() -> None:
    async def scenario() -> None:
        coord = coordinator()
        alice = Consumer(coord, "alice", session_timeout_ms=300)
        await form_group(alice)
        for offset in range(8):  # 0.6 s without a heartbeat, only commits
            await settle(0.075)
            request = commit_request(GROUP, 1, alice.member_id, {("t", 0): offset})
            assert await commit(coord, request, 8) == {("t", 0): ErrorCode.NONE}
        assert await alice.heartbeat() == ErrorCode.NONE
        await coord.close()

    run(scenario)


def test_empty_group_id_is_accepted_for_offsets_as_kafka_does() -> None:
    async def scenario() -> None:
        coord = coordinator()
        assert await commit(coord, commit_request("", -1, "", {("t", 0): 4}), 2) == {
            ("t", 0): ErrorCode.NONE
        }
        assert (await fetch_v1(coord, "", {"t": [0]}))[("t", 0)][0] == 4
        await coord.close()

    run(scenario)


def test_requests_after_close_get_coordinator_not_available() -> None:
    async def scenario() -> None:
        coord = coordinator()
        await coord.close()
        request = commit_request("g", -1, "", {("t", 0): 1})
        assert await commit(coord, request, 2) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        v1 = await fetch_v1(coord, "g", {"t": [0]})
        assert v1 == {("t", 0): (-1, "", ErrorCode.COORDINATOR_NOT_AVAILABLE)}
        v7 = await call(coord.offset_fetch, OffsetFetchRequest("g", None), 7)
        assert v7.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        batch = OffsetFetchRequest(groups=[OffsetFetchRequestGroup("g")])
        v8 = await call(coord.offset_fetch, batch, 8)
        assert v8.groups[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario)


class OffsetsOnlyStore(InMemoryOffsetStore):
    """A store as a kayak from before groups were stored left it: offsets, no members."""

    async def store_group(self, group: str, snapshot: GroupMetadataValue) -> None:
        pass


def test_members_outlive_a_restart_without_a_rebalance() -> None:
    """As Kafka reloads a group from __consumer_offsets: after a restart the members keep
    their ids, generation, leader and assignments, and heartbeat and commit on."""

    async def scenario() -> None:
        store = InMemoryOffsetStore()
        before = GroupCoordinator(FAST_CONFIG, store)
        alice, bob = consumers(before, "alice", "bob")
        await form_group(alice, bob)
        await before.close()  # finishes the writes of settled generations

        after = GroupCoordinator(FAST_CONFIG, store)
        for member in (alice, bob):
            member.coordinator = after
            assert await member.heartbeat() == ErrorCode.NONE
            synced = await member.sync()  # a Stable group answers with the assignment
            assert (synced.error_code, synced.assignment) == (0, f"a-{member.client_id}".encode())
        again = commit_request(GROUP, alice.generation_id, alice.member_id, {("t", 0): 9})
        assert await commit(after, again, 9) == {("t", 0): ErrorCode.NONE}
        # A new member starts the next generation from the stored one.
        carol = Consumer(after, "carol")
        joins = await asyncio.gather(carol.join(), alice.join(), bob.join())
        assert {j.generation_id for j in joins} == {alice.generation_id} == {2}
        await after.close()

    run(scenario)


def test_an_emptied_group_stays_empty_after_a_restart() -> None:
    async def scenario() -> None:
        store = InMemoryOffsetStore()
        before = GroupCoordinator(FAST_CONFIG, store)
        (alice,) = consumers(before, "alice")
        await form_group(alice)
        await alice.leave()
        await before.close()

        after = GroupCoordinator(FAST_CONFIG, store)
        alice.coordinator = after
        assert await alice.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
        (listed,) = (await call(after.list_groups, ListGroupsRequest(), 4)).groups
        assert (listed.group_id, listed.group_state, listed.protocol_type) == (
            GROUP, "Empty", "consumer")
        await after.close()

    run(scenario)


def test_member_commit_after_a_restart_is_told_to_rejoin() -> None:
    """Found by Kafka Streams across a broker restart, when kayak stored offsets but not
    members (a data directory from then still has none): a member's commit then must get
    UNKNOWN_MEMBER_ID (rejoin), as from Kafka's reloaded Empty group, not GROUP_ID_NOT_FOUND,
    which the Java consumer treats as fatal."""

    async def scenario() -> None:
        store = OffsetsOnlyStore()
        before = GroupCoordinator(FAST_CONFIG, store)
        alice = Consumer(before, "alice")
        await form_group(alice)
        first = commit_request(GROUP, 1, alice.member_id, {("t", 0): 5})
        assert await commit(before, first, 9) == {("t", 0): ErrorCode.NONE}
        await before.close()

        after = GroupCoordinator(FAST_CONFIG, store)  # the restarted broker, same offsets
        again = commit_request(GROUP, 1, alice.member_id, {("t", 0): 9})
        for version in (2, 8, 9):
            assert await commit(after, again, version) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert (await fetch_v1(after, GROUP, {"t": [0]}))[("t", 0)][0] == 5
        # A group that never had offsets is still not found.
        ghost = commit_request("ghost", 1, "m-1", {("t", 0): 1})
        assert await commit(after, ghost, 9) == {("t", 0): ErrorCode.GROUP_ID_NOT_FOUND}
        await after.close()

    run(scenario)
