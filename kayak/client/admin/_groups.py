"""Consumer group administration: ListGroups (every broker), and DescribeGroups, OffsetFetch
and DeleteGroups (each group's coordinator, found with FindCoordinator)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Collection, Iterable, Sequence
from functools import partial
from typing import TypeVar

from kayak.client.admin._core import (
    BROKER_RETRY,
    COORDINATOR_RETRY,
    AdminCore,
    Outcome,
    Target,
    item_error,
)
from kayak.client.admin._routes import at_coordinator, coordinators
from kayak.client.admin.models import GroupDescription, GroupListing, MemberDescription
from kayak.client.backoff import Deadline
from kayak.client.connection import BrokerConnection
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import KayakError, UnsupportedVersionError, raise_for_code
from kayak.protocol.message import Message
from kayak.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetFetchRequest,
)
from kayak.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from kayak.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from kayak.protocol.messages.delete_groups_response import DeleteGroupsResponse
from kayak.protocol.messages.describe_groups_response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from kayak.protocol.messages.list_groups_response import ListGroupsResponse
from kayak.protocol.messages.offset_fetch_request import (
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from kayak.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
)

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

CONSUMER_PROTOCOL = "consumer"
_VERSION_PREFIX = struct.Struct(">h")
_OFFSET_FETCH_GROUPS = 8  # OffsetFetch v8+ names groups in a list
_OFFSET_FETCH_ALL = 2  # OffsetFetch v2+ takes a null topic list for "everything committed"
_NO_EPOCH = -1
_Partition = OffsetFetchResponsePartition | OffsetFetchResponsePartitions


async def _to_coordinator(
    core: AdminCore, items: list[str], deadline: Deadline
) -> dict[str, Target | KayakError]:
    return await coordinators(core, items, deadline)


# -- ListGroups --------------------------------------------------------------------------


async def list_groups(core: AdminCore, deadline: Deadline) -> Outcome[int, list[GroupListing]]:
    """Every broker's groups (each broker lists those it coordinates)."""
    cluster = core.cluster
    if cluster.metadata_is_stale() or not cluster.metadata.brokers:
        await cluster.refresh_metadata()

    async def route(nodes: list[int]) -> dict[int, Target]:
        return {node: node for node in nodes}

    return await core.run(
        sorted(cluster.metadata.brokers),
        route=route,
        send=partial(_send_list_groups, core),
        retry=BROKER_RETRY,
        deadline=deadline,
        what="list groups",
        label=lambda node: f"broker {node}",
    )


async def _send_list_groups(
    core: AdminCore, connection: BrokerConnection, nodes: list[int], deadline: Deadline
) -> dict[int, list[GroupListing]]:
    response: ListGroupsResponse = await core.request(connection, ListGroupsRequest(), deadline)
    raise_for_code(response.error_code)
    node = nodes[0]
    listed = [
        GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type, node)
        for g in response.groups
    ]
    return {node: listed}


# -- DescribeGroups ----------------------------------------------------------------------


async def describe_groups(
    core: AdminCore, groups: Collection[str], deadline: Deadline
) -> Outcome[str, GroupDescription]:
    return await core.run(
        groups,
        route=partial(_to_coordinator, core, deadline=deadline),
        send=partial(_send_describe_groups, core),
        retry=COORDINATOR_RETRY,
        deadline=deadline,
        what="describe groups",
    )


async def _send_describe_groups(
    core: AdminCore, connection: BrokerConnection, groups: list[str], deadline: Deadline
) -> Outcome[str, GroupDescription]:
    request = DescribeGroupsRequest(groups=groups)
    response: DescribeGroupsResponse = await core.request(connection, request, deadline)
    return {g.group_id: _described(g, connection.node_id) for g in response.groups}


def _described(group: DescribedGroup, coordinator: int) -> GroupDescription | KayakError:
    if group.error_code:
        return item_error(group.error_code, group.group_id)
    consumer = group.protocol_type == CONSUMER_PROTOCOL
    members = tuple(_member(m, consumer) for m in group.members)
    return GroupDescription(
        group_id=group.group_id,
        state=group.group_state,
        protocol_type=group.protocol_type,
        protocol=group.protocol_data,
        members=members,
        coordinator=coordinator,
    )


def _member(member: DescribedGroupMember, consumer: bool) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    subscription: tuple[str, ...] = ()
    if consumer:
        decoded = _decode_embedded(ConsumerProtocolAssignment, member.member_assignment)
        if decoded is not None:
            assignment = tuple(
                sorted(
                    TopicPartition(t.topic, p) for t in decoded.assigned_partitions
                    for p in t.partitions
                )
            )  # fmt: skip
        subscribed = _decode_embedded(ConsumerProtocolSubscription, member.member_metadata)
        if subscribed is not None:
            subscription = tuple(subscribed.topics)
    return MemberDescription(
        member_id=member.member_id,
        client_id=member.client_id,
        host=member.client_host,
        group_instance_id=member.group_instance_id,
        assignment=assignment,
        subscription=subscription,
    )


