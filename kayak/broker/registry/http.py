"""A small asyncio HTTP/1.1 server: keep-alive, Content-Length bodies, hard limits.

Enough HTTP for a REST API and nothing more: one request at a time per connection (pipelined
requests queue in the socket), ``Expect: 100-continue``, HEAD. Whatever does not fit —
oversized heads or bodies, chunked bodies, malformed request lines, a client that sends its
request too slowly — gets an HTTP error and the connection is closed; the handler never sees
it. A handler that raises gets a 500, and the server carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 16 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0  # to receive one whole request once its first byte arrived
IDLE_TIMEOUT_S = 120.0  # a kept-alive connection with no request in flight
MAX_CONNECTIONS = 1024  # beyond this, new connections are closed at once
JSON_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. ``segments`` is the path split at ``/`` and percent-decoded."""

    method: str
    target: str
    segments: list[str]
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    http_version: str = "HTTP/1.1"

    def flag(self, name: str) -> bool:
        """A boolean query parameter (``?deleted=true``)."""
        values = self.query.get(name)
        return values is not None and values[-1].lower() == "true"


@dataclass(slots=True)
class HttpResponse:
    """What a handler answers: a status and a JSON document (or raw bytes)."""

    status: int
    document: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.document, separators=(",", ":")).encode()


def error_response(status: int, message: str, error_code: int | None = None) -> HttpResponse:
    """An error in Confluent's shape: ``{"error_code": ..., "message": ...}``."""
    return HttpResponse(status, {"error_code": error_code or status, "message": message})


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _Refused(Exception):
    """The request cannot be served: answer ``response`` and close the connection."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0: an ephemeral one, see :attr:`port`)."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self._handler = handler
        self._host = host
        self._requested_port = port
        self.max_body_bytes = max_body_bytes
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.host = host
        self.port = port

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, self._host, self._requested_port,
            limit=MAX_HEAD_BYTES, reuse_address=True,
        )  # fmt: skip
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._server = None

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= MAX_CONNECTIONS:
            log.warning("schema registry: refusing a connection, %d are open", MAX_CONNECTIONS)
            writer.close()
            return
        self._connections.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should close."""
        try:
            first = await asyncio.wait_for(reader.read(1), self.idle_timeout_s)
        except TimeoutError:
            return False
        if not first:
            return False
        try:
            request = await asyncio.wait_for(
                self._read_request(first, reader, writer), self.request_timeout_s
            )
        except TimeoutError:
            await self._send(writer, error_response(408, "request not received in time"), False)
            return False
        except _Refused as refused:
            await self._send(writer, refused.response, False)
            return False
        keep_alive = _wants_keep_alive(request)
        try:
            response = await self._handler(request)
        except Exception:  # one bad request must not take the server down
            log.exception("schema registry: %s %s failed", request.method, request.target)
            response = error_response(500, "internal server error", 50000)
        await self._send(writer, response, keep_alive, head_only=request.method == "HEAD")
        return keep_alive

    async def _read_request(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> HttpRequest:
        try:
            head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _Refused(error_response(431, "request head too large")) from None
        except asyncio.IncompleteReadError:
            raise ConnectionResetError("client closed mid-request") from None
        try:
            lines = head[:-4].decode("iso-8859-1").split("\r\n")
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _Refused(error_response(400, "malformed request line")) from None
        if not version.startswith("HTTP/1.") or not method.isalpha():
            raise _Refused(error_response(400, "malformed request line"))
        if len(lines) - 1 > MAX_HEADERS:
            raise _Refused(error_response(431, "too many header fields"))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise _Refused(error_response(400, f"malformed header field {line[:80]!r}"))
            headers[name.lower()] = value.strip()
        body = await self._read_body(headers, reader, writer)
        parts = urlsplit(target)
        segments = [unquote(s) for s in parts.path.split("/") if s]
        query = parse_qs(parts.query, keep_blank_values=True)
        return HttpRequest(method.upper(), target, segments, query, headers, body, version)

    async def _read_body(
        self, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes:
        if "transfer-encoding" in headers:
            raise _Refused(error_response(411, "chunked bodies are not supported; send a "
                                               "Content-Length"))  # fmt: skip
        raw_length = headers.get("content-length", "0")
        if not raw_length.isdigit():
            raise _Refused(error_response(400, f"bad Content-Length {raw_length[:40]!r}"))
        length = int(raw_length)
        if length > self.max_body_bytes:
            raise _Refused(error_response(
                413, f"request body of {length} bytes exceeds the limit of {self.max_body_bytes}"
            ))  # fmt: skip
        if length and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not length:
            return b""
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise ConnectionResetError("client closed mid-body") from None

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter,
        response: HttpResponse,
        keep_alive: bool,
        head_only: bool = False,
    ) -> None:
        body = response.body()
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = "Unknown"
        headers = {
            "Content-Type": JSON_CONTENT_TYPE,
            "Content-Length": str(len(body)),
            "Connection": "keep-alive" if keep_alive else "close",
            **response.headers,
        }
        head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers.items()
        )
        writer.write(head.encode("iso-8859-1") + b"\r\n" + (b"" if head_only else body))
        with contextlib.suppress(ConnectionError):
            await writer.drain()


def _wants_keep_alive(request: HttpRequest) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.http_version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection
