"""What a sans-I/O connection hands out after it has been fed bytes."""

from __future__ import annotations

from dataclasses import dataclass

from kayak.protocol.message import Message
from kayak.protocol.messages.request_header import RequestHeader


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A whole request arrived (server side)."""

    header: RequestHeader
    request: Message

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


@dataclass(frozen=True, slots=True)
class UnsupportedRequest:
    """A request whose API key or version this side cannot decode (server side).

    The header's first fields are always readable, so the server can still answer
    UNSUPPORTED_VERSION with the right correlation id instead of dropping the connection.
    """

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """A whole response arrived and was paired with its request (client side).

    ``api_version`` is the version the body was decoded at: the request's, except for an
    ApiVersions request the broker answered at v0 because it did not know our version.
    """

    correlation_id: int
    api_key: int
    api_version: int
    response: Message


Event = RequestReceived | UnsupportedRequest | ResponseReceived
