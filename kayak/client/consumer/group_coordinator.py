"""The part of a group member that finds and talks to its group's coordinator.

The coordinator gets a connection of its own, never the one fetches use: a fetch held for
``fetch.max.wait.ms`` must not delay a heartbeat or a commit queued behind it. A step sent to
it (a commit, an offset fetch) is retried through coordinator moves until its timeout
(``_retrying``). The error sets and the retry signal here are shared by the rest of the
member (:mod:`.group_commits`, :mod:`.group`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard, TypeVar

from kayak.client.backoff import ExponentialBackoff
from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.connection import BrokerConnection
from kayak.client.consumer.errors import CommitFailedError
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.security.errors import is_authentication_error
from kayak.client.statistics import ConnectionCounters
from kayak.errors import (
    ErrorClass,
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    KayakError,
    error_for_code,
)
from kayak.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from kayak.protocol.messages.find_coordinator_response import FindCoordinatorResponse

log = logging.getLogger(__name__)

__all__ = [
    "COORDINATOR_MOVED",
    "MEMBERSHIP_GONE",
    "GroupCoordinator",
    "MemberState",
    "Retry",
    "is_fatal",
]

_FIND_COORDINATOR_MAX = 4

COORDINATOR_MOVED = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT}
)
MEMBERSHIP_GONE = frozenset(
    {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}
)
T = TypeVar("T")


def is_fatal(exc: BaseException) -> TypeGuard[KayakError]:
    """Not worth retrying: a fatal Kafka error, or refused credentials or certificates."""
    fatal_code = isinstance(exc, KafkaError) and exc.error_class is ErrorClass.FATAL
    return fatal_code or is_authentication_error(exc)


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    CLOSED = "closed"


class Retry(KayakError):
    """A step of the group protocol must start over (after a backoff)."""


class GroupCoordinator:
    """The coordinator connection of a group member (``GroupMember`` sets the state)."""

    group_id: str
    member_id: str
    generation: int
    state: MemberState
    coordinator_counters: ConnectionCounters
    _cluster: Cluster
    _subscriptions: SubscriptionState
    _config: ConsumerConfig
    _backoff: ExponentialBackoff
    _coordinator: BrokerConnection | None
    _finding: asyncio.Future[BrokerConnection] | None
    _closing: set[asyncio.Future[None]]
    _rejoin: asyncio.Event
    _stable: asyncio.Event
    _lost: bool

    def request_rejoin(self, reason: str) -> None:
        if self.state is MemberState.CLOSED:
            return
        if not self._rejoin.is_set():
            log.info("group %s: rejoining (%s)", self.group_id, reason)
        self._rejoin.set()
        self._stable.clear()

    # -- the coordinator ------------------------------------------------------------------

    @property
    def coordinator_connection(self) -> BrokerConnection | None:
        """The connection to the coordinator now, if any (for the statistics)."""
        return self._coordinator

    async def coordinator(self) -> BrokerConnection:
        """The connection to the group's coordinator, found (and opened) if need be."""
        if self._coordinator is not None and self._coordinator.usable:
            return self._coordinator
        if self._finding is None or self._finding.done():
            self._finding = asyncio.ensure_future(self._find_coordinator())
        return await asyncio.shield(self._finding)

    async def _find_coordinator(self) -> BrokerConnection:
        attempt = 0
        while True:
            try:
                return await self._find_coordinator_once()
            except Retry as exc:
                log.debug("group %s: %s", self.group_id, exc)
            except (KayakError, OSError) as exc:
                if is_fatal(exc):
                    raise
                log.debug("group %s: finding the coordinator: %s", self.group_id, exc)
            await asyncio.sleep(self._backoff.delay(min(attempt, 10)))
            attempt += 1

    async def _find_coordinator_once(self) -> BrokerConnection:
        connection = await self._cluster.any_connection()
        version = connection.version_for(FindCoordinatorRequest, _FIND_COORDINATOR_MAX)
        if version >= 4:
            request = FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group_id])
        else:
            request = FindCoordinatorRequest(key=self.group_id, key_type=0)
        response: FindCoordinatorResponse = await connection.request(request, version)
        if version >= 4:
            if not response.coordinators:
                raise Retry("FindCoordinator answered no coordinator")
            found: Any = response.coordinators[0]
        else:
            found = response
        if found.error_code:
            error = error_for_code(found.error_code)
            if error.error_class is ErrorClass.FATAL:
                raise error(f"finding the coordinator of group {self.group_id}")
            raise Retry(f"FindCoordinator: {error.error_name}")
        coordinator = BrokerConnection(
            found.host,
            found.port,
            node_id=found.node_id,
            client_id=self._config.client_id,
            request_timeout_ms=self._config.request_timeout_ms,
            security=self._cluster.security,
            counters=self.coordinator_counters,
        )
        await coordinator.connect(self._config.socket_connection_setup_timeout_ms / 1000)
        log.debug("group %s: coordinator is broker %d", self.group_id, found.node_id)
        self._coordinator = coordinator
        return coordinator

    def _coordinator_lost(self) -> None:
        if self._coordinator is not None:
            old, self._coordinator = self._coordinator, None
            closing = asyncio.ensure_future(old.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _retrying(self, step: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                async with asyncio.timeout(max(remaining, 0.001)):
                    return await step()
            except TimeoutError:
                raise KafkaTimeoutError(
                    f"group {self.group_id}: {what} did not complete in {timeout:g}s"
                ) from None
            except Retry as exc:
                log.debug("group %s: %s; retrying", self.group_id, exc)
            except (KayakError, OSError) as exc:
                if is_fatal(exc):
                    raise
                if isinstance(exc, CommitFailedError):
                    raise
                log.debug("group %s: %s failed (%s); retrying", self.group_id, what, exc)
                self._coordinator_lost()
            delay = self._backoff.delay(min(attempt, 10))
            if time.monotonic() + delay >= deadline:
                raise KafkaTimeoutError(
                    f"group {self.group_id}: {what} did not complete in {timeout:g}s"
                )
            await asyncio.sleep(delay)
            attempt += 1
