"""The broker's HTTP host: aiohttp's web server on the broker's own event loop.

One :class:`WebServer` per port. The schema registry's routes are on it today; more endpoints
(metrics, a web console) join it with :meth:`WebServer.add_routes` or
:meth:`WebServer.add_subapp` before :meth:`WebServer.start`. Request parsing, keep-alive and
the limits in :class:`WebLimits` are aiohttp's; nothing here parses HTTP.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from kayak.broker.web.errors import JSON_CONTENT_TYPE, error_response, json_errors

log = logging.getLogger(__name__)
# aiohttp reports each malformed request here; see _OneLineProtocolErrors.
_protocol_log = logging.getLogger("kayak.broker.web.protocol")


@dataclass(frozen=True, slots=True)
class WebLimits:
    """What one request or connection may take; aiohttp enforces every one of them."""

    max_body_bytes: int = 16 * 1024 * 1024  # larger bodies: 413
    max_line_bytes: int = 8190  # the request line (400 beyond it)
    max_field_bytes: int = 8190  # one header field (400 beyond it)
    max_headers: int = 100  # header fields in one request (400 beyond it)
    # A connection with no request in flight (including one that never finished sending its
    # first request) is closed after this.
    keepalive_timeout_s: float = 75.0
    # After answering a request whose body was not read (a refusal), read and discard the
    # rest for at most this long before closing, so the client sees the answer, not a reset.
    lingering_time_s: float = 2.0
    shutdown_timeout_s: float = 5.0  # requests in flight get this long to finish at stop


class WebServer:
    """Serves an :class:`aiohttp.web.Application` on ``host:port`` (0: an ephemeral port).

    ``middlewares`` run for every route, after the one that turns errors into JSON error
    documents (``error_content_type`` is their Content-Type). With ``ssl_context``, HTTPS.
    """

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        limits: WebLimits | None = None,
        middlewares: Sequence[Middleware] = (),
        error_content_type: str = JSON_CONTENT_TYPE,
    ) -> None:
        self.limits = limits or WebLimits()
        self._error_content_type = error_content_type
        self.app = web.Application(
            middlewares=[
                json_errors(error_content_type),
                _body_limit(self.limits.max_body_bytes, error_content_type),
                *middlewares,
            ],
            client_max_size=self.limits.max_body_bytes,
        )
        self._requested = (host, port)
        self._ssl_context = ssl_context
        self._runner: web.AppRunner | None = None
        self.host = host
        self.port = port

    @property
    def scheme(self) -> str:
        return "https" if self._ssl_context is not None else "http"

    @property
    def url(self) -> str:
        """``http(s)://host:port``; the actual port once started."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Routes at the root of the server (before :meth:`start`).

        A request announcing a body over the limit with ``Expect: 100-continue`` is refused
        (413) before the client is told to send it.
        """
        expect = _expect_within(self.limits.max_body_bytes, self._error_content_type)
        self.app.add_routes(
            web.RouteDef(
                route.method, route.path, route.handler, {"expect_handler": expect, **route.kwargs}
            )
            if isinstance(route, web.RouteDef)
            else route
            for route in routes
        )

    def add_subapp(self, prefix: str, app: web.Application) -> None:
        """An application of its own under ``prefix`` (e.g. ``/metrics``), before start."""
        self.app.add_subapp(prefix, app)

    async def start(self) -> None:
        limits = self.limits
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,  # one line per request is noise in the broker's log
            logger=_protocol_log,
            shutdown_timeout=limits.shutdown_timeout_s,
            keepalive_timeout=limits.keepalive_timeout_s,
            lingering_time=limits.lingering_time_s,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_field_bytes,
            max_headers=limits.max_headers,
        )
        await runner.setup()
        host, port = self._requested
        site = web.TCPSite(
            runner, host, port, ssl_context=self._ssl_context, backlog=1024, reuse_address=True
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self.host, self.port = str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def _too_large(length: int, limit: int, content_type: str) -> web.Response:
    response = error_response(
        413, f"request body of {length} bytes exceeds the limit of {limit}",
        content_type=content_type,
    )  # fmt: skip
    response.force_close()  # the body is not read: this connection is done
    return response


def _body_limit(limit: int, content_type: str) -> Middleware:
    """413 from the announced Content-Length, before any of the body is read (aiohttp's own
    limit applies while reading, e.g. to chunked bodies)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > limit:
            return _too_large(length, limit, content_type)
        return await handler(request)

    return middleware


def _expect_within(
    limit: int, content_type: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """An ``Expect: 100-continue`` handler that refuses an over-limit body up front."""

    async def expect_handler(request: web.Request) -> web.StreamResponse | None:
        length = request.content_length
        if length is not None and length > limit:
            return _too_large(length, limit, content_type)
        if request.version == HttpVersion11:
            expect = request.headers.get("Expect", "")
            if expect.lower() != "100-continue":
                return error_response(417, f"unknown Expect: {expect[:100]}",
                                      content_type=content_type)  # fmt: skip
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the real answer is still to come
        return None

    return expect_handler


class _OneLineProtocolErrors(logging.Filter):
    """aiohttp logs every malformed request (a scanner, a client speaking TLS to a plain
    port) as an ERROR with a traceback; that is one INFO line about the client instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            detail = (error.message or type(error).__name__).strip().splitlines()[0]
            record.msg, record.args = "%s: %d %s", (record.getMessage(), error.code, detail)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_protocol_log.addFilter(_OneLineProtocolErrors())
