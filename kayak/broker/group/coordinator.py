"""The group coordinator's front door: one coroutine per group API, requests in, responses out.

Each handler takes the decoded request, its API version and the caller's identity, and
returns the response message for that version; the network layer encodes it. Client mistakes
always come back as error codes, never as exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kayak.broker.group.admin import GroupAdmin
from kayak.broker.group.config import GroupCoordinatorConfig
from kayak.broker.group.group import Group
from kayak.broker.group.member_requests import JoinParams, LeavingMember, SyncParams
from kayak.broker.group.membership import Membership
from kayak.broker.group.metadata_writer import GroupMetadataWriter
from kayak.broker.group.offset_delete import delete_offsets
from kayak.broker.group.offset_requests import (
    OffsetRequests,
    failed_commit,
    failed_fetch,
    failed_txn_commit,
)
from kayak.broker.group.offsets import OffsetStore
from kayak.broker.group.results import JoinResult, SyncResult
from kayak.broker.group.snapshot import restored_group
from kayak.errors import ErrorCode
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.delete_groups_response import (
    DeletableGroupResult,
    DeleteGroupsResponse,
)
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.describe_groups_response import (
    DescribedGroup,
    DescribeGroupsResponse,
)
from kayak.protocol.messages.heartbeat_request import HeartbeatRequest
from kayak.protocol.messages.heartbeat_response import HeartbeatResponse
from kayak.protocol.messages.join_group_request import JoinGroupRequest
from kayak.protocol.messages.join_group_response import JoinGroupResponse
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest
from kayak.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.list_groups_response import ListGroupsResponse
from kayak.protocol.messages.offset_commit_request import OffsetCommitRequest
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse
from kayak.protocol.messages.offset_delete_request import OffsetDeleteRequest
from kayak.protocol.messages.offset_delete_response import OffsetDeleteResponse
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse
from kayak.protocol.messages.sync_group_request import SyncGroupRequest
from kayak.protocol.messages.sync_group_response import SyncGroupResponse
from kayak.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from kayak.protocol.messages.txn_offset_commit_response import TxnOffsetCommitResponse

_E = ErrorCode


class GroupCoordinator:
    """A network-free coordinator for classic consumer groups and their committed offsets.

    ``clock`` (seconds, monotonic) measures session deadlines; ``wall_clock`` (seconds since
    the epoch) stamps commits. Timers run on the event loop of the calling coroutines, so use
    one coordinator from one loop, and :meth:`close` it on that loop.
    """

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        offsets: OffsetStore,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._groups: dict[str, Group] = {}
        self._metadata = GroupMetadataWriter(self._groups, offsets)
        self._membership = Membership(self._groups, config, clock, self._metadata.settled)
        for group_id, snapshot in offsets.stored_groups().items():
            self._membership.restore(restored_group(group_id, snapshot))
        self._offsets = OffsetRequests(self._groups, self._membership, offsets, config, wall_clock)
        self._admin = GroupAdmin(self._groups, self._membership, offsets)
        self._store = offsets
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Cancel all timers; parked JoinGroup/SyncGroup requests get NOT_COORDINATOR.

        Later requests get COORDINATOR_NOT_AVAILABLE. The offset store is the caller's to close.
        A coroutine so that a coordinator with more to flush can keep this signature.
        """
        self._closed = True
        await self._metadata.close()
        self._membership.close()

    # -- membership ---------------------------------------------------------------------

    async def join_group(
        self, request: JoinGroupRequest, version: int, client_id: str, client_host: str
    ) -> JoinGroupResponse:
        """JoinGroup; waits until the group's join phase ends (or answers at once)."""
        refusal = self._refuse_membership_request(request.group_id)
        if refusal is not None:
            return _join_response(JoinResult.failed(refusal, request.member_id), version)
        # v0 has no rebalance timeout: the session timeout serves as both.
        rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else -1
        params = JoinParams(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=(
                rebalance_timeout_ms if rebalance_timeout_ms >= 0 else request.session_timeout_ms
            ),
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        return _join_response(await self._membership.join(params), version)

    async def sync_group(
        self, request: SyncGroupRequest, version: int, client_id: str, client_host: str
    ) -> SyncGroupResponse:
        """SyncGroup; a follower waits until the leader's assignment arrives."""
        refusal = self._refuse_membership_request(request.group_id)
        if refusal is not None:
            return _sync_response(SyncResult.failed(refusal))
        params = SyncParams(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 3 else None,
            protocol_type=request.protocol_type if version >= 5 else None,
            protocol_name=request.protocol_name if version >= 5 else None,
            assignments={a.member_id: a.assignment for a in request.assignments},
        )
        return _sync_response(await self._membership.sync(params))

    async def heartbeat(
        self, request: HeartbeatRequest, version: int, client_id: str, client_host: str
    ) -> HeartbeatResponse:
        """Heartbeat; REBALANCE_IN_PROGRESS tells the member to rejoin."""
        error = self._refuse_membership_request(request.group_id)
        if error is None:
            error = self._membership.heartbeat(
                request.group_id,
                request.member_id,
                request.group_instance_id if version >= 3 else None,
                request.generation_id,
            )
        return HeartbeatResponse(error_code=error)

    async def leave_group(
        self, request: LeaveGroupRequest, version: int, client_id: str, client_host: str
    ) -> LeaveGroupResponse:
        """LeaveGroup: one member (v0-2) or a batch with an error each (v3+)."""
        if version >= 3:
            leaving = [LeavingMember(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [LeavingMember(request.member_id, None)]
        refusal = self._refuse_membership_request(request.group_id)
        member_errors: list[ErrorCode] = []
        if refusal is not None:
            error = refusal
        else:
            error, member_errors = self._membership.leave(request.group_id, leaving)
        if version < 3:
            # One member, one error: report its error if the group-level one is NONE.
            first_failure = next((e for e in member_errors if e != _E.NONE), _E.NONE)
            return LeaveGroupResponse(error_code=error if error != _E.NONE else first_failure)
        return LeaveGroupResponse(
            error_code=error,
            members=[
                MemberResponse(m.member_id, m.group_instance_id, e)
                for m, e in zip(leaving, member_errors, strict=True)
            ],
        )

    # -- offsets ------------------------------------------------------------------------

    async def offset_commit(
        self, request: OffsetCommitRequest, version: int, client_id: str, client_host: str
    ) -> OffsetCommitResponse:
        """OffsetCommit; returns once the store has taken every accepted offset."""
        if self._closed:
            return failed_commit(request, _E.COORDINATOR_NOT_AVAILABLE)
        return await self._offsets.commit(request, version)

    async def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, version: int
    ) -> TxnOffsetCommitResponse:
        """TxnOffsetCommit: offsets that count once the producer's transaction commits."""
        if self._closed:
            return failed_txn_commit(request, _E.COORDINATOR_NOT_AVAILABLE)
        return await self._offsets.txn_commit(request, version)

    async def offset_fetch(
        self, request: OffsetFetchRequest, version: int, client_id: str, client_host: str
    ) -> OffsetFetchResponse:
        """OffsetFetch: one group (v0-7) or a batch of groups (v8+)."""
        if self._closed:
            return failed_fetch(request, version, _E.COORDINATOR_NOT_AVAILABLE)
        return self._offsets.fetch(request, version)

    async def offset_delete(
        self, request: OffsetDeleteRequest, version: int, client_id: str, client_host: str
    ) -> OffsetDeleteResponse:
        """OffsetDelete (KIP-496): drop committed offsets of topics nobody in the group reads."""
        if self._closed:
            return OffsetDeleteResponse(error_code=_E.COORDINATOR_NOT_AVAILABLE)
        return await delete_offsets(self._groups, self._store, request)

    # -- administration -----------------------------------------------------------------

    async def list_groups(
        self, request: ListGroupsRequest, version: int, client_id: str, client_host: str
    ) -> ListGroupsResponse:
        if self._closed:
            return ListGroupsResponse(error_code=_E.COORDINATOR_NOT_AVAILABLE)
        return self._admin.list_groups(request, version)

    async def describe_groups(
        self, request: DescribeGroupsRequest, version: int, client_id: str, client_host: str
    ) -> DescribeGroupsResponse:
        if self._closed:
            return DescribeGroupsResponse(
                groups=[
                    DescribedGroup(_E.COORDINATOR_NOT_AVAILABLE, group_id)
                    for group_id in request.groups
                ]
            )
        return self._admin.describe_groups(request, version)

    async def delete_groups(
        self, request: DeleteGroupsRequest, version: int, client_id: str, client_host: str
    ) -> DeleteGroupsResponse:
        if self._closed:
            return DeleteGroupsResponse(
                results=[
                    DeletableGroupResult(group_id, _E.COORDINATOR_NOT_AVAILABLE)
                    for group_id in dict.fromkeys(request.groups_names)
                ]
            )
        return await self._admin.delete_groups(request, version)

    # -- helpers ------------------------------------------------------------------------

    def _refuse_membership_request(self, group_id: str) -> ErrorCode | None:
        """The errors every JoinGroup/SyncGroup/Heartbeat/LeaveGroup is checked for first.

        Unlike offset and admin requests, which accept "" for compatibility, membership
        requests need a real group id.
        """
        if not group_id:
            return _E.INVALID_GROUP_ID
        if self._closed:
            return _E.COORDINATOR_NOT_AVAILABLE
        return None


def _join_response(result: JoinResult, version: int) -> JoinGroupResponse:
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Nullable only from v7; older versions say "no protocol" with "".
        protocol_name=result.protocol_name if version >= 7 else result.protocol_name or "",
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=result.members,
    )


def _sync_response(result: SyncResult) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
