"""The broker's side of SASL: SaslHandshake, then one or more SaslAuthenticate, per connection.

Mechanisms: PLAIN and SCRAM-SHA-256/512 against the :class:`CredentialStore`, and
OAUTHBEARER with Kafka's *unsecured* token validator when ``sasl_oauthbearer_unsecured`` is
set (``sub`` is the principal, ``exp`` is enforced; a development aid, it proves nothing).

Only SaslHandshake v1 is served: v0 meant that the SASL tokens followed without Kafka
framing, which no current client (librdkafka, the Java client, kafka-python, aiokafka) sends
to a broker that advertises SaslAuthenticate.

A failed login is answered SASL_AUTHENTICATION_FAILED after
``connection_failed_authentication_delay_ms``, or later when the client address or the user
name has failed too often (:mod:`~kayak.broker.security.login_limiter`), and the connection
is closed after that answer. The step that checks the credentials (PLAIN's and OAUTHBEARER's
only one, SCRAM's proof) runs under one of the address's limiter slots, waiting in line for
one if need be; a correct password is always checked and accepted, whatever other clients of
the address got wrong. Only a login that finds the line full, or waits too long, is refused
unchecked, with "retry in Ns" in its error message (clients may retry then).
A successful login sets the session's principal and, when ``connections_max_reauth_ms`` or a
token's expiry bounds it, its lifetime (KIP-368); the client re-authenticates on the same
connection, as the same principal, before it runs out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from kayak.broker.config import BrokerConfig
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.login_limiter import LoginAttempt, LoginLimiter
from kayak.broker.security.principal import Principal
from kayak.broker.security.session import ConnectionSession
from kayak.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from kayak.protocol.sasl import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramServer,
    decode_oauthbearer,
    decode_plain,
    unsecured_claims,
)

log = logging.getLogger(__name__)

NONE = 0
ILLEGAL_SASL_STATE = IllegalSaslStateError.code
SASL_AUTHENTICATION_FAILED = SaslAuthenticationFailedError.code
UNSUPPORTED_SASL_MECHANISM = UnsupportedSaslMechanismError.code
UNSUPPORTED_VERSION = UnsupportedVersionError.code
INT64_MAX = 2**63 - 1  # session_lifetime_ms is an int64 on the wire


@dataclass(eq=False)
class SaslExchange:
    """One connection's SASL exchange between its handshake and its last SaslAuthenticate."""

    mechanism: str
    reauthentication: bool
    scram: ScramServer | None = None
    steps: int = 0  # SaslAuthenticate requests received so far
    user: str = "?"  # as the client named itself, for the log
    attempt: LoginAttempt | None = None  # the limiter's slot, held by the checking step


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    error_code: int
    mechanisms: list[str]


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    error_code: int = NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0


@dataclass(frozen=True, slots=True)
class _Step:
    """What one mechanism step produced: bytes for the client, and the principal once done."""

    challenge: bytes
    principal: Principal | None = None
    token_lifetime_ms: int | None = None


