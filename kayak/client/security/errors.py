"""Authentication failures a client must not retry: the user has to change something."""

from __future__ import annotations

from typing import TypeGuard

from kayak.errors import (
    IllegalSaslStateError,
    KayakError,
    SaslAuthenticationFailedError,
    SslAuthenticationError,
    UnsupportedSaslMechanismError,
)

__all__ = ["SslAuthenticationError", "is_authentication_error"]


_AUTHENTICATION_ERRORS = (
    SslAuthenticationError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


def is_authentication_error(error: BaseException) -> TypeGuard[KayakError]:
    """Whether ``error`` says the client cannot authenticate (TLS or SASL): retrying with the
    same configuration cannot help, so clients raise it at once."""
    return isinstance(error, _AUTHENTICATION_ERRORS)
