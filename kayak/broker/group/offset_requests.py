"""OffsetCommit and OffsetFetch: who may commit, and reading commits back, in every version."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Protocol

from kayak.broker.group.config import GroupCoordinatorConfig
from kayak.broker.group.group import Group
from kayak.broker.group.membership import Membership
from kayak.broker.group.offsets import CommittedOffset, OffsetStore, OffsetStoreError
from kayak.broker.group.state import GroupState
from kayak.errors import ErrorCode
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
)
from kayak.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from kayak.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from kayak.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

logger = logging.getLogger(__name__)

_S = GroupState
_E = ErrorCode

# (topic, [partition, ...]) as requested; None asks for every committed partition.
RequestedPartitions = list[tuple[str, list[int]]] | None
# (topic, [(partition, commit or None), ...]) as answered
FetchedOffsets = list[tuple[str, list[tuple[int, CommittedOffset | None]]]]


class OffsetRequests:
    """Answers OffsetCommit and OffsetFetch from an :class:`OffsetStore`."""

    def __init__(
        self,
        groups: dict[str, Group],
        membership: Membership,
        store: OffsetStore,
        config: GroupCoordinatorConfig,
        wall_clock: Callable[[], float],
    ) -> None:
        self._groups = groups
        self._membership = membership
        self._store = store
        self._config = config
        self._wall_clock = wall_clock

    # -- OffsetCommit -------------------------------------------------------------------

    async def commit(self, request: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
        """Store the offsets the request may commit; one error code per partition."""
        refusal = self._check_committer(
            request.group_id,
            request.generation_id_or_member_epoch if version >= 1 else -1,
            request.member_id if version >= 1 else "",
            request.group_instance_id if version >= 7 else None,
            version,
        )
        if refusal is not None:
            return failed_commit(request, refusal)
        now_ms = int(self._wall_clock() * 1000)
        topics = []
        for topic in request.topics:
            partitions = []
            for partition in topic.partitions:
                error = await self._commit_one(
                    request.group_id, topic.name, partition, version, now_ms
                )
                partitions.append(OffsetCommitResponsePartition(partition.partition_index, error))
            topics.append(OffsetCommitResponseTopic(topic.name, partitions))
        return OffsetCommitResponse(topics=topics)

    def _check_committer(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        version: int,
    ) -> ErrorCode | None:
        """Why this commit must be refused as a whole, or ``None``.

        Members commit with their generation, while the group is Stable (or already preparing
        the next rebalance: the heartbeat tells them). A consumer outside group management
        commits with generation -1 and no member id, allowed while the group has no members.
        """
        group = self._groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # Offsets only: the consumer assigns itself partitions.
                self._groups[group_id] = Group(group_id)
                return None
            if self._store.fetch_all(group_id):
                # Its offsets outlived a broker restart, its members (kept in memory) did not:
                # the group exists, Empty, as Kafka reloads it, and this member is unknown to
                # it. UNKNOWN_MEMBER_ID makes the client rejoin; GROUP_ID_NOT_FOUND is fatal
                # to the Java consumer (and so to a Kafka Streams thread).
                return _E.UNKNOWN_MEMBER_ID
            return _E.GROUP_ID_NOT_FOUND if version >= 9 else _E.ILLEGAL_GENERATION
        if group.state is _S.DEAD:
            return _E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return _E.FENCED_INSTANCE_ID
        if generation_id < 0 and group.state is _S.EMPTY:
            return None
        member = group.members.get(member_id)
        if member is None:
            return _E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return _E.ILLEGAL_GENERATION
        if group.state is _S.COMPLETING_REBALANCE:
            # It has the new generation but no assignment yet: nothing it could mean to commit.
            return _E.REBALANCE_IN_PROGRESS
        self._membership.keep_alive(group, member)
        return None

    async def _commit_one(
        self,
        group_id: str,
        topic: str,
        partition: OffsetCommitRequestPartition,
        version: int,
        now_ms: int,
    ) -> ErrorCode:
        metadata = partition.committed_metadata or ""
        if len(metadata) > self._config.offset_metadata_max_bytes:
            return _E.OFFSET_METADATA_TOO_LARGE
        # Only v1 carries a client timestamp; -1 there also means "now".
        timestamp = partition.commit_timestamp if version == 1 else -1
        try:
            await self._store.commit(
                group_id,
                topic,
                partition.partition_index,
                partition.committed_offset,
                partition.committed_leader_epoch if version >= 6 else -1,
                metadata,
                timestamp if timestamp >= 0 else now_ms,
            )
        except OffsetStoreError as exc:
            # One line per failure: a failing disk fails every partition, tracebacks would flood.
            logger.warning(
                "Could not store offset of group %s for %s-%d (answering %s): %s",
                group_id,
                topic,
                partition.partition_index,
                exc.commit_error.name,
                exc,
            )
            return exc.commit_error
        return _E.NONE

    # -- TxnOffsetCommit ----------------------------------------------------------------

    async def txn_commit(
        self, request: TxnOffsetCommitRequest, version: int
    ) -> TxnOffsetCommitResponse:
        """Offsets committed inside a transaction; the store holds them until its marker.

        From v3 a member names its generation (KIP-447), checked as OffsetCommit checks it,
        so a zombie of an older generation cannot commit; older versions are not checked.
        """
        if version >= 3 and (request.generation_id >= 0 or request.member_id):
            refusal = self._check_committer(
                request.group_id, request.generation_id, request.member_id,
                request.group_instance_id, version=9,
            )  # fmt: skip
            if refusal is not None:
                return failed_txn_commit(request, refusal)
        elif request.group_id not in self._groups:
            self._groups[request.group_id] = Group(request.group_id)
        now_ms = int(self._wall_clock() * 1000)
        offsets = [
            (topic.name, p.partition_index, CommittedOffset(
                p.committed_offset, p.committed_leader_epoch if version >= 2 else -1,
                p.committed_metadata or "", now_ms,
            ))
            for topic in request.topics
            for p in topic.partitions
        ]  # fmt: skip
        error = _E.NONE
        try:
            await self._store.commit_transactional(
                request.group_id, request.producer_id, request.producer_epoch, offsets
            )
        except OffsetStoreError as exc:
            logger.warning("Could not store transactional offsets of group %s: %s",
                           request.group_id, exc)  # fmt: skip
            error = exc.commit_error
        return failed_txn_commit(request, error)

    # -- OffsetFetch --------------------------------------------------------------------

    def fetch(self, request: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        """Committed offsets; a partition without one gets offset -1 and no error.

        With ``require_stable`` (v7+, read_committed consumers, KIP-447) a partition whose
        offset an open transaction is about to commit answers UNSTABLE_OFFSET_COMMIT, and the
        consumer asks again rather than start from an offset about to change.
        """
        stable = version >= 7 and request.require_stable
        if version >= 8:
            response = OffsetFetchResponse(
                groups=[
                    _group_v8(g.group_id, self._lookup(g.group_id, _requested(g.topics)))
                    for g in request.groups
                ]
            )
            for group in response.groups if stable else []:
                for topic in group.topics:
                    self._mark_unstable(group.group_id, topic.name, topic.partitions)
            return response
        # Before v2 the topic list cannot be null; from v2 null means every partition.
        requested = _requested(request.topics) if version >= 2 else _requested(request.topics or [])
        topics = _topics_v0(self._lookup(request.group_id, requested))
        for answered in topics if stable else []:
            self._mark_unstable(request.group_id, answered.name, answered.partitions)
        return OffsetFetchResponse(topics=topics)

    def _mark_unstable(self, group_id: str, topic: str, partitions: Sequence[_Answered]) -> None:
        for answer in partitions:
            if self._store.pending_transactional(group_id, topic, answer.partition_index):
                answer.committed_offset, answer.error_code = -1, _E.UNSTABLE_OFFSET_COMMIT

    def _lookup(self, group_id: str, requested: RequestedPartitions) -> FetchedOffsets:
        # Read the store whatever the group's state: offsets outlive members, and a consumer
        # outside group management has no group state at all.
        if requested is None:
            committed = sorted(self._store.fetch_all(group_id).items())
            return [
                (topic, [(partition, offset) for (_, partition), offset in entries])
                for topic, entries in groupby(committed, key=lambda item: item[0][0])
            ]
        return [
            (topic, [(p, self._store.fetch(group_id, topic, p)) for p in partitions])
            for topic, partitions in requested
        ]


def failed_txn_commit(request: TxnOffsetCommitRequest, error: ErrorCode) -> TxnOffsetCommitResponse:
    """A TxnOffsetCommit answer giving every partition the same error (NONE: success)."""
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(p.partition_index, error)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def failed_commit(request: OffsetCommitRequest, error: ErrorCode) -> OffsetCommitResponse:
    """An OffsetCommit answer giving every partition the same error."""
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                topic.name,
                [OffsetCommitResponsePartition(p.partition_index, error) for p in topic.partitions],
            )
            for topic in request.topics
        ]
    )


def failed_fetch(
    request: OffsetFetchRequest, version: int, error: ErrorCode
) -> OffsetFetchResponse:
    """An OffsetFetch answer reporting a group-level error where the version can carry it."""
    if version >= 8:
        return OffsetFetchResponse(
            groups=[OffsetFetchResponseGroup(g.group_id, [], error) for g in request.groups]
        )
    if version >= 2:
        return OffsetFetchResponse(error_code=error)
    # v0-1 have no group-level error: every requested partition carries it.
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponseTopic(
                topic.name,
                [
                    OffsetFetchResponsePartition(p, -1, -1, "", error)
                    for p in topic.partition_indexes
                ],
            )
            for topic in request.topics or []
        ]
    )


class _TopicRequest(Protocol):
    """What the generated topic-request classes of v0-7 and of v8+ have in common."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> list[int]: ...


class _Answered(Protocol):
    partition_index: int
    committed_offset: int
    error_code: int


def _requested(topics: Sequence[_TopicRequest] | None) -> RequestedPartitions:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def _topics_v0(fetched: FetchedOffsets) -> list[OffsetFetchResponseTopic]:
    return [
        OffsetFetchResponseTopic(
            topic,
            [
                OffsetFetchResponsePartition(p, *_partition_fields(offset))
                for p, offset in partitions
            ],
        )
        for topic, partitions in fetched
    ]


def _group_v8(group_id: str, fetched: FetchedOffsets) -> OffsetFetchResponseGroup:
    topics = [
        OffsetFetchResponseTopics(
            topic,
            [
                OffsetFetchResponsePartitions(p, *_partition_fields(offset))
                for p, offset in partitions
            ],
        )
        for topic, partitions in fetched
    ]
    return OffsetFetchResponseGroup(group_id, topics, _E.NONE)


def _partition_fields(offset: CommittedOffset | None) -> tuple[int, int, str, ErrorCode]:
    """(committed offset, leader epoch, metadata, error) for one partition's answer."""
    if offset is None:
        return -1, -1, "", _E.NONE
    return offset.offset, offset.leader_epoch, offset.metadata, _E.NONE
