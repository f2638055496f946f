"""HTTP basic authentication against the broker's SASL users, and the write role.

Every authenticated user may read (GET, HEAD); methods that change state need a writer. The
password check runs in a worker thread: checking a SCRAM credential is thousands of hash
rounds, and the event loop also serves the broker's Kafka connections.

Password checks are rate limited per client address by the broker's
:class:`~kayak.broker.security.login_limiter.LoginLimiter`, the one SASL logins use (429 with
``Retry-After`` when an address's line is full), and a successful check is remembered for
a short while (:class:`VerifiedPasswords`) so that a client's every request does not cost a
PBKDF2 run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from aiohttp import BasicAuth, web
from aiohttp.typedefs import Handler, Middleware

from kayak.broker.security.login_limiter import LoginLimiter
from kayak.broker.security.principal import Principal
from kayak.broker.web.errors import JSON_CONTENT_TYPE, error_response
from kayak.broker.web.guards import STATE_CHANGING_METHODS

log = logging.getLogger(__name__)

UNAUTHORIZED_ERROR_CODE = 401  # what Confluent's registry answers for missing credentials
FORBIDDEN_ERROR_CODE = 40301  # Confluent's code for a user denied an operation
TOO_MANY_REQUESTS_ERROR_CODE = 429
VERIFIED_TTL_S = 60.0
VERIFIED_MAX_ENTRIES = 1024


class PasswordVerifier(Protocol):
    """What authentication needs of the broker's credential store."""

    def verify_password(self, user: str, password: str) -> bool: ...


class VerifiedPasswords:
    """Recently verified (user, SHA-256 of the password) pairs: at most ``max_entries``, each
    for ``ttl_s`` seconds, all forgotten when ``version()`` (of the credential store) changes.

    Only a digest is kept, never the password. Looking a pair up is cheap, so it is done only
    after the login limiter has admitted the address: otherwise it would be a fast oracle for
    guessing a password that was recently used.
    """

    def __init__(
        self,
        ttl_s: float = VERIFIED_TTL_S,
        max_entries: int = VERIFIED_MAX_ENTRIES,
        *,
        version: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._version = version
        self._seen_version: object = None
        self._clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, user: str, password: str) -> bool:
        """Whether ``password`` was verified as ``user``'s within the last ``ttl_s``."""
        self._check_version()
        entry = self._entries.get(user)
        if entry is None:
            return False
        digest, expires = entry
        if expires <= self._clock():
            del self._entries[user]
            return False
        return hmac.compare_digest(digest, _digest(password))

    def add(self, user: str, password: str) -> None:
        """Remember that ``password`` is ``user``'s."""
        self._check_version()
        self._entries[user] = (_digest(password), self._clock() + self.ttl_s)
        self._entries.move_to_end(user)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def _check_version(self) -> None:
        version = self._version()
        if version != self._seen_version:
            self._entries.clear()
            self._seen_version = version


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()


def basic_auth(
    verifier: PasswordVerifier | None,
    *,
    may_write: Callable[[Principal], bool],
    realm: str = "kayak",
    failed_delay_s: float = 0.0,
    error_content_type: str = JSON_CONTENT_TYPE,
    limiter: LoginLimiter | None = None,
    verified: VerifiedPasswords | None = None,
) -> Middleware:
    """401 unless the request carries ``Authorization: Basic`` for a user ``verifier`` knows;
    then 403 for a state-changing method unless ``may_write`` the user.

    Password checks from one address are limited by ``limiter`` (the broker's, shared with
    SASL; a limiter of its own when not given): 429 with ``Retry-After`` when the address's
    line for a check is full. A wrong password is answered after ``failed_delay_s`` (Kafka's
    connection.failed.authentication.delay.ms) plus the limiter's delay. Passwords
    verified lately are remembered in ``verified``. Without a ``verifier`` nobody can
    authenticate.
    """
    challenge = {"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'}
    limiter = limiter or LoginLimiter()
    verified = verified or VerifiedPasswords()

    def too_many(address: str) -> web.Response:
        wait = max(1, math.ceil(limiter.retry_after(address)))
        log.warning("web: too many failed logins from %s; refused for %ds", address, wait)
        return error_response(
            429, f"Too many failed logins; retry in {wait}s",
            error_code=TOO_MANY_REQUESTS_ERROR_CODE, headers={"Retry-After": str(wait)},
            content_type=error_content_type,
        )  # fmt: skip

    async def check(address: str, user: str, password: str) -> bool | None:
        """Whether the password is right; None when ``address`` may not try now."""
        if not limiter.allows(address):
            return None
        if verified.contains(user, password):
            return True
        attempt = await limiter.acquire(address)
        if attempt is None:
            return None
        assert verifier is not None
        try:
            right = await asyncio.to_thread(verifier.verify_password, user, password)
        except BaseException:
            attempt.failed()
            raise
        if right:
            attempt.succeeded()
            verified.add(user, password)
        else:
            # Answered when the limiter releases the address's slot, like a SASL failure.
            held_s = attempt.failed(user[:256])
            if held_s > 0:
                await asyncio.sleep(held_s)
        return right

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
        address = request.remote or "?"
        right = False
        if verifier is not None and user:
            right_or_limited = await check(address, user, password)
            if right_or_limited is None:
                return too_many(address)
            right = right_or_limited
        if not right:
            log.warning("web: authentication failed for user %r from %s", user[:100], address)
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
