"""What every connection of one client needs to be secured, built once per client."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from kayak.client.security.config import SaslSettings, SecurityConfig
from kayak.client.security.tls import client_ssl_context

__all__ = ["ConnectionSecurity"]


@dataclass(frozen=True)
class ConnectionSecurity:
    """The TLS context (None: plaintext) and SASL settings (None: no SASL) of a client's
    connections. One per client, shared by its connections, so certificates and keys are
    read once."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None

    @classmethod
    def from_config(cls, config: SecurityConfig) -> ConnectionSecurity:
        """Build from a client's ``SecurityConfig``; ``ConfigError`` when a certificate, key
        or CA file cannot be loaded."""
        context = client_ssl_context(config.tls) if config.tls is not None else None
        return cls(config.protocol, context, config.sasl)


PLAINTEXT = ConnectionSecurity()
"""No TLS, no SASL."""
