"""The admin client's engine: route each item to a broker, send, retry what may succeed later.

Every admin call is a set of *items* (topics, groups, partitions, config resources, brokers).
``AdminCore.run`` routes each item to a *target* (a node id, or ``ANY`` broker), sends one
request per target, concurrently, and collects a result or an error per item. Items whose
error the call deems retriable (a moved coordinator, a leader election, a dropped connection)
are routed and sent again after a backoff, with fresh metadata, until they succeed, fail for
good, or the call's deadline (``default.api.timeout.ms``) passes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kayak.client.backoff import Deadline, ExponentialBackoff, backoff_from_config
from kayak.client.cluster import Cluster
from kayak.client.config import AdminConfig
from kayak.client.connection import BrokerConnection
from kayak.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    KayakError,
    NetworkError,
    UnknownServerError,
    error_for_code,
)
from kayak.protocol.message import Message

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ANY: Final = None
"""The target meaning "any broker will do"."""

Target = int | None
Outcome = dict[K, V | KayakError]
"""A result or an error per item."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which per-item errors are worth another attempt (transport failures always are)."""

    codes: frozenset[int]

    def __call__(self, error: KayakError) -> bool:
        if isinstance(error, KafkaTimeoutError | NetworkError):
            return True
        return isinstance(error, KafkaError) and error.code in self.codes


_E = ErrorCode
# Java's admin client retries NOT_CONTROLLER and throttling for topic administration only:
# anything else (the topic exists, a bad config) will not change by itself.
TOPIC_RETRY = RetryPolicy(frozenset({_E.NOT_CONTROLLER, _E.THROTTLING_QUOTA_EXCEEDED}))
COORDINATOR_RETRY = RetryPolicy(
    frozenset({
        _E.COORDINATOR_LOAD_IN_PROGRESS, _E.COORDINATOR_NOT_AVAILABLE, _E.NOT_COORDINATOR,
    })
)  # fmt: skip
LEADER_RETRY = RetryPolicy(
    frozenset({
        _E.NOT_LEADER_OR_FOLLOWER, _E.LEADER_NOT_AVAILABLE, _E.REPLICA_NOT_AVAILABLE,
        _E.FENCED_LEADER_EPOCH, _E.UNKNOWN_LEADER_EPOCH, _E.KAFKA_STORAGE_ERROR,
        _E.OFFSET_NOT_AVAILABLE, _E.REQUEST_TIMED_OUT, _E.NOT_ENOUGH_REPLICAS,
    })
)  # fmt: skip
BROKER_RETRY = RetryPolicy(frozenset())  # transport failures only

Router = Callable[[list[K]], Awaitable[Mapping[K, Target | KayakError]]]
Sender = Callable[[BrokerConnection, list[K], Deadline], Awaitable[Mapping[K, V | KayakError]]]


def item_error(code: int, label: str, message: str | None = None) -> KafkaError:
    """The exception for error ``code`` on one item, its message naming the item."""
    cls = error_for_code(code)
    text = message or cls.default_message
    # Some brokers (kayak's own) send str(exception) as the message: drop the repeated code.
    text = text.removeprefix(f"{cls.error_name} ({cls.code}): ")
    return cls(f"{label}: {text}")


def labelled(error: KayakError, label: str) -> KayakError:
    """``error`` with ``label`` in front of its message (unless it is there already)."""
    if isinstance(error, KafkaError):
        if error.message.startswith(f"{label}:"):
            return error
        renamed: KayakError = type(error)(f"{label}: {error.message}")
    elif isinstance(error, KafkaTimeoutError):
        if str(error).startswith(f"{label}:"):
            return error
        renamed = KafkaTimeoutError(f"{label}: {error}")
    else:
        return error
    renamed.__cause__ = error.__cause__
    return renamed


