"""Consumer-group APIs, routed to the group coordinator (one node coordinates every group)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kayak.broker.context import RequestContext
from kayak.errors import CoordinatorNotAvailableError, NotCoordinatorError
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey

_METHODS = {
    ApiKey.JOIN_GROUP: "join_group",
    ApiKey.SYNC_GROUP: "sync_group",
    ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group",
    ApiKey.OFFSET_COMMIT: "offset_commit",
    ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.LIST_GROUPS: "list_groups",
    ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.DELETE_GROUPS: "delete_groups",
}


def _route(method: str) -> Callable[[RequestContext, Any], Awaitable[Message | None]]:
    async def handle(ctx: RequestContext, request: Any) -> Message | None:
        coordinator = ctx.broker.coordinator
        if coordinator is None:
            raise CoordinatorNotAvailableError("the group coordinator is not running")
        group = _group_of(request)
        if group and ctx.broker.coordinator_for(group) != ctx.broker.node_id:
            raise NotCoordinatorError(f"group {group!r} is coordinated by another shard")
        call = getattr(coordinator, method)
        response: Message = await call(request, ctx.version, ctx.client_id, ctx.client_host)
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
