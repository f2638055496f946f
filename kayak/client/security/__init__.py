"""The client side of Kafka's security: TLS (``tls``) and SASL (``sasl``).

``config`` checks the ``security.protocol``, ``ssl.*`` and ``sasl.*`` properties and puts
them together into a :class:`SecurityConfig`; ``channel`` turns that into what each broker
connection needs (:class:`ConnectionSecurity`: an ``ssl.SSLContext`` built once, and the SASL
credentials); ``sasl`` runs SaslHandshake and SaslAuthenticate on a connection, and again
before the session the broker granted expires (KIP-368).
"""

from __future__ import annotations

from kayak.client.security.config import (
    JaasConfig,
    SaslSettings,
    Secret,
    SecurityConfig,
    TlsSettings,
    parse_jaas_config,
    security_config,
)
from kayak.client.security.errors import SslAuthenticationError, is_authentication_error

__all__ = [
    "JaasConfig",
    "SaslSettings",
    "Secret",
    "SecurityConfig",
    "SslAuthenticationError",
    "TlsSettings",
    "is_authentication_error",
    "parse_jaas_config",
    "security_config",
]
