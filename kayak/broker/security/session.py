"""One connection's security state: its listener, who it is, whether it may send requests yet."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kayak.broker.security.listeners import Listener, SecurityProtocol
from kayak.broker.security.principal import ANONYMOUS, Principal

# Before SASL authentication completes, a SASL listener answers only these:
# ApiVersions (18), SaslHandshake (17), SaslAuthenticate (36).
PRE_AUTHENTICATION_APIS = frozenset({17, 18, 36})


@dataclass(eq=False)
class ConnectionSession:
    """Security state of one client connection, shared by its requests.

    ``principal`` is ``User:ANONYMOUS`` on PLAINTEXT, the certificate's subject on SSL with a
    client certificate, and the SASL user once SASL authentication succeeded.
    ``close_after_response`` asks the connection to close once the current response is
    written (a failed authentication). ``expires_at`` (``time.monotonic()``) is when a SASL
    session must have re-authenticated (KIP-368); None: never.
    """

    listener: Listener
    client_host: str
    principal: Principal = ANONYMOUS
    authenticated: bool = False
    expires_at: float | None = None
    close_after_response: bool = False
    # The SASL exchange in progress (the authenticator's own state object).
    sasl: Any = field(default=None, repr=False)
    # The SASL mechanism the session authenticated with; a re-authentication must use it.
    mechanism: str | None = None

    def __post_init__(self) -> None:
        if not self.listener.protocol.uses_sasl:
            self.authenticated = True

    @property
    def protocol(self) -> SecurityProtocol:
        return self.listener.protocol

    def admits(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may run now on this connection."""
        return self.authenticated or api_key in PRE_AUTHENTICATION_APIS

    def expired(self, now: float | None = None) -> bool:
        """Whether the SASL session outlived its lifetime without re-authenticating."""
        if self.expires_at is None:
            return False
        return (time.monotonic() if now is None else now) >= self.expires_at