def settle(
    outcome: Mapping[K, V | KayakError],
    errors: dict[K, KayakError] | None,
    label: Callable[[K], str] = str,
) -> dict[K, V]:
    """Split ``outcome`` into results and errors.

    With ``errors`` given, failed items go there and the successful ones are returned.
    Without it, the first failed item's error is raised (naming the others that failed too).
    """
    results: dict[K, V] = {}
    failed: dict[K, KayakError] = {}
    for item, value in outcome.items():
        if isinstance(value, KayakError):
            failed[item] = labelled(value, label(item))
        else:
            results[item] = value
    if errors is not None:
        errors.update(failed)
        return results
    if failed:
        raise _first_failure(failed, label)
    return results


def _first_failure(failed: Mapping[K, KayakError], label: Callable[[K], str]) -> KayakError:
    first, *others = failed
    error = failed[first]
    if not others:
        return error
    also = ", ".join(label(item) for item in others[:5]) + (", ..." if len(others) > 5 else "")
    note = f" (also failed: {also}; pass errors={{}} to collect every item's error)"
    for item in others:
        log.info("%s", failed[item])
    if isinstance(error, KafkaError):
        combined: KayakError = type(error)(error.message + note)
    elif isinstance(error, KafkaTimeoutError):
        combined = KafkaTimeoutError(f"{error}{note}")
    else:
        return error
    combined.__cause__ = error.__cause__
    return combined


