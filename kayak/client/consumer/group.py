"""This consumer as a member of its group (Kafka's classic group protocol): joining,
heartbeats, rebalances, leaving.

Membership runs in the background: find the coordinator, JoinGroup (rejoining at once with
the id a MEMBER_ID_REQUIRED answer carries), the leader runs the assignor, SyncGroup hands
the assignment out, then heartbeats every ``heartbeat.interval.ms`` from their own task —
however long the application takes between polls, up to ``max.poll.interval.ms``, after
which the member leaves and rejoins on the next poll, as Kafka's Java client does.

A rebalance (REBALANCE_IN_PROGRESS on a heartbeat, a changed subscription or topic, ...)
revokes every partition before rejoining with eager assignors (range, roundrobin), and only
the partitions that move, after the new assignment, with cooperative-sticky (then the member
rejoins once more so the leader can give them to their new owner).

The coordinator connection is :mod:`.group_coordinator`'s; commits and committed offsets
are :mod:`.group_commits`' (``GroupMember`` builds on both).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from kayak.client.backoff import backoff_from_config
from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.connection import BrokerConnection
from kayak.client.consumer.assignors import (
    RebalanceProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    make_assignors,
)
from kayak.client.consumer.group_commits import GroupCommits
from kayak.client.consumer.group_coordinator import (
    COORDINATOR_MOVED,
    MEMBERSHIP_GONE,
    MemberState,
    Retry,
    is_fatal,
)
from kayak.client.consumer.listener import call_listener
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.statistics import ConnectionCounters
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import (
    ErrorClass,
    ErrorCode,
    KafkaError,
    KayakError,
    error_for_code,
)
from kayak.protocol.messages.heartbeat_request import HeartbeatRequest
from kayak.protocol.messages.heartbeat_response import HeartbeatResponse
from kayak.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from kayak.protocol.messages.join_group_response import JoinGroupResponse
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from kayak.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from kayak.protocol.messages.sync_group_response import SyncGroupResponse

log = logging.getLogger(__name__)

__all__ = ["GroupMember", "MemberState"]

PROTOCOL_TYPE = "consumer"

_JOIN_GROUP_MAX = 9
_SLACK = 5.0  # seconds a held JoinGroup may take beyond the rebalance timeout


class GroupMember(GroupCommits):
    """Joins, heartbeats, rebalances, commits and leaves; see the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        on_assigned: Callable[[], None] = lambda: None,
    ) -> None:
        assert config.group_id is not None
        self.group_id: str = config.group_id
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._config = config
        self._on_assigned = on_assigned
        self._assignors = make_assignors(config.partition_assignment_strategy)
        self._backoff = backoff_from_config(config)
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.state = MemberState.UNJOINED
        self.rebalances = 0  # completed join+sync rounds (tests, logs)
        self._coordinator: BrokerConnection | None = None
        # Statistics of every coordinator connection, one after another ("GroupCoordinator").
        self.coordinator_counters = ConnectionCounters()
        self._finding: asyncio.Future[BrokerConnection] | None = None
        self._rejoin = asyncio.Event()
        self._stable = asyncio.Event()
        self._polled = asyncio.Event()
        self._polled.set()
        self._last_poll = time.monotonic()
        self._lost = False  # the coordinator forgot us: partitions are lost, not revoked
        self._joined_topics: dict[str, int] = {}  # partition counts the last join saw
        self._tasks: dict[str, asyncio.Future[None]] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.error: KayakError | None = None  # fatal, raised from the next poll

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the membership loop (idempotent)."""
        if "membership" not in self._tasks and self.state is not MemberState.CLOSED:
            self._spawn("membership", self._run())
            self._spawn("metadata", self._watch_metadata())
            if self._config.enable_auto_commit:
                self._spawn("auto-commit", self._auto_commit_loop())

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks[name] = task
        task.add_done_callback(lambda t, n=name: self._task_done(n, t))  # type: ignore[misc]

    def _task_done(self, name: str, task: asyncio.Future[None]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if not task.cancelled() and task.exception() is not None:
            log.error("group %s: %s task failed", self.group_id, name, exc_info=task.exception())

    def polled(self) -> None:
        """The application asked for records: it is alive (``max.poll.interval.ms``)."""
        self._last_poll = time.monotonic()
        self._polled.set()

    async def close(self, *, commit: Mapping[TopicPartition, OffsetAndMetadata] | None) -> None:
        """Commit ``commit`` (if given), revoke, leave the group and close the connection."""
        for name in ("membership", "metadata", "auto-commit", "heartbeat"):
            await self._stop_task(name)
        timeout = self._config.default_api_timeout_ms / 1000
        if commit and self.state is not MemberState.UNJOINED:
            try:
                await self.commit(commit, timeout=timeout)
            except KayakError as exc:
                log.warning("group %s: final commit failed: %s", self.group_id, exc)
        owned = set(self._subscriptions.assignment)
        if owned and self._subscriptions.uses_group_assignment:
            await call_listener(self._subscriptions.listener, "on_partitions_revoked", owned)
        with contextlib.suppress(KayakError, TimeoutError):
            async with asyncio.timeout(timeout):
                await self.leave("the consumer is closing")
        self.state = MemberState.CLOSED
        if self._coordinator is not None:
            await self._coordinator.close()
        if self._finding is not None:
            self._finding.cancel()

    async def _stop_task(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- the membership loop ----------------------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        self._rejoin.set()
        while True:
            await self._rejoin.wait()
            await self._polled.wait()  # after a max.poll.interval.ms timeout: wait for a poll
            if not self._subscriptions.uses_group_assignment:
                self._rejoin.clear()
                continue
            try:
                self._rejoin.clear()
                await self._join_and_sync()
                attempt = 0
            except (KayakError, OSError) as exc:
                if is_fatal(exc):
                    log.error("group %s: %s", self.group_id, exc)
                    self.error = exc  # raised from the next poll; joining goes on
                else:
                    log.info("group %s: join failed (%s); retrying", self.group_id, exc)
                self._rejoin.set()
                await asyncio.sleep(self._backoff.delay(min(attempt, 10)))
                attempt += 1

    async def _join_and_sync(self) -> None:
        await self._stop_task("heartbeat")
        self.state = MemberState.REBALANCING
        await self._prepare_rejoin()
        coordinator = await self.coordinator()
        join = await self._join(coordinator)
        assignments = await self._assign(join) if join.leader == self.member_id else {}
        assigned = await self._sync(coordinator, join, assignments)
        self.rebalances += 1
        await self._take_assignment(assigned)
        self.state = MemberState.STABLE
        self._spawn("heartbeat", self._heartbeat_loop())
        if not self._rejoin.is_set():
            self._stable.set()

    async def _prepare_rejoin(self) -> None:
        """Before JoinGroup: give up partitions as the protocol requires."""
        owned = set(self._subscriptions.assignment)
        if not owned:
            return
        if self._lost:
            self._lost = False
            await call_listener(self._subscriptions.listener, "on_partitions_lost", owned)
            self._subscriptions.set_group_assignment(set())
        elif self._assignors.protocol is RebalanceProtocol.EAGER:
            await self._revoke(owned)

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Commit what was processed of ``partitions``, tell the listener, drop them."""
        if self._config.enable_auto_commit:
            processed = self._subscriptions.processed_positions()
            await self.commit_quietly(
                {tp: OffsetAndMetadata(o) for tp, o in processed.items() if tp in partitions}
            )
        await call_listener(self._subscriptions.listener, "on_partitions_revoked", partitions)
        self._subscriptions.remove_partitions(partitions)

    async def _join(self, coordinator: BrokerConnection) -> JoinGroupResponse:
        if self._subscriptions.pattern is not None:
            snapshot = await self._cluster.refresh_metadata(all_topics=True)
            self._subscriptions.match_pattern(
                n for n, t in snapshot.topics.items() if not t.internal
            )
        topics = sorted(self._subscriptions.topics)
        if topics:
            await self._cluster.refresh_metadata(topics)
        self._joined_topics = self._partition_counts(topics)
        owned = list(self._subscriptions.assignment)
        metadata = encode_subscription(
            topics, owned, self.generation, self._config.client_rack or None
        )
        rebalance_timeout = self._config.max_poll_interval_ms
        version = coordinator.version_for(JoinGroupRequest, _JOIN_GROUP_MAX)
        while True:
            request = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self._config.session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout,
                member_id=self.member_id,
                group_instance_id=self._config.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[
                    JoinGroupRequestProtocol(a.name, metadata) for a in self._assignors.assignors
                ],
            )
            response: JoinGroupResponse = await coordinator.request(
                request, version, timeout=rebalance_timeout / 1000 + _SLACK
            )
            code = response.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id  # KIP-394: rejoin at once with it
                continue
            if code:
                self._join_error(code)
            self.member_id = response.member_id
            self.generation = response.generation_id
            self.protocol_name = response.protocol_name
            self.leader_id = response.leader
            log.info(
                "group %s: joined generation %d as %s%s (%s)",
                self.group_id,
                self.generation,
                self.member_id,
                " (leader)" if response.leader == self.member_id else "",
                self.protocol_name,
            )
            return response

    def _join_error(self, code: int) -> None:
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code in COORDINATOR_MOVED:
            self._coordinator_lost()
        error = error_for_code(code)
        if error.error_class is ErrorClass.FATAL and code not in (
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.REBALANCE_IN_PROGRESS,
            ErrorCode.ILLEGAL_GENERATION,
        ):
            raise error(f"joining group {self.group_id}: {error.default_message}")
        raise Retry(f"JoinGroup: {error.error_name}")

    async def _assign(self, join: JoinGroupResponse) -> dict[str, bytes]:
        """As leader: every member's assignment, encoded."""
        assert join.protocol_name is not None
        assignor = self._assignors.by_name(join.protocol_name)
        members = {
            m.member_id: decode_subscription(m.member_id, m.group_instance_id, m.metadata)
            for m in join.members
        }
        topics = sorted({t for m in members.values() for t in m.topics})
        if topics:
            await self._cluster.refresh_metadata(topics)
        counts = self._partition_counts(topics)
        self._joined_topics = {**counts, **self._joined_topics}
        assignment = assignor.assign(counts, members)
        log.debug("group %s: %s assigned %s", self.group_id, assignor.name, assignment)
        return {member_id: encode_assignment(tps) for member_id, tps in assignment.items()}

    def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        known = self._cluster.metadata.topics
        return {t: known[t].partition_count for t in topics if t in known}

    async def _sync(
        self, coordinator: BrokerConnection, join: JoinGroupResponse, assignments: dict[str, bytes]
    ) -> list[TopicPartition]:
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self._config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=join.protocol_name,
            assignments=[SyncGroupRequestAssignment(m, data) for m, data in assignments.items()],
        )
        response: SyncGroupResponse = await coordinator.request(
            request, timeout=self._config.max_poll_interval_ms / 1000 + _SLACK
        )
        if response.error_code:
            self._membership_error(response.error_code, "SyncGroup")
        return decode_assignment(response.assignment)

    async def _take_assignment(self, assigned: list[TopicPartition]) -> None:
        new = set(assigned)
        listener = self._subscriptions.listener
        if self._assignors.protocol is RebalanceProtocol.COOPERATIVE:
            owned = set(self._subscriptions.assignment)
            revoked, added = owned - new, new - owned
            if revoked:
                await self._revoke(revoked)
            self._subscriptions.set_group_assignment(new)
            self._cluster.add_topics({tp.topic for tp in new})
            self._on_assigned()
            await call_listener(listener, "on_partitions_assigned", added)
            if revoked:
                self.request_rejoin(f"revoked {sorted(revoked)} for their new owner")
        else:
            self._subscriptions.set_group_assignment(new)
            self._cluster.add_topics({tp.topic for tp in new})
            self._on_assigned()
            await call_listener(listener, "on_partitions_assigned", new)
        log.info("group %s: assigned %s", self.group_id, sorted(new))

    def _membership_error(self, code: int, what: str) -> None:
        """Act on a group error code: reset what it invalidates, then raise."""
        if code in MEMBERSHIP_GONE:
            self._lost = bool(self._subscriptions.assignment)
            self.generation = -1
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
        if code in COORDINATOR_MOVED:
            self._coordinator_lost()
        error = error_for_code(code)
        if code == ErrorCode.FENCED_INSTANCE_ID:
            raise error(f"{what}: another consumer uses group.instance.id")
        raise Retry(f"{what}: {error.error_name}")

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self._config.heartbeat_interval_ms / 1000
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            if self.state is not MemberState.STABLE:
                return  # left, rebalancing or closed: the next join starts new heartbeats
            if time.monotonic() - self._last_poll > self._config.max_poll_interval_ms / 1000:
                await self._leave_for_slow_poll()
                return
            try:
                coordinator = await self.coordinator()
                response: HeartbeatResponse = await coordinator.request(
                    HeartbeatRequest(
                        self.group_id,
                        self.generation,
                        self.member_id,
                        self._config.group_instance_id,
                    )
                )
            except (KayakError, OSError) as exc:
                log.info("group %s: heartbeat failed: %s", self.group_id, exc)
                self._coordinator_lost()
                if time.monotonic() - last_ok > self._config.session_timeout_ms / 1000:
                    self._lost = bool(self._subscriptions.assignment)
                    self.request_rejoin("no heartbeat got through for session.timeout.ms")
                    return
                continue
            if not self._heartbeat_answered(response.error_code):
                return
            last_ok = time.monotonic()

    def _heartbeat_answered(self, code: int) -> bool:
        """Act on a heartbeat's error code; False when the heartbeats must stop."""
        if code == ErrorCode.NONE:
            return True
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
            return False
        if code in MEMBERSHIP_GONE:
            try:
                self._membership_error(code, "Heartbeat")
            except Retry:
                pass
            except KafkaError as exc:
                self.error = exc
            self.request_rejoin(f"heartbeat: {error_for_code(code).error_name}")
            return False
        if code in COORDINATOR_MOVED:
            self._coordinator_lost()
            return True
        log.warning("group %s: heartbeat error %s", self.group_id, error_for_code(code).error_name)
        return True

    async def _leave_for_slow_poll(self) -> None:
        log.warning(
            "group %s: no poll for max.poll.interval.ms (%d ms); leaving the group until the "
            "application polls again (process less per poll, or raise max.poll.interval.ms)",
            self.group_id,
            self._config.max_poll_interval_ms,
        )
        self._polled.clear()
        self._lost = bool(self._subscriptions.assignment)
        with contextlib.suppress(KayakError):
            await self.leave("max.poll.interval.ms passed without a poll")
        self.request_rejoin("the application polled again")

    # -- leaving --------------------------------------------------------------------------

    async def leave(self, reason: str) -> None:
        """LeaveGroup, unless never joined or static (a static member's restart keeps its
        partitions; it leaves by session timeout)."""
        if not self.member_id or self._config.group_instance_id is not None:
            return
        coordinator = await self.coordinator()
        version = coordinator.version_for(LeaveGroupRequest, 5)
        request = LeaveGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            members=[MemberIdentity(self.member_id, None, reason)],
        )
        log.info("group %s: leaving (%s)", self.group_id, reason)
        self.member_id, self.generation = "", -1
        self.state = MemberState.UNJOINED
        self._stable.clear()
        await coordinator.request(request, version)

    # -- watching topics ------------------------------------------------------------------

    async def _watch_metadata(self) -> None:
        """Rejoin when a pattern matches other topics or a subscribed topic grows."""
        interval = self._config.metadata_max_age_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self.check_metadata()

    async def check_metadata(self) -> None:
        subscriptions = self._subscriptions
        try:
            if subscriptions.pattern is not None:
                snapshot = await self._cluster.refresh_metadata(all_topics=True)
                visible = [n for n, t in snapshot.topics.items() if not t.internal]
                if subscriptions.match_pattern(visible):
                    self._cluster.add_topics(subscriptions.topics)
                    self.request_rejoin(f"the pattern now matches {sorted(subscriptions.topics)}")
                    return
            elif subscriptions.topics:
                await self._cluster.refresh_metadata(subscriptions.topics)
        except KayakError as exc:
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            return
        counts = self._partition_counts(sorted(subscriptions.topics))
        if self.state is MemberState.STABLE and counts != {
            t: c for t, c in self._joined_topics.items() if t in subscriptions.topics
        }:
            self.request_rejoin("subscribed topics changed")
