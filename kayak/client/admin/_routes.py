"""Where each kind of admin request goes: the controller, a group's coordinator, a partition's
leader, or any broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kayak.client.admin._core import (
    ANY,
    COORDINATOR_RETRY,
    AdminCore,
    Outcome,
    Target,
    item_error,
)
from kayak.client.backoff import Deadline
from kayak.client.connection import BrokerConnection
from kayak.client.types import TopicPartition
from kayak.errors import (
    ErrorCode,
    KayakError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kayak.protocol.messages import DescribeClusterRequest, FindCoordinatorRequest
from kayak.protocol.messages.describe_cluster_response import DescribeClusterResponse
from kayak.protocol.messages.find_coordinator_response import FindCoordinatorResponse

log = logging.getLogger(__name__)

GROUP_KEY = 0  # FindCoordinator key_type of a consumer group
_BATCHED_FIND_COORDINATOR = 4  # v4+ looks up many keys at once
_CONTROLLER_PROBE_S = 2.0  # how long to try the controller before settling for any broker


# -- controller --------------------------------------------------------------------------


async def describe_cluster_response(
    core: AdminCore, connection: BrokerConnection, deadline: Deadline
) -> DescribeClusterResponse | None:
    """DescribeCluster's answer, or None if the broker does not have the API."""
    try:
        version = connection.version_for(DescribeClusterRequest)
    except UnsupportedVersionError:
        return None
    response: DescribeClusterResponse = await core.request(
        connection, DescribeClusterRequest(), deadline, version
    )
    return response


async def controller(core: AdminCore, deadline: Deadline) -> Target:
    """The controller's node id if it can be reached, else ``ANY`` broker.

    Kafka routes topic administration to the controller (KRaft brokers forward it there
    anyway); the id comes from DescribeCluster where the broker has it, else from Metadata.
    """
    if core.controller_id is None:
        core.controller_id = await _find_controller(core, deadline)
    node = core.controller_id
    if node < 0 or node not in core.cluster.metadata.brokers:
        return ANY
    try:
        await core.connect(node, _probe_deadline(deadline))
    except KayakError as exc:
        log.info("controller %d is unreachable (%s); using any broker", node, exc)
        return ANY
    return node


async def _find_controller(core: AdminCore, deadline: Deadline) -> int:
    connection = await core.connect(ANY, deadline)
    response = await describe_cluster_response(core, connection, deadline)
    if response is not None and not response.error_code:
        return response.controller_id
    return core.cluster.metadata.controller_id


def _probe_deadline(deadline: Deadline) -> Deadline:
    return Deadline(min(deadline.remaining(), _CONTROLLER_PROBE_S))


# -- group coordinators ------------------------------------------------------------------


async def coordinators(
    core: AdminCore, groups: list[str], deadline: Deadline
) -> dict[str, Target | KayakError]:
    """Each group's coordinator (FindCoordinator), from the cache where known."""
    routes: dict[str, Target | KayakError] = {
        g: core.coordinators[g] for g in groups if g in core.coordinators
    }
    unknown = [g for g in groups if g not in routes]
    if unknown:
        connection = await core.connect(ANY, deadline)
        found = await _find_coordinators(core, connection, unknown, deadline)
        for group, node in found.items():
            if not isinstance(node, KayakError) and node is not None:
                core.coordinators[group] = node
        routes.update(found)
    return routes


V = TypeVar("V")


async def at_coordinator(
    core: AdminCore,
    group: str,
    send: Callable[[BrokerConnection, Deadline], Awaitable[V]],
    deadline: Deadline,
    what: str,
) -> V:
    """``send`` to ``group``'s coordinator, found (and found again after a move) by
    FindCoordinator, retried like every coordinator request; its error is raised."""

    async def route(items: list[str]) -> dict[str, Target | KayakError]:
        return await coordinators(core, items, deadline)

    async def send_group(
        connection: BrokerConnection, items: list[str], deadline: Deadline
    ) -> dict[str, V]:
        return {group: await send(connection, deadline)}

    outcome: Outcome[str, V] = await core.run(
        [group], route=route, send=send_group, retry=COORDINATOR_RETRY, deadline=deadline,
        what=what,
    )  # fmt: skip
    result = outcome[group]
    if isinstance(result, KayakError):
        raise result
    return result


async def _find_coordinators(
    core: AdminCore, connection: BrokerConnection, groups: list[str], deadline: Deadline
) -> dict[str, Target | KayakError]:
    version = connection.version_for(FindCoordinatorRequest)
    if version >= _BATCHED_FIND_COORDINATOR:
        request = FindCoordinatorRequest(key_type=GROUP_KEY, coordinator_keys=groups)
        response: FindCoordinatorResponse = await core.request(
            connection, request, deadline, version
        )
        return {
            c.key: _coordinator_node(c.error_code, c.error_message, c.node_id, c.key)
            for c in response.coordinators
        }
    answers = await asyncio.gather(
        *(_find_one(core, connection, g, version, deadline) for g in groups)
    )
    return dict(zip(groups, answers, strict=True))


async def _find_one(
    core: AdminCore, connection: BrokerConnection, group: str, version: int, deadline: Deadline
) -> Target | KayakError:
    request = FindCoordinatorRequest(key=group, key_type=GROUP_KEY)
    response: FindCoordinatorResponse = await core.request(connection, request, deadline, version)
    return _coordinator_node(response.error_code, response.error_message, response.node_id, group)


def _coordinator_node(code: int, message: str | None, node: int, group: str) -> Target | KayakError:
    if code:
        return item_error(code, group, message)
    if node < 0:
        return item_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, group)
    return node


# -- partition leaders -------------------------------------------------------------------


async def leaders(
    core: AdminCore, partitions: list[TopicPartition], deadline: Deadline
) -> dict[TopicPartition, Target | KayakError]:
    """Each partition's leader from cached metadata, refreshed for topics it lacks."""
    cluster = core.cluster
    missing = {tp.topic for tp in partitions if _route_unknown(core, tp)}
    if missing:
        async with asyncio.timeout(max(deadline.remaining(), 0.001)):
            await cluster.refresh_metadata(sorted(missing))
    return {tp: _leader(core, tp) for tp in partitions}


def _route_unknown(core: AdminCore, tp: TopicPartition) -> bool:
    """True if cached metadata has no such partition (it may be new: refresh first)."""
    topic = core.cluster.metadata.topics.get(tp.topic)
    return topic is None or tp.partition not in topic.partitions


def _leader(core: AdminCore, tp: TopicPartition) -> Target | KayakError:
    topic = core.cluster.metadata.topics.get(tp.topic)
    if topic is None:
        return UnknownTopicOrPartitionError(f"{tp}: topic {tp.topic!r} does not exist")
    info = topic.partitions.get(tp.partition)
    if info is None:
        return UnknownTopicOrPartitionError(
            f"{tp}: topic {tp.topic!r} has {topic.partition_count} partition(s), "
            f"no partition {tp.partition}"
        )
    if info.leader < 0:
        return LeaderNotAvailableError(f"{tp}: the partition has no leader right now")
    return info.leader
