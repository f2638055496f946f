"""Refusals that keep web pages in a browser from changing state through the server.

A page on another site can make the browser send a cross-site POST without asking the server
first only when the body is a form, plain text or has no type at all (a CORS "simple"
request). Requiring a JSON media type on every body that changes state refuses all of those
(415); requiring that an ``Origin``, when a browser sends one, is the server's own refuses the
rest (403). No CORS headers are ever sent, so browsers never let other sites' scripts read
the answers either.
"""

from __future__ import annotations

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
