"""Consumer-group APIs, routed to the group coordinator (one node coordinates every group).

Each request is authorized as Kafka authorizes it before the coordinator sees it: READ on the
group to join, sync, heartbeat, leave and commit (plus READ on each committed topic),
DESCRIBE to fetch offsets (and on each topic), describe and find a group, DELETE to delete
one or its offsets (OffsetDelete, plus READ on each topic); ListGroups shows only the groups
the principal may describe, unless it may describe the cluster. OffsetCommit and OffsetDelete
answer a partition of a topic that does not exist UNKNOWN_TOPIC_OR_PARTITION, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

from kayak.broker.context import RequestContext
from kayak.broker.group.offset_requests import failed_commit, failed_fetch
from kayak.broker.handlers.authorized_operations import group_operations
from kayak.broker.security.acls import AclOperation
from kayak.broker.security.acls.checks import GROUP, TOPIC, allowed, allowed_on_cluster
from kayak.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupAuthorizationFailedError,
    NotCoordinatorError,
)
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey
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
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.list_groups_response import ListGroupsResponse
from kayak.protocol.messages.offset_commit_request import OffsetCommitRequest
from kayak.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kayak.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestTopic,
)
from kayak.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
)

Forward = Callable[[Any], Awaitable[Any]]
_READ, _DESCRIBE, _DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
_GROUP_DENIED, _TOPIC_DENIED = (
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
)

# -- authorization ----------------------------------------------------------------------------


async def _member_guard(ctx: RequestContext, request: Any, forward: Forward) -> Message:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group."""
    if not allowed(ctx, _READ, GROUP, request.group_id):
        raise GroupAuthorizationFailedError(f"not authorized to read group {request.group_id}")
    return cast(Message, await forward(request))


async def _commit_guard(
    ctx: RequestContext, request: OffsetCommitRequest, forward: Forward
) -> OffsetCommitResponse:
    """READ on the group, then READ on each topic, then the partition must exist: the other
    partitions are refused, the rest committed."""
    if not allowed(ctx, _READ, GROUP, request.group_id):
        return failed_commit(request, _GROUP_DENIED)
    refused: dict[str, list[tuple[int, int]]] = {}
    permitted = []
    for topic in request.topics:
        indexes = [p.partition_index for p in topic.partitions]
        errors = _partition_errors(ctx, topic.name, indexes, _READ)
        for index, error in zip(indexes, errors, strict=True):
            if error:
                refused.setdefault(topic.name, []).append((index, error))
        kept = [p for p, error in zip(topic.partitions, errors, strict=True) if not error]
        if kept:
            permitted.append(topic.replace(partitions=kept))
    if not refused:
        return cast(OffsetCommitResponse, await forward(request))
    response = OffsetCommitResponse()
    if permitted:
        response = cast(OffsetCommitResponse, await forward(request.replace(topics=permitted)))
    answered = {t.name: t for t in response.topics}
    for name, failures in refused.items():
        topic_answer = answered.get(name)
        if topic_answer is None:
            topic_answer = answered[name] = OffsetCommitResponseTopic(name, [])
            response.topics.append(topic_answer)
        topic_answer.partitions.extend(OffsetCommitResponsePartition(i, e) for i, e in failures)
    return response


def _partition_errors(
    ctx: RequestContext, topic: str, indexes: list[int], operation: AclOperation
) -> list[int]:
    """Per partition: TOPIC_AUTHORIZATION_FAILED without ``operation`` on the topic (decided
    first, as in Kafka), UNKNOWN_TOPIC_OR_PARTITION if it does not exist, else 0."""
    if not allowed(ctx, operation, TOPIC, topic):
        return [_TOPIC_DENIED] * len(indexes)
    found = ctx.broker.catalog.get(topic)
    count = found.partition_count if found is not None and not found.deleting else 0
    return [0 if 0 <= i < count else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for i in indexes]


