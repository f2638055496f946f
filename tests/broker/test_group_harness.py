"""A driver for the group coordinator tests: simulated consumers speaking real message versions.

Holds no tests. Every request and response passes through its wire encoding at the version
the test names, so the coordinator sees what a decoder would hand it and the tests see only
what a client would receive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kayak.broker.group import GroupCoordinator, GroupCoordinatorConfig, InMemoryOffsetStore
from kayak.errors import ErrorCode
from kayak.protocol.message import Message
from kayak.protocol.messages.heartbeat_request import HeartbeatRequest
from kayak.protocol.messages.heartbeat_response import HeartbeatResponse
from kayak.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from kayak.protocol.messages.join_group_response import JoinGroupResponse
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from kayak.protocol.messages.leave_group_response import LeaveGroupResponse
from kayak.protocol.messages.sync_group_request import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from kayak.protocol.messages.sync_group_response import SyncGroupResponse

M = TypeVar("M", bound=Message)
R = TypeVar("R")

GROUP = "payments"
CONSUMER = "consumer"
HOST = "/127.0.0.1"

# Short enough that the files run in seconds, long enough not to flake on a busy machine.
FAST_CONFIG = GroupCoordinatorConfig(
    group_initial_rebalance_delay_ms=20,
    group_min_session_timeout_ms=100,
    group_max_session_timeout_ms=60_000,
)


def wire(message: M, version: int) -> M:
    """``message`` as a peer decodes it after we encode it at ``version``."""
    data = message.encode(version)
    decoded, end = type(message).read(data, 0, version)
    assert end == len(data)
    return decoded


def run(scenario: Callable[[], Coroutine[Any, Any, R]]) -> R:
    """Run one test scenario on a fresh event loop."""
    return asyncio.run(scenario())


def coordinator(config: GroupCoordinatorConfig = FAST_CONFIG) -> GroupCoordinator:
    return GroupCoordinator(config, InMemoryOffsetStore())


async def call(
    handler: Callable[[M, int, str, str], Awaitable[Message]],
    request: M,
    version: int,
    client_id: str = "admin",
) -> Any:
    """Send ``request`` at ``version`` through a coordinator handler; the decoded response."""
    response = await handler(wire(request, version), version, client_id, HOST)
    return wire(response, version)


async def settle(seconds: float = 0.05) -> None:
    """Give parked requests and timers a moment to do what they are going to do."""
    await asyncio.sleep(seconds)


@dataclass
class Consumer:
    """One simulated group member, remembering its member id and generation like a client."""

    coordinator: GroupCoordinator
    client_id: str
    protocols: list[tuple[str, bytes]] = field(default_factory=list)
    group_id: str = GROUP
    group_instance_id: str | None = None
    protocol_type: str = CONSUMER
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 10_000
    join_version: int = 5
    sync_version: int = 3
    heartbeat_version: int = 3
    leave_version: int = 1
    member_id: str = ""
    generation_id: int = -1

    def __post_init__(self) -> None:
        if not self.protocols:
            self.protocols = [("range", f"meta-{self.client_id}".encode())]

    async def join_once(self) -> JoinGroupResponse:
        """One JoinGroup; adopts the member id and generation it is given."""
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=self.protocol_type,
            protocols=[JoinGroupRequestProtocol(n, m) for n, m in self.protocols],
            reason="test",
        )
        response: JoinGroupResponse = await call(
            self.coordinator.join_group, request, self.join_version, self.client_id
        )
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == ErrorCode.NONE:
            self.generation_id = response.generation_id
        return response

    async def join(self) -> JoinGroupResponse:
        """JoinGroup as clients do it: rejoin at once with the id MEMBER_ID_REQUIRED gave."""
        response = await self.join_once()
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            response = await self.join_once()
        return response

    async def sync(self, assignments: dict[str, bytes] | None = None) -> SyncGroupResponse:
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocols[0][0],
            assignments=[SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()],
        )
        response: SyncGroupResponse = await call(
            self.coordinator.sync_group, request, self.sync_version, self.client_id
        )
        return response

    async def heartbeat(self) -> ErrorCode:
        request = HeartbeatRequest(
            self.group_id, self.generation_id, self.member_id, self.group_instance_id
        )
        response: HeartbeatResponse = await call(
            self.coordinator.heartbeat, request, self.heartbeat_version, self.client_id
        )
        return ErrorCode(response.error_code)

    async def leave(self) -> LeaveGroupResponse:
        request = LeaveGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            members=[MemberIdentity(self.member_id, self.group_instance_id, "bye")],
        )
        response: LeaveGroupResponse = await call(
            self.coordinator.leave_group, request, self.leave_version, self.client_id
        )
        return response


def consumers(coordinator: GroupCoordinator, *names: str, **settings: Any) -> list[Consumer]:
    return [Consumer(coordinator, name, **settings) for name in names]


async def form_group(*members: Consumer) -> list[JoinGroupResponse]:
    """Join all members concurrently and complete the SyncGroup round (leader assigns b"a-<id>")."""
    joins = await asyncio.gather(*(m.join() for m in members))
    assert all(j.error_code == ErrorCode.NONE for j in joins), joins
    leader = next(m for m, j in zip(members, joins, strict=True) if j.leader == m.member_id)
    assignments = {m.member_id: f"a-{m.client_id}".encode() for m in members}
    syncs = await asyncio.gather(*(m.sync(assignments if m is leader else None) for m in members))
    assert all(s.error_code == ErrorCode.NONE for s in syncs), syncs
    return list(joins)
