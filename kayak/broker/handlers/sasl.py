"""SaslHandshake and SaslAuthenticate: the requests a SASL listener answers before login.

The exchange itself is :class:`~kayak.broker.security.authenticator.SaslAuthenticator`'s;
these handlers only turn its results into responses. One authenticator serves every
connection of a broker, so that failed logins are counted per client address broker-wide.
"""

from __future__ import annotations

from kayak.broker.context import BrokerContext, RequestContext
from kayak.broker.security.authenticator import SaslAuthenticator
from kayak.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kayak.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from kayak.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from kayak.protocol.messages.sasl_handshake_response import SaslHandshakeResponse


def authenticator_for(broker: BrokerContext) -> SaslAuthenticator:
    """The broker's authenticator (made here for a context built without one, as in tests)."""
    if broker.authenticator is None:
        broker.authenticator = SaslAuthenticator(broker.config)
    return broker.authenticator


async def handle_sasl_handshake(
    ctx: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    result = authenticator_for(ctx.broker).handshake(ctx.session, request.mechanism, ctx.version)
    return SaslHandshakeResponse(error_code=result.error_code, mechanisms=result.mechanisms)


async def handle_sasl_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    result = await authenticator_for(ctx.broker).authenticate(
        ctx.session, request.auth_bytes, ctx.version, ctx.broker.credentials
    )
    return SaslAuthenticateResponse(
        error_code=result.error_code,
        error_message=result.error_message,
        auth_bytes=result.auth_bytes,
        session_lifetime_ms=result.session_lifetime_ms,
    )