async def _offset_delete_guard(
    ctx: RequestContext, request: OffsetDeleteRequest, forward: Forward
) -> OffsetDeleteResponse:
    """DELETE on the group; then READ on each topic and the partition must exist."""
    if not allowed(ctx, _DELETE, GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=_GROUP_DENIED)
    refused: list[OffsetDeleteResponseTopic] = []
    permitted: list[OffsetDeleteRequestTopic] = []
    for topic in request.topics:
        indexes = [p.partition_index for p in topic.partitions]
        errors = _partition_errors(ctx, topic.name, indexes, _READ)
        failed = [
            OffsetDeleteResponsePartition(i, e) for i, e in zip(indexes, errors, strict=True) if e
        ]
        if failed:
            refused.append(OffsetDeleteResponseTopic(topic.name, failed))
        kept = [p for p, error in zip(topic.partitions, errors, strict=True) if not error]
        if kept:
            permitted.append(OffsetDeleteRequestTopic(topic.name, kept))
    response = cast(OffsetDeleteResponse, await forward(request.replace(topics=permitted)))
    if response.error_code:
        return response
    answered = {t.name: t for t in response.topics}
    for topic_answer in refused:
        existing = answered.get(topic_answer.name)
        if existing is None:
            response.topics.append(topic_answer)
        else:
            existing.partitions.extend(topic_answer.partitions)
    return response


async def _offset_fetch_guard(
    ctx: RequestContext, request: OffsetFetchRequest, forward: Forward
) -> OffsetFetchResponse:
    """DESCRIBE on the group, and on each topic: a requested topic the principal may not
    describe is answered TOPIC_AUTHORIZATION_FAILED, and left out of "all topics"."""
    if ctx.version < 8:
        if not allowed(ctx, _DESCRIBE, GROUP, request.group_id):
            return failed_fetch(request, ctx.version, _GROUP_DENIED)
        answered = cast(OffsetFetchResponse, await forward(request))
        answered.topics = _visible(ctx, answered.topics, request.topics is not None)
        return answered
    denied = {g.group_id for g in request.groups if not allowed(ctx, _DESCRIBE, GROUP, g.group_id)}
    permitted = [g for g in request.groups if g.group_id not in denied]
    answered = (
        cast(OffsetFetchResponse, await forward(request.replace(groups=permitted)))
        if permitted
        else OffsetFetchResponse()
    )
    explicit = {g.group_id: g.topics is not None for g in permitted}
    for group in answered.groups:
        group.topics = _visible(ctx, group.topics, explicit.get(group.group_id, True))
    answered.groups.extend(OffsetFetchResponseGroup(g, [], _GROUP_DENIED) for g in sorted(denied))
    return answered


class _FetchedPartition(Protocol):
    committed_offset: int
    committed_leader_epoch: int
    metadata: str | None
    error_code: int