class SaslAuthenticator:
    """SASL for every connection of one broker; holds the failed-login limiter."""

    def __init__(self, config: BrokerConfig, limiter: LoginLimiter | None = None) -> None:
        self.config = config
        self.limiter = limiter or limiter_for(config)
        self.mechanisms = enabled_mechanisms(config)

    # -- SaslHandshake --------------------------------------------------------------------

    def handshake(
        self, session: ConnectionSession | None, mechanism: str, version: int
    ) -> HandshakeResult:
        """Choose ``mechanism`` for the exchange that follows, or say why not."""
        enabled = list(self.mechanisms)
        if session is None or not session.protocol.uses_sasl:
            return HandshakeResult(ILLEGAL_SASL_STATE, enabled)
        if version < 1:
            self._refuse(session, "SaslHandshake v0 (unframed SASL tokens) is not supported")
            return HandshakeResult(UNSUPPORTED_VERSION, enabled)
        if session.sasl is not None:
            self._refuse(session, "SaslHandshake in the middle of a SASL exchange")
            return HandshakeResult(ILLEGAL_SASL_STATE, enabled)
        if mechanism not in self.mechanisms:
            self._refuse(session, f"SASL mechanism {mechanism!r} is not enabled")
            return HandshakeResult(UNSUPPORTED_SASL_MECHANISM, enabled)
        if session.authenticated and session.mechanism != mechanism:
            self._refuse(session, f"re-authentication with {mechanism}, not {session.mechanism}")
            return HandshakeResult(ILLEGAL_SASL_STATE, enabled)
        session.sasl = SaslExchange(mechanism, reauthentication=session.authenticated)
        return HandshakeResult(NONE, enabled)

    def _refuse(self, session: ConnectionSession, why: str) -> None:
        log.warning("SASL refused for %s: %s; closing", session.client_host, why)
        session.sasl = None
        session.close_after_response = True

    # -- SaslAuthenticate -----------------------------------------------------------------

    async def authenticate(
        self,
        session: ConnectionSession | None,
        auth_bytes: bytes,
        version: int,
        credentials: CredentialStore | None,
    ) -> AuthenticateResult:
        """Run one step of the exchange the handshake started."""
        if session is None or not session.protocol.uses_sasl:
            return AuthenticateResult(ILLEGAL_SASL_STATE, "this listener does not use SASL")
        exchange = session.sasl
        if not isinstance(exchange, SaslExchange):
            message = (
                "SaslAuthenticate after successful authentication"
                if session.authenticated
                else "SaslAuthenticate before SaslHandshake"
            )
            if not session.authenticated:
                self._refuse(session, message)
            return AuthenticateResult(ILLEGAL_SASL_STATE, message)
        host = session.client_host
        # Counted before any await: a request pipelined behind this one is a step further.
        index = exchange.steps
        exchange.steps += 1
        try:
            checking = index >= _checking_step(exchange.mechanism)
            # Credentials are checked only under a limiter slot; a step pipelined behind the
            # checking one (still waiting for its slot) is refused.
            if exchange.attempt is None and checking:
                if index > _checking_step(exchange.mechanism):
                    raise SaslAuthenticationFailedError("SASL step before the first was admitted")
                exchange.attempt = await self.limiter.acquire(host)
                if exchange.attempt is None:
                    wait = max(1, math.ceil(self.limiter.retry_after(host)))
                    raise SaslAuthenticationFailedError(
                        f"too many login attempts in progress from {host}; retry in {wait}s"
                    )
            try:
                step = await self._step(exchange, index, bytes(auth_bytes), credentials)
            except SaslAuthenticationFailedError:
                raise
            except BaseException:
                if exchange.attempt is not None:
                    exchange.attempt.abandoned()  # cancelled (connection closed) or a bug
                raise
            if step.principal is None:
                return AuthenticateResult(auth_bytes=step.challenge)
            if exchange.reauthentication and step.principal != session.principal:
                raise SaslAuthenticationFailedError(
                    f"re-authentication as {step.principal} on a connection of {session.principal}"
                )
        except SaslAuthenticationFailedError as exc:
            return await self._failed(session, exchange, exc)
        lifetime_ms = self._session_lifetime_ms(step.token_lifetime_ms)
        self._succeeded(session, exchange, step.principal, lifetime_ms)
        return AuthenticateResult(
            auth_bytes=step.challenge, session_lifetime_ms=lifetime_ms if version >= 1 else 0
        )

    async def _step(
        self,
        exchange: SaslExchange,
        index: int,
        data: bytes,
        credentials: CredentialStore | None,
    ) -> _Step:
        mechanism = exchange.mechanism
        if mechanism in SCRAM_MECHANISMS:
            return self._scram_step(exchange, index, data, credentials)
        if index:
            raise SaslAuthenticationFailedError(f"{mechanism} takes a single message")
        if mechanism == "PLAIN":
            return await _plain(exchange, data, credentials)
        if mechanism == "OAUTHBEARER":
            return _oauthbearer(exchange, data)
        raise SaslAuthenticationFailedError(f"SASL mechanism {mechanism!r} is not served")

    def _scram_step(
        self,
        exchange: SaslExchange,
        index: int,
        data: bytes,
        credentials: CredentialStore | None,
    ) -> _Step:
        if index == 0:
            mechanism = exchange.mechanism

            def lookup(user: str) -> ScramCredential | None:
                exchange.user = user
                return None if credentials is None else credentials.scram(user, mechanism)

            # A fresh server nonce per exchange: a client-final recorded from an earlier
            # exchange cannot match this one.
            exchange.scram = ScramServer(mechanism, lookup)
            return _Step(exchange.scram.server_first(data))
        if index != 1 or exchange.scram is None:
            raise SaslAuthenticationFailedError("SCRAM exchange has no third step")
        final = exchange.scram.server_final(data)
        return _Step(final, Principal.user(exchange.scram.username))

    def _session_lifetime_ms(self, token_lifetime_ms: int | None) -> int:
        bounds = [ms for ms in (self.config.connections_max_reauth_ms, token_lifetime_ms) if ms]
        return min(max(min(bounds), 1), INT64_MAX) if bounds else 0

    def _succeeded(
        self,
        session: ConnectionSession,
        exchange: SaslExchange,
        principal: Principal,
        lifetime_ms: int,
    ) -> None:
        if exchange.attempt is not None:
            exchange.attempt.succeeded()
        session.sasl = None
        session.principal = principal
        session.authenticated = True
        session.mechanism = exchange.mechanism
        # Enforced whatever the request version: a v0 client cannot re-authenticate, so its
        # connection is closed at expiry and it reconnects (KIP-368).
        session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
        log.info(
            "SASL %s %s as %s from %s%s",
            exchange.mechanism,
            "re-authentication" if exchange.reauthentication else "authentication",
            principal,
            session.client_host,
            f" (session lifetime {lifetime_ms} ms)" if lifetime_ms else "",
        )

    async def _failed(
        self,
        session: ConnectionSession,
        exchange: SaslExchange,
        exc: SaslAuthenticationFailedError,
    ) -> AuthenticateResult:
        # A failure's answer is held back as the limiter says (repeated failures from the
        # address or for the user), never less than Kafka's fixed delay.
        delay_s = self.config.connection_failed_authentication_delay_ms / 1000
        if exchange.attempt is not None:
            delay_s = max(delay_s, exchange.attempt.failed(_user_or_none(exchange.user)))
        session.sasl = None
        session.close_after_response = True
        message = str(exc.args[0]) if exc.args else "SASL authentication failed"
        log.warning(
            "SASL %s %s failed for user %r from %s: %s",
            exchange.mechanism,
            "re-authentication" if exchange.reauthentication else "authentication",
            exchange.user,
            session.client_host,
            message,
        )
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        return AuthenticateResult(SASL_AUTHENTICATION_FAILED, message)


