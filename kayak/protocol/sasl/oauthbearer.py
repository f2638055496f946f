"""SASL OAUTHBEARER (RFC 7628) messages, and Kafka's unsecured (unsigned) tokens.

The client's initial response carries a bearer token and optional key/value extensions.
How a token is checked is the broker's business; kayak's broker accepts only Kafka's
*unsecured* tokens (a JWT with ``"alg": "none"``), and only when told to: they prove nothing
and exist for development and tests.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kayak.errors import SaslAuthenticationFailedError

_SEP = "\x01"
_KEY = re.compile(r"^[A-Za-z]+$")
_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")


@dataclass(frozen=True, slots=True)
class OAuthBearerRequest:
    """What an OAUTHBEARER client sent."""

    token: str = field(repr=False)
    authzid: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)


def encode_oauthbearer(
    token: str, authzid: str | None = None, extensions: Mapping[str, str] | None = None
) -> bytes:
    """The client's initial response: ``n,a=authzid,^Aauth=Bearer TOKEN^A[k=v^A]*^A``."""
    extensions = extensions or {}
    for key, value in extensions.items():
        if key == "auth" or not _KEY.match(key) or not _VALUE.match(value):
            raise ValueError(f"invalid OAUTHBEARER extension {key!r}")
    header = f"n,a={authzid}," if authzid else "n,,"
    parts = [f"auth=Bearer {token}", *(f"{k}={v}" for k, v in extensions.items())]
    return (header + _SEP + _SEP.join(parts) + _SEP + _SEP).encode()


def decode_oauthbearer(data: bytes) -> OAuthBearerRequest:
    """Parse a client's initial response; ``SaslAuthenticationFailedError`` when malformed."""
    try:
        text = bytes(data).decode()
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError("OAUTHBEARER message is not UTF-8") from None
    header, sep, rest = text.partition(_SEP)
    if not sep or not rest.endswith(_SEP + _SEP):
        raise SaslAuthenticationFailedError("OAUTHBEARER message is not framed by ^A")
    gs2 = header.split(",")
    if len(gs2) != 3 or gs2[0] != "n" or gs2[2] != "" or not (gs2[1] == "" or gs2[1][:2] == "a="):
        raise SaslAuthenticationFailedError("OAUTHBEARER GS2 header must be 'n,,' or 'n,a=ID,'")
    authzid = gs2[1][2:] or None
    values: dict[str, str] = {}
    for part in rest[:-2].split(_SEP):
        key, eq, value = part.partition("=")
        if not eq or key in values:
            raise SaslAuthenticationFailedError(f"malformed OAUTHBEARER key/value {part[:40]!r}")
        values[key] = value
    auth = values.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise SaslAuthenticationFailedError("OAUTHBEARER message has no 'auth=Bearer TOKEN'")
    return OAuthBearerRequest(token.strip(), authzid, values)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def unsecured_token(
    principal: str,
    lifetime_ms: int = 3_600_000,
    *,
    now_ms: int | None = None,
    scope: str | None = None,
) -> str:
    """An unsigned JWT (``alg: none``) for ``principal``, as Kafka's unsecured login makes."""
    issued = int(time.time() * 1000) if now_ms is None else now_ms
    claims: dict[str, Any] = {
        "sub": principal,
        "iat": issued / 1000,
        "exp": (issued + lifetime_ms) / 1000,
    }
    if scope:
        claims["scope"] = scope
    header = _b64url(json.dumps({"alg": "none"}).encode())
    return f"{header}.{_b64url(json.dumps(claims).encode())}."


def unsecured_claims(token: str) -> dict[str, Any]:
    """The claims of an unsecured JWT; ``SaslAuthenticationFailedError`` if it is not one.

    Checks structure and ``alg: none`` only; the caller checks ``sub`` and ``exp``.
    """
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise SaslAuthenticationFailedError("OAUTHBEARER token is not an unsecured JWT")
    try:
        header = json.loads(_unb64url(parts[0]))
        claims = json.loads(_unb64url(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise SaslAuthenticationFailedError("OAUTHBEARER token is not base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "none":
        raise SaslAuthenticationFailedError("OAUTHBEARER token must have alg 'none' (unsecured)")
    if not isinstance(claims, dict):
        raise SaslAuthenticationFailedError("OAUTHBEARER token claims are not an object")
    return claims