def _decode_embedded(cls: type[M], data: bytes | None) -> M | None:
    """A consumer protocol struct: an int16 version, then the struct at that version.

    A version newer than kayak knows is read as the newest it knows (newer versions only
    append fields); anything unreadable is logged and taken as absent.
    """
    if not data or len(data) < _VERSION_PREFIX.size:
        return None
    (version,) = _VERSION_PREFIX.unpack_from(data)
    body = memoryview(data)[_VERSION_PREFIX.size :]
    try:
        return cls.decode(body, max(min(version, cls.MAX_VERSION), cls.MIN_VERSION))
    except KayakError as exc:
        log.debug("cannot decode a member's %s: %s", cls.NAME, exc)
        return None


# -- DeleteGroups ------------------------------------------------------------------------


async def delete_groups(
    core: AdminCore, groups: Collection[str], deadline: Deadline
) -> Outcome[str, None]:
    return await core.run(
        groups,
        route=partial(_to_coordinator, core, deadline=deadline),
        send=partial(_send_delete_groups, core),
        retry=COORDINATOR_RETRY,
        deadline=deadline,
        what="delete groups",
    )


async def _send_delete_groups(
    core: AdminCore, connection: BrokerConnection, groups: list[str], deadline: Deadline
) -> Outcome[str, None]:
    request = DeleteGroupsRequest(groups_names=groups)
    response: DeleteGroupsResponse = await core.request(connection, request, deadline)
    return {
        r.group_id: item_error(r.error_code, r.group_id) if r.error_code else None
        for r in response.results
    }


# -- OffsetFetch -------------------------------------------------------------------------

Committed = dict[TopicPartition, OffsetAndMetadata | KayakError]


async def group_offsets(
    core: AdminCore,
    group: str,
    partitions: Collection[TopicPartition] | None,
    deadline: Deadline,
) -> Committed:
    """The group's committed offsets (for ``partitions``, or every committed one)."""

    async def send(connection: BrokerConnection, deadline: Deadline) -> Committed:
        return await _send_offset_fetch(core, connection, group, partitions, deadline)

    return await at_coordinator(core, group, send, deadline, "fetch committed offsets")


async def _send_offset_fetch(
    core: AdminCore,
    connection: BrokerConnection,
    group: str,
    partitions: Collection[TopicPartition] | None,
    deadline: Deadline,
) -> Committed:
    version = connection.version_for(OffsetFetchRequest)
    if partitions is None and version < _OFFSET_FETCH_ALL:
        raise UnsupportedVersionError(
            f"{group}: the broker's OffsetFetch v{version} cannot list every committed offset; "
            "name the partitions"
        )
    by_topic: dict[str, list[int]] = {}
    for tp in partitions or ():
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if version >= _OFFSET_FETCH_GROUPS:
        topics = None if partitions is None else [
            OffsetFetchRequestTopics(t, ps) for t, ps in by_topic.items()
        ]  # fmt: skip
        request = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group, topics=topics)])
        response: OffsetFetchResponse = await core.request(connection, request, deadline, version)
        found = [g for g in response.groups if g.group_id == group]
        if found:
            raise_for_code(found[0].error_code)
            return _committed((t.name, t.partitions) for t in found[0].topics)
        # A broker that routes OffsetFetch by the v0-7 group_id field (a sharded kayak
        # broker does) answers v8+ without the group: ask again the old way.
        log.debug("OffsetFetch v%d answer did not mention %s; retrying at v7", version, group)
        version = _OFFSET_FETCH_GROUPS - 1
    request = OffsetFetchRequest(
        group_id=group,
        topics=None if partitions is None else [
            OffsetFetchRequestTopic(t, ps) for t, ps in by_topic.items()
        ],
    )  # fmt: skip
    response = await core.request(connection, request, deadline, version)
    raise_for_code(response.error_code)
    return _committed((t.name, t.partitions) for t in response.topics)


def _committed(topics: Iterable[tuple[str, Sequence[_Partition]]]) -> Committed:
    committed: Committed = {}
    for name, partitions in topics:
        for p in partitions:
            tp = TopicPartition(name, p.partition_index)
            if p.error_code:
                committed[tp] = item_error(p.error_code, str(tp))
            elif p.committed_offset >= 0:
                epoch = None if p.committed_leader_epoch == _NO_EPOCH else p.committed_leader_epoch
                committed[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
    return committed
