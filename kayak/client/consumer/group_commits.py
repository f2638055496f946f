"""A group member's offsets: committing them (OffsetCommit), reading the group's committed
ones (OffsetFetch) and auto-commit (``enable.auto.commit``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kayak.client.consumer.errors import CommitFailedError
from kayak.client.consumer.group_coordinator import (
    COORDINATOR_MOVED,
    MEMBERSHIP_GONE,
    GroupCoordinator,
    MemberState,
    Retry,
)
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import (
    ErrorClass,
    ErrorCode,
    KayakError,
    error_for_code,
)
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest, OffsetFetchRequestTopic
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse

log = logging.getLogger(__name__)

__all__ = ["GroupCommits"]

_OFFSET_FETCH_MAX = 7
_OFFSET_COMMIT_MAX = 8


class GroupCommits(GroupCoordinator):
    """Commits and committed offsets of a group member, through its coordinator."""

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, timeout: float
    ) -> None:
        """OffsetCommit, retried through coordinator moves until ``timeout`` seconds pass.

        Raises :class:`CommitFailedError` if the group moved on (rebalance, expired member).
        """
        if not offsets:
            return
        await self._retrying(lambda: self._commit_once(offsets), timeout, "commit")

    async def commit_quietly(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> bool:
        try:
            await self.commit(offsets, timeout=self._config.default_api_timeout_ms / 1000)
        except KayakError as exc:
            log.warning("group %s: commit failed: %s", self.group_id, exc)
            return False
        return True

    async def _commit_once(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        coordinator = await self.coordinator()
        version = coordinator.version_for(OffsetCommitRequest, _OFFSET_COMMIT_MAX)
        as_member = self._subscriptions.uses_group_assignment
        topics: dict[str, OffsetCommitRequestTopic] = {}
        for tp, committed in sorted(offsets.items()):
            topic = topics.setdefault(tp.topic, OffsetCommitRequestTopic(tp.topic, []))
            epoch = committed.leader_epoch if committed.leader_epoch is not None else -1
            topic.partitions.append(
                OffsetCommitRequestPartition(
                    tp.partition, committed.offset, epoch, -1, committed.metadata
                )
            )
        request = OffsetCommitRequest(
            group_id=self.group_id,
            generation_id_or_member_epoch=self.generation if as_member else -1,
            member_id=self.member_id if as_member else "",
            group_instance_id=self._config.group_instance_id if as_member else None,
            topics=list(topics.values()),
        )
        response: OffsetCommitResponse = await coordinator.request(request, version)
        codes = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
        if codes:
            self._commit_error(codes[0])
        self._note_committed({tp: committed.offset for tp, committed in offsets.items()})

    def _note_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Remember the group's committed offsets for the statistics."""
        counters = self._subscriptions.counters
        for tp, offset in offsets.items():
            if tp in counters:
                counters[tp].committed_offset = offset

    def _commit_error(self, code: int) -> None:
        error = error_for_code(code)
        if code in COORDINATOR_MOVED or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            if code in COORDINATOR_MOVED:
                self._coordinator_lost()
            raise Retry(f"OffsetCommit: {error.error_name}")
        if code in MEMBERSHIP_GONE or code == ErrorCode.REBALANCE_IN_PROGRESS:
            if code in MEMBERSHIP_GONE:
                self.generation = -1
                self._lost = bool(self._subscriptions.assignment)
            self.request_rejoin(f"commit: {error.error_name}")
            raise CommitFailedError(
                f"commit failed: {error.error_name}; the group rebalanced and the partitions "
                "may now belong to another member"
            )
        raise error(f"committing offsets of group {self.group_id}: {error.default_message}")

    async def committed(
        self, partitions: set[TopicPartition], *, timeout: float
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions`` (partitions without one are left
        out)."""
        if not partitions:
            return {}
        return await self._retrying(lambda: self._fetch_committed(partitions), timeout, "offsets")

    async def _fetch_committed(
        self, partitions: set[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        coordinator = await self.coordinator()
        version = coordinator.version_for(OffsetFetchRequest, _OFFSET_FETCH_MAX)
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetFetchRequest(
            group_id=self.group_id,
            topics=[OffsetFetchRequestTopic(t, ps) for t, ps in by_topic.items()],
            require_stable=self._config.isolation_level == "read_committed",
        )
        response: OffsetFetchResponse = await coordinator.request(request, version)
        if response.error_code:
            self._offset_fetch_error(response.error_code)
        found: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code:
                    self._offset_fetch_error(p.error_code)
                if p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None
                    found[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", epoch
                    )
        self._note_committed({tp: committed.offset for tp, committed in found.items()})
        return found

    def _offset_fetch_error(self, code: int) -> None:
        error = error_for_code(code)
        if code in COORDINATOR_MOVED:
            self._coordinator_lost()
        if error.error_class is not ErrorClass.FATAL:
            raise Retry(f"OffsetFetch: {error.error_name}")
        raise error(f"fetching committed offsets of group {self.group_id}: {error.default_message}")

    async def _auto_commit_loop(self) -> None:
        interval = self._config.auto_commit_interval_ms / 1000
        last: dict[TopicPartition, int] = {}
        while True:
            await asyncio.sleep(interval)
            if self.state is not MemberState.STABLE and self._subscriptions.uses_group_assignment:
                continue
            processed = self._subscriptions.processed_positions()
            changed = {tp: o for tp, o in processed.items() if last.get(tp) != o}
            if changed and await self.commit_quietly(
                {tp: OffsetAndMetadata(o) for tp, o in changed.items()}
            ):
                last.update(changed)
