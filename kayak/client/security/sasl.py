"""SASL authentication of a client connection: SaslHandshake, then SaslAuthenticate rounds.

The mechanisms' messages come from the sans-I/O :mod:`kayak.protocol.sasl`; this module
only moves them over a connection and turns failures into exceptions naming the broker and
the mechanism. SCRAM's checks (the server's nonce extends ours, the server's signature proves
it knows the credential) are the ``ScramClient``'s; a failed check fails the connection.

``authenticate`` returns the session lifetime the broker granted (SaslAuthenticate v1+,
KIP-368; 0 when none): the connection re-authenticates before it runs out.

A refusal that says when to retry ("... retry in 2s": a broker that did not check the
credentials because too many logins from our address are in line) raises
:class:`SaslLoginThrottledError`, which the connection retries within its timeout; any other
refusal (a wrong password) is final.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Mapping
from typing import Any, Protocol

from kayak.client.security.config import SaslSettings
from kayak.errors import (
    IllegalSaslStateError,
    KayakError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
    error_for_code,
)
from kayak.protocol import Message
from kayak.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from kayak.protocol.sasl import ScramClient, encode_oauthbearer, encode_plain, unsecured_token

__all__ = ["SaslChannel", "SaslLoginThrottledError", "authenticate", "fetch_token"]

log = logging.getLogger(__name__)

_HANDSHAKE_VERSION = 1  # v1: the mechanism's messages travel in SaslAuthenticate requests
_UNSECURED_LIFETIME_MS = 3_600_000  # Kafka's unsecured login default
# How a broker that refused to check a login for now says when to try again.
_RETRY_IN = re.compile(r"\bretry in (\d{1,6}(?:\.\d{1,3})?) ?s\b")


class SaslLoginThrottledError(SaslAuthenticationFailedError):
    """The broker did not check the credentials this time (too many logins from this address
    in line) and said when to try again: ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SaslChannel(Protocol):
    """What authentication needs of a connection (``BrokerConnection`` is one)."""

    host: str
    port: int

    def version_for(self, cls: type[Message], highest: int | None = None) -> int: ...

    async def authentication_request(self, message: Message, version: int) -> Any:
        """Send ``message`` at once (ahead of requests held during re-authentication) and
        return its response."""
        ...


class _Mechanism(Protocol):
    def first(self) -> bytes: ...

    def next(self, challenge: bytes) -> bytes | None:
        """The answer to the broker's ``challenge``; None when the exchange is complete."""
        ...


class _Plain:
    def __init__(self, username: str, password: str) -> None:
        self._message = encode_plain(username, password)

    def first(self) -> bytes:
        return self._message

    def next(self, challenge: bytes) -> bytes | None:
        return None


