"""Pairs responses with the requests that asked for them (client side)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from kayak.errors import ProtocolError

_MAX_CORRELATION_ID = 2**31 - 1


class CorrelationError(ProtocolError):
    """A response carries a correlation id no request in flight is waiting for."""


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """What the decoder needs to know about a request whose response has not come yet."""

    correlation_id: int
    api_key: int
    api_version: int


class CorrelationTracker:
    """Hands out correlation ids and remembers which API and version each one was for.

    Kafka answers the requests of one connection in order, so a response for anything but
    the oldest request in flight means the stream is out of step and cannot be trusted.
    """

    def __init__(self) -> None:
        self._next_id = 0
        self._pending: OrderedDict[int, PendingRequest] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def register(self, api_key: int, api_version: int, expect_response: bool = True) -> int:
        """Take the next correlation id for a request; remember it if a response will come."""
        correlation_id = self._next_id
        self._next_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        if expect_response:
            self._pending[correlation_id] = PendingRequest(correlation_id, api_key, api_version)
        return correlation_id

    def match(self, correlation_id: int) -> PendingRequest:
        """The request a response answers; it is forgotten afterwards."""
        if not self._pending:
            raise CorrelationError(f"response {correlation_id} arrived with no request in flight")
        oldest = next(iter(self._pending))
        if correlation_id != oldest:
            raise CorrelationError(
                f"response {correlation_id} arrived while request {oldest} was the oldest pending"
            )
        return self._pending.pop(oldest)

    def pending(self) -> list[PendingRequest]:
        """Requests still waiting, oldest first (to fail them when the connection dies)."""
        return list(self._pending.values())
