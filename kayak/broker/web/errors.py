"""Errors as JSON documents: ``{"error_code": ..., "message": ...}``, Confluent's shape.

Everything the web layer refuses (401, 403, 404, 405, 413, 415, ...) and every handler bug (500)
answers in this one shape, so a client of any endpoint parses errors one way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
INTERNAL_ERROR_CODE = 50000  # Confluent's code for an unexpected server error

# What an error answer keeps of the headers aiohttp put on its own refusal.
_KEPT_HEADERS = ("Allow", "WWW-Authenticate")


def error_document(status: int, message: str, error_code: int | None = None) -> dict[str, object]:
    """The error body: ``error_code`` defaults to the HTTP status (as Confluent does)."""
    return {"error_code": error_code or status, "message": message}


def error_response(
    status: int,
    message: str,
    *,
    error_code: int | None = None,
    headers: Mapping[str, str] | None = None,
    content_type: str = JSON_CONTENT_TYPE,
) -> web.Response:
    """An error answer; handlers and middlewares return it (no exception needed)."""
    return web.Response(
        status=status,
        headers=dict(headers or {}),
        body=json.dumps(
            error_document(status, message, error_code), separators=(",", ":")
        ).encode(),
        content_type=content_type,
    )


def json_errors(content_type: str = JSON_CONTENT_TYPE) -> Middleware:
    """The outermost middleware: aiohttp's own refusals (404, 405, 413 raised as exceptions)
    and unexpected exceptions become error documents."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ConnectionError:
            raise  # the client went away: nobody to answer, nothing to report
        except web.HTTPException as exc:
            if exc.status < 400:
                raise  # redirects are answers, not errors
            return error_response(
                exc.status, _message_of(exc), headers=_kept_headers(exc), content_type=content_type
            )
        except Exception:  # one failing request must not take the server down
            log.exception("web: %s %s failed", request.method, request.path)
            return error_response(
                500, "internal server error", error_code=INTERNAL_ERROR_CODE,
                content_type=content_type,
            )  # fmt: skip

    return middleware


def _message_of(exc: web.HTTPException) -> str:
    if exc.status == 413 and exc.text:  # aiohttp names the limit and the size: worth keeping
        return exc.text
    try:
        return f"HTTP {exc.status} {HTTPStatus(exc.status).phrase}"
    except ValueError:
        return f"HTTP {exc.status}"


def _kept_headers(exc: web.HTTPException) -> dict[str, str]:
    kept = {name: exc.headers[name] for name in _KEPT_HEADERS if name in exc.headers}
    if "Allow" in kept:  # aiohttp writes "GET,HEAD"; RFC 9110 and Confluent write "GET, HEAD"
        kept["Allow"] = ", ".join(sorted(m.strip() for m in kept["Allow"].split(",") if m))
    return kept