class _Scram:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._client = ScramClient(mechanism, username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._client.first_message()

    def next(self, challenge: bytes) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return self._client.final_message(bytes(challenge))
        if self._step == 2:
            self._client.check_server_final(bytes(challenge))
            return None
        raise IllegalSaslStateError("the broker sent more SCRAM messages than the exchange has")


class _OAuthBearer:
    def __init__(self, token: str, extensions: Mapping[str, str]) -> None:
        self._message = encode_oauthbearer(token, extensions=dict(extensions) or None)

    def first(self) -> bytes:
        return self._message

    def next(self, challenge: bytes) -> bytes | None:
        return None


async def fetch_token(settings: SaslSettings) -> tuple[str, dict[str, str]]:
    """An OAUTHBEARER token (and extensions): from ``oauth_cb``, or an unsecured one.

    Raises ``SaslAuthenticationFailedError`` when the callback fails or returns something
    that is not ``(token, expiry[, principal, extensions])``.
    """
    extensions = dict(settings.extensions)
    callback = settings.token_callback
    if callback is None:
        assert settings.unsecured_subject is not None
        return unsecured_token(settings.unsecured_subject, _UNSECURED_LIFETIME_MS), extensions
    try:
        result = callback(settings.oauthbearer_config) if _takes_argument(callback) else callback()
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        raise SaslAuthenticationFailedError(
            f"the OAUTHBEARER token callback (oauth_cb) failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(result, tuple | list) or len(result) not in (2, 4):
        raise SaslAuthenticationFailedError(
            "the OAUTHBEARER token callback (oauth_cb) must return (token, expiry) or "
            f"(token, expiry, principal, extensions), not a {type(result).__name__}"
        )
    token = result[0]
    if not isinstance(token, str) or not token:
        raise SaslAuthenticationFailedError("oauth_cb returned no token (an empty string?)")
    if len(result) == 4 and isinstance(result[3], Mapping):
        extensions.update({str(k): str(v) for k, v in result[3].items()})
    return token, extensions


def _takes_argument(callback: Any) -> bool:
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin without a signature: call it as confluent-kafka does
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters
    )


async def _mechanism(settings: SaslSettings) -> _Mechanism:
    if settings.mechanism == "OAUTHBEARER":
        token, extensions = await fetch_token(settings)
        return _OAuthBearer(token, extensions)
    assert settings.username is not None and settings.password is not None
    if settings.mechanism == "PLAIN":
        return _Plain(settings.username, settings.password.reveal())
    return _Scram(settings.mechanism, settings.username, settings.password.reveal())


async def authenticate(channel: SaslChannel, settings: SaslSettings) -> int:
    """Authenticate ``channel`` with ``settings``; the session lifetime granted, in ms (0: no
    limit). Raises ``SaslAuthenticationFailedError`` (bad credentials, a SCRAM server that
    does not prove it knows them), ``UnsupportedSaslMechanismError``, or
    ``UnsupportedVersionError`` for a broker without SaslAuthenticate (before Kafka 1.0)."""
    broker = f"{channel.host}:{channel.port}"
    mechanism = settings.mechanism
    try:
        auth_version = channel.version_for(SaslAuthenticateRequest)
        channel.version_for(SaslHandshakeRequest, _HANDSHAKE_VERSION)
    except UnsupportedVersionError:
        raise UnsupportedVersionError(
            f"broker {broker} does not offer SaslHandshake v1 and SaslAuthenticate (Kafka 1.0+): "
            "is it a SASL listener? check security.protocol"
        ) from None
    handshake = await channel.authentication_request(
        SaslHandshakeRequest(mechanism=mechanism), _HANDSHAKE_VERSION
    )
    if handshake.error_code:
        raise _handshake_error(handshake.error_code, broker, mechanism, handshake.mechanisms)
    exchange = await _mechanism(settings)
    who = f" as {settings.username!r}" if settings.username else ""
    message: bytes | None = exchange.first()
    lifetime_ms = 0
    try:
        while message is not None:
            response = await channel.authentication_request(
                SaslAuthenticateRequest(auth_bytes=message), auth_version
            )
            if response.error_code:
                raise _refusal(response.error_code, response.error_message, broker, mechanism, who)
            lifetime_ms = response.session_lifetime_ms
            message = exchange.next(response.auth_bytes)
    except SaslAuthenticationFailedError as exc:
        if str(broker) in exc.message:
            raise
        raise SaslAuthenticationFailedError(
            f"{mechanism} authentication{who} with broker {broker} failed: {exc.message}"
        ) from exc
    log.debug(
        "authenticated with broker %s by %s%s (session %d ms)", broker, mechanism, who, lifetime_ms
    )
    return max(lifetime_ms, 0)


def _refusal(
    code: int, error_message: str | None, broker: str, mechanism: str, who: str
) -> KayakError:
    cls = error_for_code(code)
    detail = error_message or cls.default_message
    message = f"broker {broker} refused {mechanism} authentication{who}: {detail}"
    retry_in = _RETRY_IN.search(detail) if cls is SaslAuthenticationFailedError else None
    if retry_in is not None:
        return SaslLoginThrottledError(message, float(retry_in.group(1)))
    return cls(message)


def _handshake_error(code: int, broker: str, mechanism: str, enabled: list[str]) -> KayakError:
    if code == UnsupportedSaslMechanismError.code:
        offered = ", ".join(enabled) or "none"
        return UnsupportedSaslMechanismError(
            f"broker {broker} does not enable SASL mechanism {mechanism} (it enables: "
            f"{offered}); set sasl.mechanism to one of those"
        )
    cls = error_for_code(code)
    return cls(
        f"SaslHandshake with broker {broker} for {mechanism}: {cls.default_message} Is that "
        "port a SASL listener? (check security.protocol)"
    )