class AdminCore:
    """Connections, deadlines, routing caches and the retry loop shared by admin calls."""

    def __init__(self, config: AdminConfig, cluster: Cluster) -> None:
        self.config = config
        self.cluster = cluster
        self._backoff: ExponentialBackoff = backoff_from_config(config)
        self.coordinators: dict[str, int] = {}
        self.controller_id: int | None = None

    # -- deadlines and requests -----------------------------------------------------------

    def deadline(self, timeout_ms: int | None) -> Deadline:
        """The deadline of one admin call: ``timeout_ms`` or ``default.api.timeout.ms``."""
        return Deadline.from_ms(
            self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        )

    def request_timeout(self, deadline: Deadline) -> float:
        """Seconds to wait for one response: ``request.timeout.ms``, within the deadline."""
        return max(min(self.config.request_timeout_ms / 1000, deadline.remaining()), 0.001)

    async def request(
        self,
        connection: BrokerConnection,
        message: Message,
        deadline: Deadline,
        version: int | None = None,
    ) -> Any:
        """Send ``message`` on ``connection`` and return its response, within the deadline."""
        return await connection.request(message, version, timeout=self.request_timeout(deadline))

    async def connect(self, target: Target, deadline: Deadline) -> BrokerConnection:
        """A connection to ``target`` (``ANY``: any broker), within the deadline."""
        opening = (
            self.cluster.any_connection() if target is ANY else self.cluster.connection(target)
        )
        try:
            async with asyncio.timeout(max(deadline.remaining(), 0.001)):
                return await opening
        except TimeoutError:
            where = "any broker" if target is ANY else f"broker {target}"
            raise KafkaTimeoutError(f"could not connect to {where} in time") from None

    # -- the retry loop -------------------------------------------------------------------

    async def single(
        self,
        send: Callable[[BrokerConnection, Deadline], Awaitable[V]],
        deadline: Deadline,
        what: str,
        *,
        target: Target = ANY,
        retry: Callable[[KayakError], bool] = BROKER_RETRY,
        label: str | None = None,
    ) -> V:
        """One request to ``target`` (any broker by default), retried; raises its error,
        its message starting with ``label`` (default: ``what``)."""
        key = label or what

        async def route(items: list[str]) -> dict[str, Target]:
            return dict.fromkeys(items, target)

        async def send_one(
            connection: BrokerConnection, items: list[str], deadline: Deadline
        ) -> dict[str, V]:
            return {key: await send(connection, deadline)}

        outcome: Outcome[str, V] = await self.run(
            [key], route=route, send=send_one, retry=retry, deadline=deadline, what=what
        )
        value = outcome[key]
        if isinstance(value, KayakError):
            raise value
        return value

    async def run(
        self,
        items: Iterable[K],
        *,
        route: Router[K],
        send: Sender[K, V],
        retry: Callable[[KayakError], bool],
        deadline: Deadline,
        what: str,
        label: Callable[[K], str] = str,
    ) -> Outcome[K, V]:
        """Route, send and retry ``items`` until each has a final result or error."""
        ordered = pending = list(dict.fromkeys(items))
        outcome: Outcome[K, V] = {}
        attempt = 0
        while pending:
            round_outcome = await self._attempt(pending, route, send, deadline, label)
            retried = [k for k in pending if _should_retry(round_outcome[k], retry)]
            outcome.update(round_outcome)
            if not retried:
                break
            if deadline.expired:
                for item in retried:
                    outcome[item] = _gave_up(what, label(item), outcome[item], attempt)
                break
            if attempt >= self.config.retries:
                break  # the last errors stand
            log.debug("%s: retrying %d item(s), e.g. %s", what, len(retried), outcome[retried[0]])
            await self._before_retry(attempt, deadline)
            attempt += 1
            pending = retried
        return {item: outcome[item] for item in ordered}

    async def _attempt(
        self,
        items: list[K],
        route: Router[K],
        send: Sender[K, V],
        deadline: Deadline,
        label: Callable[[K], str],
    ) -> Outcome[K, V]:
        outcome: Outcome[K, V] = {}
        try:
            targets: Mapping[K, Target | KayakError] = await route(items)
        except KayakError as exc:
            targets = dict.fromkeys(items, exc)
        except TimeoutError:
            targets = dict.fromkeys(items, KafkaTimeoutError("finding where to send it timed out"))
        by_target: dict[Target, list[K]] = {}
        for item in items:
            target = targets.get(item, KafkaTimeoutError(f"{label(item)}: no route"))
            if isinstance(target, KayakError):
                outcome[item] = labelled(target, label(item))
            else:
                by_target.setdefault(target, []).append(item)
        rounds = await asyncio.gather(
            *(self._send_to(t, batch, send, deadline, label) for t, batch in by_target.items())
        )
        for answer in rounds:
            outcome.update(answer)
        return outcome

    async def _send_to(
        self,
        target: Target,
        items: list[K],
        send: Sender[K, V],
        deadline: Deadline,
        label: Callable[[K], str],
    ) -> Outcome[K, V]:
        try:
            connection = await self.connect(target, deadline)
            answer = await send(connection, items, deadline)
        except KayakError as exc:
            return {item: labelled(exc, label(item)) for item in items}
        except TimeoutError:
            timed_out = KafkaTimeoutError("the request timed out")
            return {item: labelled(timed_out, label(item)) for item in items}
        missing = UnknownServerError("the broker's response did not mention it")
        return {item: answer.get(item, labelled(missing, label(item))) for item in items}

    async def pause(self, attempt: int, deadline: Deadline) -> None:
        """Sleep the retry backoff of ``attempt`` (counted from 0), within the deadline."""
        await asyncio.sleep(min(self._backoff.delay(attempt), deadline.remaining()))

    async def _before_retry(self, attempt: int, deadline: Deadline) -> None:
        """Wait the backoff, then forget what may have moved and fetch fresh metadata."""
        await self.pause(attempt, deadline)
        self.coordinators.clear()
        self.controller_id = None
        try:
            async with asyncio.timeout(deadline.remaining() or 0.001):
                await self.cluster.refresh_metadata()
        except (KayakError, TimeoutError) as exc:
            log.debug("metadata refresh before retry failed: %s", exc)


def _should_retry(value: object, retry: Callable[[KayakError], bool]) -> bool:
    return isinstance(value, KayakError) and retry(value)


def _gave_up(what: str, label: str, last: object, attempt: int) -> KayakError:
    error = KafkaTimeoutError(
        f"{label}: {what} did not succeed in time after {attempt + 1} attempt(s); last error: "
        f"{last}"
    )
    if isinstance(last, BaseException):
        error.__cause__ = last
    return error


def group_by(items: Collection[K], key: Callable[[K], str]) -> dict[str, list[K]]:
    """Items grouped by ``key``, in first-seen order (topic -> its partitions, say)."""
    grouped: dict[str, list[K]] = {}
    for item in items:
        grouped.setdefault(key(item), []).append(item)
    return grouped