class _FetchedTopic(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[_FetchedPartition]: ...


def _visible(ctx: RequestContext, topics: list[Any], explicit: bool) -> list[Any]:
    """The fetched topics the principal may see; explicitly requested others are marked."""
    shown: list[_FetchedTopic] = []
    for topic in cast(list[_FetchedTopic], topics):
        if allowed(ctx, _DESCRIBE, TOPIC, topic.name):
            shown.append(topic)
        elif explicit:
            for partition in topic.partitions:
                partition.committed_offset, partition.committed_leader_epoch = -1, -1
                partition.metadata, partition.error_code = "", _TOPIC_DENIED
            shown.append(topic)
    return shown


async def _describe_guard(
    ctx: RequestContext, request: DescribeGroupsRequest, forward: Forward
) -> DescribeGroupsResponse:
    """DESCRIBE on each group; the others are answered GROUP_AUTHORIZATION_FAILED. With
    include_authorized_operations (v3+), each group's operations for this principal."""
    denied = [g for g in request.groups if not allowed(ctx, _DESCRIBE, GROUP, g)]
    permitted = [g for g in request.groups if g not in denied]
    if not denied:
        answered = cast(DescribeGroupsResponse, await forward(request))
    elif permitted:
        answered = cast(DescribeGroupsResponse, await forward(request.replace(groups=permitted)))
    else:
        answered = DescribeGroupsResponse()
    if ctx.version >= 3 and request.include_authorized_operations:
        for group in answered.groups:
            if not group.error_code:
                group.authorized_operations = group_operations(ctx, group.group_id)
    answered.groups.extend(DescribedGroup(error_code=_GROUP_DENIED, group_id=g) for g in denied)
    return answered


async def _delete_guard(
    ctx: RequestContext, request: DeleteGroupsRequest, forward: Forward
) -> DeleteGroupsResponse:
    """DELETE on each group; the others are answered GROUP_AUTHORIZATION_FAILED."""
    denied = [g for g in request.groups_names if not allowed(ctx, _DELETE, GROUP, g)]
    if not denied:
        return cast(DeleteGroupsResponse, await forward(request))
    permitted = [g for g in request.groups_names if g not in denied]
    answered = (
        cast(DeleteGroupsResponse, await forward(request.replace(groups_names=permitted)))
        if permitted
        else DeleteGroupsResponse()
    )
    answered.results.extend(DeletableGroupResult(g, _GROUP_DENIED) for g in denied)
    return answered


async def _list_guard(
    ctx: RequestContext, request: ListGroupsRequest, forward: Forward
) -> ListGroupsResponse:
    """Every group for DESCRIBE on the cluster, else those the principal may describe."""
    answered = cast(ListGroupsResponse, await forward(request))
    if not allowed_on_cluster(ctx, _DESCRIBE):
        answered.groups = [g for g in answered.groups if allowed(ctx, _DESCRIBE, GROUP, g.group_id)]
    return answered


_Guard = Callable[[RequestContext, Any, Forward], Awaitable[Any]]
_GUARDS: dict[str, _Guard] = {
    "offset_commit": _commit_guard,
    "offset_delete": _offset_delete_guard,
    "offset_fetch": _offset_fetch_guard,
    "describe_groups": _describe_guard,
    "delete_groups": _delete_guard,
    "list_groups": _list_guard,
}


# -- routing --------------------------------------------------------------------------------

_METHODS = {
    ApiKey.JOIN_GROUP: "join_group",
    ApiKey.SYNC_GROUP: "sync_group",
    ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group",
    ApiKey.OFFSET_COMMIT: "offset_commit",
    ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.OFFSET_DELETE: "offset_delete",
    ApiKey.LIST_GROUPS: "list_groups",
    ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.DELETE_GROUPS: "delete_groups",
}


def _route(method: str) -> Callable[[RequestContext, Any], Awaitable[Message | None]]:
    async def forward(ctx: RequestContext, request: Any) -> Message:
        coordinator = ctx.broker.coordinator
        if coordinator is None:
            raise CoordinatorNotAvailableError("the group coordinator is not running")
        group = _group_of(request)
        if group and ctx.broker.coordinator_for(group) != ctx.broker.node_id:
            raise NotCoordinatorError(f"group {group!r} is coordinated by another shard")
        call = getattr(coordinator, method)
        response: Message = await call(request, ctx.version, ctx.client_id, ctx.client_host)
        return response

    async def handle(ctx: RequestContext, request: Any) -> Message | None:
        async def to_coordinator(allowed_part: Any) -> Message:
            return await forward(ctx, allowed_part)

        guard: _Guard = _GUARDS.get(method) or _member_guard
        response: Message = await guard(ctx, request, to_coordinator)
        return response

    handle.__name__ = f"handle_{method}"
    return handle


def _group_of(request: Any) -> str | None:
    """The group a request is about; batched forms (OffsetFetch v8+) name it per entry.

    Clients batch only groups with the same coordinator, so the first one decides.
    """
    group = getattr(request, "group_id", None)
    if group:
        return str(group)
    batched = getattr(request, "groups", None)
    if batched and hasattr(batched[0], "group_id"):
        return str(batched[0].group_id)
    return None


GROUP_HANDLERS: dict[int, Callable[[RequestContext, Any], Awaitable[Message | None]]] = {
    key: _route(method) for key, method in _METHODS.items()
}