def limiter_for(config: BrokerConfig) -> LoginLimiter:
    """The failed-login limiter ``config`` describes."""
    return LoginLimiter(
        config.login_failures_burst,
        config.login_failures_per_second,
        max_in_flight=config.login_max_in_flight_per_ip,
    )


def _checking_step(mechanism: str) -> int:
    """The index of the SaslAuthenticate step that checks the credentials: SCRAM's proof
    (its first message only names the user), the one message of the others."""
    return 1 if mechanism in SCRAM_MECHANISMS else 0


def _user_or_none(user: str) -> str | None:
    return None if user == "?" else user[:256]


def enabled_mechanisms(config: BrokerConfig) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``, without OAUTHBEARER unless its unsecured validator is on
    (kayak has no other way to check a token)."""
    mechanisms = tuple(
        m
        for m in config.sasl_enabled_mechanisms
        if m != "OAUTHBEARER" or config.sasl_oauthbearer_unsecured
    )
    if len(mechanisms) < len(config.sasl_enabled_mechanisms):
        log.warning(
            "OAUTHBEARER is not offered: kayak validates only unsecured tokens, and "
            "sasl.oauthbearer.unsecured is off"
        )
    return mechanisms


async def _plain(exchange: SaslExchange, data: bytes, credentials: CredentialStore | None) -> _Step:
    plain = decode_plain(data)
    exchange.user = plain.username
    # PBKDF2 takes milliseconds: not on the event loop.
    if credentials is None or not await asyncio.to_thread(
        credentials.verify_password, plain.username, plain.password
    ):
        raise SaslAuthenticationFailedError(
            f"authentication failed for {plain.username!r} with PLAIN: bad credentials"
        )
    return _Step(b"", Principal.user(plain.username))


def _oauthbearer(exchange: SaslExchange, data: bytes) -> _Step:
    """Kafka's unsecured validator: ``alg: none``, a ``sub``, an ``exp`` in the future."""
    request = decode_oauthbearer(data)
    claims = unsecured_claims(request.token)
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject.strip():
        raise SaslAuthenticationFailedError("OAUTHBEARER token has no 'sub' claim")
    exchange.user = subject
    now_ms = time.time() * 1000
    expires = claims.get("exp")
    if not _finite_number(expires):
        raise SaslAuthenticationFailedError("OAUTHBEARER token has no numeric 'exp' claim")
    assert isinstance(expires, int | float)
    if expires * 1000 <= now_ms:
        raise SaslAuthenticationFailedError(f"OAUTHBEARER token of {subject!r} has expired")
    issued = claims.get("iat")
    if issued is not None and not _finite_number(issued):
        raise SaslAuthenticationFailedError("OAUTHBEARER token's 'iat' is not a number")
    if isinstance(issued, int | float) and issued * 1000 > now_ms:
        raise SaslAuthenticationFailedError("OAUTHBEARER token's 'iat' is in the future")
    if request.authzid is not None and request.authzid != subject:
        raise SaslAuthenticationFailedError(
            f"OAUTHBEARER authorization id {request.authzid!r} is not the token's subject"
        )
    # Capped before int(): a huge exp must not overflow the int64 session lifetime.
    # (int(now_ms): a huge integer exp stays exact instead of overflowing a float.)
    lifetime_ms = min(expires * 1000 - int(now_ms), INT64_MAX)
    return _Step(b"", Principal.user(subject), int(lifetime_ms))


def _finite_number(value: object) -> bool:
    """A JSON number a claim may hold: not a bool, and not NaN or ±Infinity (which Python's
    json module accepts)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
