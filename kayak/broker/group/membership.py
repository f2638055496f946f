"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the rebalances they drive.

Everything here runs synchronously on the event loop between awaits, so a request's checks and
the state changes they justify can never interleave with another request's. Requests that
must wait (JoinGroup until the join phase ends, SyncGroup until the leader's assignment) get a
future to await; timers (``loop.call_later``) end join phases and expire sessions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar
from uuid import uuid4

from kayak.broker.group.config import GroupCoordinatorConfig
from kayak.broker.group.group import Group
from kayak.broker.group.member import Member
from kayak.broker.group.member_requests import JoinParams, LeavingMember, SyncParams
from kayak.broker.group.results import JoinResult, SyncResult
from kayak.broker.group.state import GroupState
from kayak.errors import ErrorCode

logger = logging.getLogger(__name__)

_S = GroupState
_E = ErrorCode

T = TypeVar("T")
TimerCallback = Callable[[Group], None]


class Membership:
    """Runs the classic rebalance protocol for every group in ``groups``."""

    def __init__(
        self,
        groups: dict[str, Group],
        config: GroupCoordinatorConfig,
        clock: Callable[[], float],
        on_settled: Callable[[Group], None] = lambda group: None,
    ) -> None:
        self._groups = groups
        self._config = config
        self._clock = clock
        # Told each time a generation settles (Stable) or the group empties: what Kafka
        # writes to __consumer_offsets, so that members outlive a restart.
        self._on_settled = on_settled

    # -- JoinGroup ----------------------------------------------------------------------

    def join(self, p: JoinParams) -> asyncio.Future[JoinResult]:
        """Handle a JoinGroup; the future resolves when the member's join phase ends."""
        if not (
            self._config.group_min_session_timeout_ms
            <= p.session_timeout_ms
            <= self._config.group_max_session_timeout_ms
        ):
            return _answered(JoinResult.failed(_E.INVALID_SESSION_TIMEOUT, p.member_id))
        group = self._groups.get(p.group_id)
        if group is None:
            if p.member_id:
                return _answered(JoinResult.failed(_E.UNKNOWN_MEMBER_ID, p.member_id))
            group = Group(p.group_id)  # registered only once someone is admitted
        if p.member_id:
            waiter = self._join_known_member(group, p)
        else:
            waiter = self._join_unknown_member(group, p)
        self._maybe_complete_join(group)
        return waiter

    def _join_unknown_member(self, group: Group, p: JoinParams) -> asyncio.Future[JoinResult]:
        if group.state is _S.DEAD:
            return _answered(JoinResult.failed(_E.COORDINATOR_NOT_AVAILABLE))
        static_member_id = group.static_member_id(p.group_instance_id)
        names = [name for name, _ in p.protocols]
        if not group.supports_protocols(
            p.protocol_type, names, joining_member_id=static_member_id or ""
        ):
            return _answered(JoinResult.failed(_E.INCONSISTENT_GROUP_PROTOCOL))
        if static_member_id is not None:
            return self._replace_static_member(group, group.members[static_member_id], p)
        if group.size >= self._config.group_max_size:
            return _answered(JoinResult.failed(_E.GROUP_MAX_SIZE_REACHED))
        member_id = f"{p.group_instance_id or p.client_id}-{uuid4()}"
        if p.group_instance_id is None and p.require_known_member_id:
            self._add_pending_member(group, member_id, p.session_timeout_ms)
            return _answered(JoinResult.failed(_E.MEMBER_ID_REQUIRED, member_id))
        return self._add_member_and_rebalance(group, member_id, p)

    def _join_known_member(self, group: Group, p: JoinParams) -> asyncio.Future[JoinResult]:
        if group.state is _S.DEAD:
            return _answered(JoinResult.failed(_E.COORDINATOR_NOT_AVAILABLE, p.member_id))
        names = [name for name, _ in p.protocols]
        if not group.supports_protocols(p.protocol_type, names, joining_member_id=p.member_id):
            return _answered(JoinResult.failed(_E.INCONSISTENT_GROUP_PROTOCOL, p.member_id))
        if p.group_instance_id is None and self._remove_pending_member(group, p.member_id):
            return self._add_member_and_rebalance(group, p.member_id, p)
        error = group.check_member(p.member_id, p.group_instance_id)
        if error is not None:
            return _answered(JoinResult.failed(error, p.member_id))
        member = group.members[p.member_id]
        if group.state is _S.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, p)
        if group.state is _S.COMPLETING_REBALANCE and member.has_protocols(p.protocols):
            # It probably lost our JoinGroup answer: tell it again.
            return _answered(self._generation_result(group, member))
        if (
            group.state is _S.STABLE
            and not group.is_leader(member.member_id)
            and member.has_protocols(p.protocols)
        ):
            # A follower with nothing new may go straight on to SyncGroup. A leader's JoinGroup
            # always rebalances: that is how it reacts to changes members' metadata can't show.
            return _answered(self._generation_result(group, member))
        return self._update_member_and_rebalance(group, member, p)

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, p: JoinParams
    ) -> asyncio.Future[JoinResult]:
        member = Member(
            member_id,
            p.group_instance_id,
            p.client_id,
            p.client_host,
            p.session_timeout_ms,
            p.rebalance_timeout_ms,
            p.protocol_type,
            list(p.protocols),
        )
        waiter = _new_future(JoinResult)
        member.park_join(waiter)
        self._admit(group)
        group.add_member(member)
        if group.in_initial_delay:
            group.new_member_added = True
        self._restart_session(group, member)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")
        return waiter

    def _update_member_and_rebalance(
        self, group: Group, member: Member, p: JoinParams
    ) -> asyncio.Future[JoinResult]:
        _update_member(member, p)
        waiter = _new_future(JoinResult)
        member.park_join(waiter)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")
        return waiter

    def _replace_static_member(
        self, group: Group, member: Member, p: JoinParams
    ) -> asyncio.Future[JoinResult]:
        """A known group.instance.id joined without a member id: a restarted static member.

        It takes over the old member's place under a new member id (KIP-345). A Stable group
        whose protocol choice it doesn't change answers at once with the current generation and
        keeps everyone's assignment: no rebalance.
        """
        old_member_id = member.member_id
        new_member_id = f"{p.group_instance_id}-{uuid4()}"
        previous_leader = group.leader_id or ""
        # Whatever still waits under the old id belongs to a process that is gone or a duplicate.
        member.answer_join(JoinResult.failed(_E.FENCED_INSTANCE_ID, old_member_id))
        member.answer_sync(SyncResult.failed(_E.FENCED_INSTANCE_ID))
        group.replace_member_id(member, new_member_id)
        _update_member(member, p)
        self._restart_session(group, member)
        waiter = _new_future(JoinResult)
        member.park_join(waiter)
        logger.info(
            "Static member %s of group %s rejoined: member id %s replaces %s",
            p.group_instance_id,
            group.group_id,
            new_member_id,
            old_member_id,
        )
        if group.state is _S.STABLE:
            if group.select_protocol() == group.protocol_name:
                member.answer_join(self._static_rejoin_result(group, member, previous_leader, p))
            else:
                self._prepare_rebalance(group, f"static member {new_member_id} changed protocol")
        elif group.state is _S.COMPLETING_REBALANCE:
            # The leader may be computing assignments for the old member id right now.
            self._prepare_rebalance(group, f"static member {new_member_id} rejoined")
        return waiter

    def _static_rejoin_result(
        self, group: Group, member: Member, previous_leader: str, p: JoinParams
    ) -> JoinResult:
        if p.supports_skip_assignment:
            # v9+ (KIP-814): a rejoining leader learns it leads, but must not reassign.
            result = self._generation_result(group, member)
            result.skip_assignment = group.is_leader(member.member_id)
            return result
        # Older clients that saw themselves as leader would compute an assignment a Stable
        # group never passes on; naming the previous leader id keeps them followers.
        result = self._generation_result(group, member, with_members=False)
        result.leader_id = previous_leader
        return result

    def _generation_result(
        self, group: Group, member: Member, *, with_members: bool = True
    ) -> JoinResult:
        """The current generation as ``member`` sees it; only the leader gets the members."""
        is_leader = group.is_leader(member.member_id)
        return JoinResult(
            _E.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if with_members and is_leader else [],
        )

    # -- pending members (told MEMBER_ID_REQUIRED) --------------------------------------

    def _add_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        self._admit(group)
        loop = asyncio.get_running_loop()
        group.pending_members[member_id] = loop.call_later(
            session_timeout_ms / 1000, self._on_pending_member_expired, group, member_id
        )

    def _remove_pending_member(self, group: Group, member_id: str) -> bool:
        timer = group.pending_members.pop(member_id, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is None:
            return
        logger.info("Pending member %s of group %s never rejoined", member_id, group.group_id)
        self._maybe_complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------

    def sync(self, p: SyncParams) -> asyncio.Future[SyncResult]:
        """Handle a SyncGroup; the future resolves once the leader's assignment is in."""
        group = self._groups.get(p.group_id)
        if group is None:
            return _answered(SyncResult.failed(_E.UNKNOWN_MEMBER_ID))
        error = self._check_sync(group, p)
        if error is not None:
            return _answered(SyncResult.failed(error))
        member = group.members[p.member_id]
        if group.state is _S.STABLE:
            self._restart_session(group, member)
            return _answered(_assignment_result(group, member))
        waiter = _new_future(SyncResult)
        member.park_sync(waiter)
        if group.is_leader(member.member_id):
            self._complete_sync(group, p.assignments)
        return waiter

    def _check_sync(self, group: Group, p: SyncParams) -> ErrorCode | None:
        if group.state is _S.DEAD:
            return _E.COORDINATOR_NOT_AVAILABLE
        error = group.check_member(p.member_id, p.group_instance_id)
        if error is not None:
            return error
        if p.generation_id != group.generation_id:
            return _E.ILLEGAL_GENERATION
        if (p.protocol_type is not None and p.protocol_type != group.protocol_type) or (
            p.protocol_name is not None and p.protocol_name != group.protocol_name
        ):
            return _E.INCONSISTENT_GROUP_PROTOCOL
        if group.state is _S.PREPARING_REBALANCE:
            return _E.REBALANCE_IN_PROGRESS
        if group.state is _S.EMPTY:
            return _E.UNKNOWN_MEMBER_ID
        return None

    def _complete_sync(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        logger.info(
            "Group %s generation %d: assignment received from leader %s",
            group.group_id,
            group.generation_id,
            group.leader_id,
        )
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.transition_to(_S.STABLE)
        self._on_settled(group)
        for member in group.members.values():
            if member.answer_sync(_assignment_result(group, member)):
                self._restart_session(group, member)

    # -- Heartbeat ----------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Handle a Heartbeat: keep the session alive and tell the member about rebalances."""
        group = self._groups.get(group_id)
        if group is None:
            return _E.UNKNOWN_MEMBER_ID
        if group.state is _S.DEAD:
            return _E.COORDINATOR_NOT_AVAILABLE
        error = group.check_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return _E.ILLEGAL_GENERATION
        if group.state is _S.EMPTY:
            return _E.UNKNOWN_MEMBER_ID
        self._restart_session(group, group.members[member_id])
        if group.state is _S.PREPARING_REBALANCE:
            return _E.REBALANCE_IN_PROGRESS  # how members learn they must rejoin
        return _E.NONE

    def keep_alive(self, group: Group, member: Member) -> None:
        """Count a request other than Heartbeat (an offset commit) as a sign of life."""
        self._restart_session(group, member)

    # -- LeaveGroup ---------------------------------------------------------------------

    def leave(
        self, group_id: str, leaving: Sequence[LeavingMember]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Handle a LeaveGroup: the top-level error and one error per leaving member."""
        group = self._groups.get(group_id)
        if group is None:
            return _E.NONE, [_E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state is _S.DEAD:
            return _E.COORDINATOR_NOT_AVAILABLE, []
        return _E.NONE, [self._leave_one(group, m) for m in leaving]

    def _leave_one(self, group: Group, leaving: LeavingMember) -> ErrorCode:
        member_id, instance_id = leaving.member_id, leaving.group_instance_id
        # An empty member id with an instance id is an admin removing a static member.
        if member_id and group.is_static_member_fenced(member_id, instance_id):
            return _E.FENCED_INSTANCE_ID
        if instance_id is None and self._remove_pending_member(group, member_id):
            self._maybe_complete_join(group)
            return _E.NONE
        member = group.members.get(group.static_member_id(instance_id) or member_id)
        if member is None:
            return _E.UNKNOWN_MEMBER_ID
        logger.info("Member %s left group %s", member.member_id, group.group_id)
        self._remove_member_and_update_group(group, member, f"member {member.member_id} left")
        return _E.NONE

    # -- sessions -----------------------------------------------------------------------

    def _restart_session(self, group: Group, member: Member) -> None:
        timeout_s = member.session_timeout_ms / 1000
        member.session_deadline = self._clock() + timeout_s
        timer = member.session_timer
        loop = asyncio.get_running_loop()
        if timer is not None and timer.when() - loop.time() <= timeout_s:
            return  # fires in time; it will find the new deadline and re-arm
        member.cancel_session_timer()
        self._arm_session_timer(group, member, timeout_s)

    def _arm_session_timer(self, group: Group, member: Member, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        member.session_timer = loop.call_later(delay_s, self._on_session_timer, group, member)

    def _on_session_timer(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if not self._is_current(group) or group.members.get(member.member_id) is not member:
            return
        if member.has_parked_request:
            # Blocked in JoinGroup/SyncGroup, it cannot heartbeat; its session restarts when
            # that request is answered.
            self._restart_session(group, member)
            return
        remaining_s = member.session_deadline - self._clock()
        if remaining_s > 0:
            self._arm_session_timer(group, member, remaining_s)
            return
        logger.info(
            "Member %s of group %s missed its %d ms session timeout; removing it",
            member.member_id,
            group.group_id,
            member.session_timeout_ms,
        )
        self._remove_member_and_update_group(
            group, member, f"member {member.member_id} session expired"
        )

    # -- rebalancing --------------------------------------------------------------------

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join(group)

    def _drop_member(self, group: Group, member: Member) -> None:
        member.cancel_session_timer()
        # An empty member id tells a client still waiting to start over as a new member.
        member.answer_join(JoinResult.failed(_E.UNKNOWN_MEMBER_ID))
        member.answer_sync(SyncResult.failed(_E.UNKNOWN_MEMBER_ID))
        group.remove_member(member.member_id)

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is _S.COMPLETING_REBALANCE:
            self._abort_sync_phase(group)
        first_rebalance = group.state is _S.EMPTY
        group.cancel_rebalance_timer()
        group.transition_to(_S.PREPARING_REBALANCE)
        logger.info(
            "Preparing to rebalance group %s (generation %d): %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        if first_rebalance:
            self._start_initial_delay(group)
        else:
            self._arm_rebalance_timer(group, group.rebalance_timeout_ms, self._on_join_timeout)
            self._maybe_complete_join(group)

    def _abort_sync_phase(self, group: Group) -> None:
        """Send every member waiting in SyncGroup back to JoinGroup."""
        for member in group.members.values():
            member.assignment = b""
            if member.answer_sync(SyncResult.failed(_E.REBALANCE_IN_PROGRESS)):
                self._restart_session(group, member)

    def _start_initial_delay(self, group: Group) -> None:
        """Hold an empty group's first join phase open for more members to arrive.

        After ``group.initial.rebalance.delay.ms`` the phase ends unless a new member joined
        meanwhile; then it waits that long again, within the rebalance timeout in total.
        """
        delay_ms = self._config.group_initial_rebalance_delay_ms
        group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms - delay_ms, 0)
        group.new_member_added = False
        self._arm_rebalance_timer(group, delay_ms, self._on_initial_delay_elapsed)
        group.in_initial_delay = True

    def _on_initial_delay_elapsed(self, group: Group) -> None:
        group.rebalance_timer = None
        if not self._is_current(group) or group.state is not _S.PREPARING_REBALANCE:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay_ms = min(
                self._config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms
            )
            group.initial_delay_remaining_ms -= delay_ms
            group.new_member_added = False
            self._arm_rebalance_timer(group, delay_ms, self._on_initial_delay_elapsed)
            return
        self._complete_join(group)

    def _on_join_timeout(self, group: Group) -> None:
        group.rebalance_timer = None
        if self._is_current(group) and group.state is _S.PREPARING_REBALANCE:
            self._complete_join(group)

    def _arm_rebalance_timer(self, group: Group, delay_ms: int, callback: TimerCallback) -> None:
        loop = asyncio.get_running_loop()
        group.rebalance_timer = loop.call_later(delay_ms / 1000, callback, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is _S.PREPARING_REBALANCE
            and not group.in_initial_delay
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop who didn't rejoin, start a generation, answer the joins."""
        group.cancel_rebalance_timer()
        for member in group.not_yet_rejoined():
            # Static members keep their place until their session expires (KIP-345).
            if not member.is_static:
                logger.info(
                    "Member %s of group %s did not rejoin in time; removing it",
                    member.member_id,
                    group.group_id,
                )
                self._drop_member(group, member)
        if group.members and not group.elect_joined_leader():
            logger.warning(
                "No member of group %s rejoined; waiting for sessions to expire", group.group_id
            )
            self._arm_rebalance_timer(group, group.rebalance_timeout_ms, self._on_join_timeout)
            return
        group.init_next_generation()
        if group.state is _S.EMPTY:
            logger.info("Group %s is empty at generation %d", group.group_id, group.generation_id)
            self._on_settled(group)
            return
        logger.info(
            "Group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            member.answer_join(self._generation_result(group, member))
            self._restart_session(group, member)

    # -- lifecycle ----------------------------------------------------------------------

    def restore(self, group: Group) -> None:
        """Take back a group loaded from its last stored generation; its members' sessions
        start now (as Kafka's do when it loads a group)."""
        self._admit(group)
        for member in group.members.values():
            self._restart_session(group, member)

    def discard(self, group: Group) -> None:
        """Mark a group Dead and forget it (DeleteGroups); it must have no members."""
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        group.cancel_rebalance_timer()
        group.transition_to(_S.DEAD)
        if self._is_current(group):
            del self._groups[group.group_id]

    def close(self) -> None:
        """Cancel every timer and answer every parked request with NOT_COORDINATOR."""
        for group in self._groups.values():
            group.cancel_rebalance_timer()
            for timer in group.pending_members.values():
                timer.cancel()
            group.pending_members.clear()
            for member in group.members.values():
                member.cancel_session_timer()
                member.answer_join(JoinResult.failed(_E.NOT_COORDINATOR, member.member_id))
                member.answer_sync(SyncResult.failed(_E.NOT_COORDINATOR))
        self._groups.clear()

    def _admit(self, group: Group) -> None:
        registered = self._groups.setdefault(group.group_id, group)
        assert registered is group, "a group object was replaced while in use"

    def _is_current(self, group: Group) -> bool:
        return self._groups.get(group.group_id) is group


def _update_member(member: Member, p: JoinParams) -> None:
    member.protocols = list(p.protocols)
    member.session_timeout_ms = p.session_timeout_ms
    member.rebalance_timeout_ms = p.rebalance_timeout_ms
    member.client_id = p.client_id  # DescribeGroups reports the latest JoinGroup's client
    member.client_host = p.client_host


def _assignment_result(group: Group, member: Member) -> SyncResult:
    return SyncResult(_E.NONE, group.protocol_type, group.protocol_name, member.assignment)


def _new_future(_: type[T]) -> asyncio.Future[T]:
    return asyncio.get_running_loop().create_future()


def _answered(result: T) -> asyncio.Future[T]:
    waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    waiter.set_result(result)
    return waiter
