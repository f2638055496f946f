"""SASL mechanisms, both halves: RFC 7677's published exchange, and every way it can fail."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from kayak.errors import SaslAuthenticationFailedError
from kayak.protocol.sasl import (
    ScramClient,
    ScramCredential,
    ScramServer,
    decode_oauthbearer,
    decode_plain,
    encode_oauthbearer,
    encode_plain,
    password_matches,
    scram_credential,
    unsecured_claims,
    unsecured_token,
)

# RFC 7677, section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _users(mechanism: str, **passwords: str) -> Callable[[str], ScramCredential | None]:
    credentials = {name: scram_credential(mechanism, pw) for name, pw in passwords.items()}
    return credentials.get


def test_rfc7677_client_side() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.check_server_final(RFC_SERVER_FINAL)


def test_rfc7677_server_side() -> None:
    credential = scram_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=RFC_SERVER_NONCE)
    assert server.server_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == RFC_SERVER_FIRST
    assert server.server_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_full_exchange_and_escaped_user_names(mechanism: str) -> None:
    name = "a=b,c"
    lookup = {name: scram_credential(mechanism, "s3cret")}.get
    client = ScramClient(mechanism, name, "s3cret")
    server = ScramServer(mechanism, lookup)
    assert b"n=a=3Db=2Cc," in client.first_message()
    client.check_server_final(
        server.server_final(client.final_message(server.server_first(client.first_message())))
    )
    assert server.username == name


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "s3cret")])
def test_wrong_password_and_unknown_user_fail_alike(user: str, password: str) -> None:
    lookup = _users("SCRAM-SHA-512", alice="s3cret")
    client = ScramClient("SCRAM-SHA-512", user, password)
    server = ScramServer("SCRAM-SHA-512", lookup)
    first = server.server_first(client.first_message())
    assert b",i=4096" in first  # an unknown user still gets a salt and iterations
    with pytest.raises(SaslAuthenticationFailedError, match="bad credentials"):
        server.server_final(client.final_message(first))


def test_replayed_proof_is_refused_by_a_new_exchange() -> None:
    lookup = _users("SCRAM-SHA-256", alice="s3cret")
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", lookup)
    final = client.final_message(server.server_first(client.first_message()))
    server.server_final(final)
    replay = ScramServer("SCRAM-SHA-256", lookup)
    replay.server_first(client.first_message())
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        replay.server_final(final)


def test_client_rejects_a_server_that_does_not_know_the_credential() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.final_message(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslAuthenticationFailedError, match="signature is wrong"):
        client.check_server_final(forged)


@pytest.mark.parametrize(
    "server_first,problem",
    [
        (b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=10", "iteration"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,i=4096", "lacks"),
        (b"e=unknown-user", "refused"),
        (b"garbage", "malformed"),
    ],
)
def test_client_checks_the_server_first_message(server_first: bytes, problem: str) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    with pytest.raises(SaslAuthenticationFailedError, match=problem):
        client.final_message(server_first)


@pytest.mark.parametrize(
    "client_first",
    [b"y,,n=user,r=abc", b"n,a=admin,n=user,r=abc", b"n,,r=abc", b"n,,n=user,r=abc,tokenauth=true",
     b"\xff\xfe", b"n,,n=us=er,r=abc"],
)  # fmt: skip
def test_server_refuses_malformed_client_first(client_first: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", _users("SCRAM-SHA-256", user="pencil"))
    with pytest.raises(SaslAuthenticationFailedError):
        server.server_first(client_first)


def test_server_refuses_final_without_first_and_tampered_binding() -> None:
    lookup = _users("SCRAM-SHA-256", alice="s3cret")
    with pytest.raises(SaslAuthenticationFailedError, match="before client-first"):
        ScramServer("SCRAM-SHA-256", lookup).server_final(b"c=biws,r=x,p=AAAA")
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", lookup)
    final = client.final_message(server.server_first(client.first_message()))
    with pytest.raises(SaslAuthenticationFailedError, match="channel binding"):
        server.server_final(final.replace(b"c=biws", b"c=eSws"))


def test_password_matches_checks_against_the_stored_form() -> None:
    credential = scram_credential("SCRAM-SHA-512", "s3cret", iterations=8192)
    assert password_matches(credential, "s3cret")
    assert not password_matches(credential, "s3cret ")
    with pytest.raises(ValueError, match="at least 4096"):
        scram_credential("SCRAM-SHA-512", "x", iterations=100)
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        scram_credential("SCRAM-MD5", "x")


def test_plain_round_trip_and_refusals() -> None:
    assert decode_plain(encode_plain("alice", "pw")).username == "alice"
    assert decode_plain(b"alice\0alice\0pw").password == "pw"
    assert "pw" not in repr(decode_plain(b"\0alice\0pw"))
    for bad in (b"alice\0pw", b"\0\0pw", b"bob\0alice\0pw", b"\xff\0a\0b"):
        with pytest.raises(SaslAuthenticationFailedError):
            decode_plain(bad)


def test_oauthbearer_round_trip_and_unsecured_tokens() -> None:
    token = unsecured_token("alice", 60_000, now_ms=1_000_000)
    message = encode_oauthbearer(token, extensions={"traceId": "abc"})
    assert message.startswith(b"n,,\x01auth=Bearer ") and message.endswith(b"\x01\x01")
    request = decode_oauthbearer(message)
    assert request.token == token and request.extensions == {"traceId": "abc"}
    assert token not in repr(request)
    claims = unsecured_claims(request.token)
    assert claims["sub"] == "alice" and claims["exp"] == 1060.0
    assert decode_oauthbearer(encode_oauthbearer(token, authzid="alice")).authzid == "alice"


@pytest.mark.parametrize(
    "message",
    [b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01auth=Bearer x\x01",
     b"p=x,,\x01auth=Bearer t\x01\x01", b"n,,auth=Bearer t", b"\xff"],
)  # fmt: skip
def test_oauthbearer_refuses_malformed_messages(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailedError):
        decode_oauthbearer(message)


def test_signed_tokens_are_not_taken_as_unsecured() -> None:
    header, claims, _ = unsecured_token("alice").split(".")
    with pytest.raises(SaslAuthenticationFailedError, match="unsecured"):
        unsecured_claims(f"{header}.{claims}.c2lnbmF0dXJl")
    signed_header = base64.urlsafe_b64encode(b'{"alg":"RS256"}').decode().rstrip("=")
    with pytest.raises(SaslAuthenticationFailedError, match="alg"):
        unsecured_claims(f"{signed_header}.{claims}.")
