"""ListGroups, DescribeGroups and DeleteGroups: looking at groups from outside them."""

from __future__ import annotations

import logging

from kayak.broker.group.group import Group
from kayak.broker.group.membership import Membership
from kayak.broker.group.offsets import OffsetStore, OffsetStoreError
from kayak.broker.group.state import GroupState
from kayak.errors import ErrorCode
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.delete_groups_response import (
    DeletableGroupResult,
    DeleteGroupsResponse,
)
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.describe_groups_response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.list_groups_response import ListedGroup, ListGroupsResponse

logger = logging.getLogger(__name__)

_E = ErrorCode

# ListGroups v5+ (KIP-848) reports a type per group; every group here uses the classic protocol.
CLASSIC_GROUP_TYPE = "classic"


class GroupAdmin:
    """Answers the group administration requests."""

    def __init__(
        self, groups: dict[str, Group], membership: Membership, store: OffsetStore
    ) -> None:
        self._groups = groups
        self._membership = membership
        self._store = store

    def list_groups(self, request: ListGroupsRequest, version: int) -> ListGroupsResponse:
        """Every group, optionally filtered by state (v4+) and type (v5+), case-insensitively."""
        states = {s.lower() for s in request.states_filter} if version >= 4 else set()
        types = {t.lower() for t in request.types_filter} if version >= 5 else set()
        if types and CLASSIC_GROUP_TYPE not in types:
            return ListGroupsResponse(groups=[])
        listed = [
            ListedGroup(group_id, protocol_type, state.value, CLASSIC_GROUP_TYPE)
            for group_id, protocol_type, state in self._all_groups()
            if not states or state.value.lower() in states
        ]
        return ListGroupsResponse(groups=listed)

    def _all_groups(self) -> list[tuple[str, str, GroupState]]:
        """(group id, protocol type, state) of every group, in memory or only in the store."""
        in_memory = [(g.group_id, g.protocol_type or "", g.state) for g in self._groups.values()]
        # Groups whose offsets outlived the process (a durable store) exist, without members.
        only_stored = [
            (group_id, "", GroupState.EMPTY)
            for group_id in self._store.groups()
            if group_id not in self._groups
        ]
        return in_memory + only_stored

    def describe_groups(
        self, request: DescribeGroupsRequest, version: int
    ) -> DescribeGroupsResponse:
        """Each group's state and members; an unknown group is reported as Dead (v0-5)."""
        return DescribeGroupsResponse(groups=[self._describe(g) for g in request.groups])

    def _describe(self, group_id: str) -> DescribedGroup:
        group = self._groups.get(group_id)
        if group is None:
            # Offsets alone make a group exist (Empty); Kafka reports any other as Dead (v0-5).
            state = GroupState.EMPTY if self._store.fetch_all(group_id) else GroupState.DEAD
            return DescribedGroup(_E.NONE, group_id, state.value, "", "", [])
        # The chosen protocol, metadata and assignments only mean something once Stable.
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or "" if stable else ""
        members = [
            DescribedGroupMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return DescribedGroup(
            _E.NONE, group_id, group.state.value, group.protocol_type or "", protocol, members
        )

    async def delete_groups(
        self, request: DeleteGroupsRequest, version: int
    ) -> DeleteGroupsResponse:
        """Delete member-less groups and their committed offsets."""
        results = []
        for group_id in dict.fromkeys(request.groups_names):  # once each, in request order
            results.append(DeletableGroupResult(group_id, await self._delete(group_id)))
        return DeleteGroupsResponse(results=results)

    async def _delete(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            # Offsets may outlive the in-memory group (a durable store loaded at startup).
            if not self._store.fetch_all(group_id):
                return _E.GROUP_ID_NOT_FOUND
        elif group.state is not GroupState.EMPTY:
            return _E.NON_EMPTY_GROUP
        else:
            self._membership.discard(group)
        try:
            await self._store.delete_group(group_id)
        except OffsetStoreError as exc:
            logger.warning(
                "Could not delete the offsets of group %s (answering %s): %s",
                group_id,
                exc.delete_error.name,
                exc,
            )
            return exc.delete_error
        logger.info("Deleted group %s", group_id)
        return _E.NONE
