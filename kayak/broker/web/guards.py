"""Refusals that keep web pages in a browser from changing state through the server.

A page on another site can make the browser send a cross-site POST without asking the server
first only when the body is a form, plain text or has no type at all (a CORS "simple"
request). Requiring a JSON media type on every body that changes state refuses all of those
(415); requiring that an ``Origin``, when a browser sends one, is the server's own refuses the
rest (403). No CORS headers are ever sent, so browsers never let other sites' scripts read
the answers either. When no password is asked for, a ``Host`` that is not one of the
server's own names is refused (421), so a page cannot reach a loopback server through DNS
rebinding either.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Collection

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from kayak.broker.web.errors import JSON_CONTENT_TYPE, error_response

log = logging.getLogger(__name__)

STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
METHODS_WITH_BODIES = frozenset({"POST", "PUT", "PATCH"})


def same_origin_writes(error_content_type: str = JSON_CONTENT_TYPE) -> Middleware:
    """403 for a state-changing request whose ``Origin`` is not this server's own origin.

    Requests without ``Origin`` (every non-browser client) pass. The server's origin is the
    scheme it serves and the ``Host`` the request was sent to, which is how a browser spells
    the origin of a page served from here.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if request.method in STATE_CHANGING_METHODS and origin is not None:
            own = f"{request.scheme}://{request.host}".lower()
            if origin.lower() != own:
                log.warning(
                    "web: refused %s %s from %s with Origin %r (cross-site)",
                    request.method, request.path, request.remote, origin[:200],
                )  # fmt: skip
                return error_response(
                    403,
                    f"cross-origin {request.method} refused: Origin {origin[:200]!r} is not "
                    f"{own!r}",
                    content_type=error_content_type,
                )
        return await handler(request)

    return middleware


def json_bodies_only(
    media_types: Collection[str], error_content_type: str = JSON_CONTENT_TYPE
) -> Middleware:
    """415 for a POST, PUT or PATCH whose Content-Type is missing or not in ``media_types``
    (parameters such as ``charset`` are ignored)."""
    accepted = frozenset(t.lower() for t in media_types)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in METHODS_WITH_BODIES:
            # aiohttp reports a missing Content-Type as application/octet-stream.
            sent = request.content_type if "Content-Type" in request.headers else None
            if sent not in accepted:
                return error_response(
                    415,
                    f"Content-Type {sent or '(none)'!s} is not supported; send one of "
                    f"{', '.join(sorted(accepted))}",
                    content_type=error_content_type,
                )
        return await handler(request)

    return middleware


# Names that always mean this machine (RFC 6761: *.localhost never leaves it).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def request_host_name(host_header: str) -> str:
    """The host of a ``Host`` header, without port or IPv6 brackets, lower case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def is_own_host(host: str, names: Collection[str]) -> bool:
    """Whether ``host`` (from :func:`request_host_name`) is one of the server's own names: an
    IP address literal (a rebinding attack needs a name the attacker's DNS resolves), a
    loopback name, or one of ``names``."""
    if host in names or host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def own_hosts_only(
    names: Collection[str],
    error_content_type: str = JSON_CONTENT_TYPE,
    *,
    allow_option: str = "--schema-registry-allowed-hosts",
) -> Middleware:
    """421 for a request whose ``Host`` is not one of the server's own names (DNS rebinding:
    a page on ``evil.example`` whose name now resolves to this server is refused, since the
    browser sends ``Host: evil.example``). A request without ``Host`` (HTTP/1.0) passes: a
    browser always sends one. ``allow_option`` is the option the refusal says to use."""
    own = frozenset(name.strip().lower().rstrip(".") for name in names)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        sent = request.headers.get("Host")
        if sent is not None and not is_own_host(request_host_name(sent), own):
            log.warning(
                "web: refused %s %s from %s for Host %r (not a name of this server)",
                request.method, request.path, request.remote, sent[:200],
            )  # fmt: skip
            return error_response(
                421,
                f"Host {sent[:200]!r} is not a name of this server; a server reached under "
                f"another name must list it in {allow_option}",
                content_type=error_content_type,
            )
        return await handler(request)

    return middleware
