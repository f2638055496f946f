"""SASL mechanisms Kafka uses, as sans-I/O message builders and checkers.

Both ends are here: the client builds and checks what the broker sends, the broker checks
and answers what the client sends. Nothing here touches a socket; the bytes travel inside
SaslAuthenticate requests and responses.
"""

from kayak.protocol.sasl.oauthbearer import (
    OAuthBearerRequest,
    decode_oauthbearer,
    encode_oauthbearer,
    unsecured_claims,
    unsecured_token,
)
from kayak.protocol.sasl.plain import PlainCredentials, decode_plain, encode_plain
from kayak.protocol.sasl.scram import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramServer,
    password_matches,
    scram_credential,
)

__all__ = [
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "OAuthBearerRequest",
    "PlainCredentials",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "decode_oauthbearer",
    "decode_plain",
    "encode_oauthbearer",
    "encode_plain",
    "password_matches",
    "scram_credential",
    "unsecured_claims",
    "unsecured_token",
]
