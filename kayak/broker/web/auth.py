"""HTTP basic authentication against the broker's SASL users, and the write role.

Every authenticated user may read (GET, HEAD); methods that change state need a writer. The
password check runs in a worker thread: checking a SCRAM credential is thousands of hash
rounds, and the event loop also serves the broker's Kafka connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from aiohttp import BasicAuth, web
from aiohttp.typedefs import Handler, Middleware

from kayak.broker.security.principal import Principal
from kayak.broker.web.errors import JSON_CONTENT_TYPE, error_response
from kayak.broker.web.guards import STATE_CHANGING_METHODS

log = logging.getLogger(__name__)

UNAUTHORIZED_ERROR_CODE = 401  # what Confluent's registry answers for missing credentials
FORBIDDEN_ERROR_CODE = 40301  # Confluent's code for a user denied an operation


class PasswordVerifier(Protocol):
    """What authentication needs of the broker's credential store."""

    def verify_password(self, user: str, password: str) -> bool: ...


def basic_auth(
    verifier: PasswordVerifier | None,
    *,
    may_write: Callable[[Principal], bool],
    realm: str = "kayak",
    failed_delay_s: float = 0.0,
    error_content_type: str = JSON_CONTENT_TYPE,
) -> Middleware:
    """401 unless the request carries ``Authorization: Basic`` for a user ``verifier`` knows;
    then 403 for a state-changing method unless ``may_write`` the user.

    A wrong password is answered after ``failed_delay_s`` (Kafka's
    connection.failed.authentication.delay.ms), which slows down guessing. Without a
    ``verifier`` nobody can authenticate.
    """
    challenge = {"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'}

    def refuse(message: str) -> web.Response:
        return error_response(
            401, message, error_code=UNAUTHORIZED_ERROR_CODE, headers=challenge,
            content_type=error_content_type,
        )  # fmt: skip

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if header is None:
            return refuse("Unauthorized: HTTP basic authentication is required")
        try:
            credentials = BasicAuth.decode(header, encoding="utf-8")
        except ValueError:
            return refuse("Unauthorized: malformed basic authentication header")
        user, password = credentials.login, credentials.password
        if (
            verifier is None
            or not user
            or not await asyncio.to_thread(verifier.verify_password, user, password)
        ):
            log.warning(
                "web: authentication failed for user %r from %s", user[:100], request.remote
            )
            if failed_delay_s > 0:
                await asyncio.sleep(failed_delay_s)
            return refuse("Unauthorized: wrong user name or password")
        principal = Principal.user(user)
        if request.method in STATE_CHANGING_METHODS and not may_write(principal):
            log.info("web: %s may not %s %s (read only)", principal, request.method, request.path)
            return error_response(
                403,
                f"Forbidden: {principal} may read but not {request.method} (not a writer)",
                error_code=FORBIDDEN_ERROR_CODE,
                content_type=error_content_type,
            )
        return await handler(request)

    return middleware


def writer_check(
    writers: tuple[str, ...], super_users: tuple[str, ...]
) -> Callable[[Principal], bool]:
    """Whether a principal may write: named in ``writers`` (``alice`` or ``User:alice``) or
    in ``super_users`` (``User:alice``)."""
    allowed = frozenset(w if ":" in w else f"User:{w}" for w in writers) | frozenset(super_users)

    def is_writer(principal: Principal) -> bool:
        return str(principal) in allowed

    return is_writer
