"""SASL PLAIN (RFC 4616): ``authzid NUL username NUL password`` in one message."""

from __future__ import annotations

from dataclasses import dataclass

from kayak.errors import SaslAuthenticationFailedError


@dataclass(frozen=True, slots=True)
class PlainCredentials:
    """What a PLAIN client sent. ``authzid`` is empty unless the client asked to act as
    another identity (Kafka accepts it only when it equals the user name)."""

    authzid: str
    username: str
    password: str = ""

    def __repr__(self) -> str:
        return f"PlainCredentials(authzid={self.authzid!r}, username={self.username!r})"


def encode_plain(username: str, password: str, authzid: str = "") -> bytes:
    """The client's PLAIN message."""
    if "\0" in username or "\0" in password or "\0" in authzid:
        raise ValueError("SASL PLAIN user names and passwords cannot contain NUL")
    return f"{authzid}\0{username}\0{password}".encode()


def decode_plain(data: bytes) -> PlainCredentials:
    """Split a PLAIN message; ``SaslAuthenticationFailedError`` when it is not one."""
    try:
        text = bytes(data).decode()
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError("SASL PLAIN message is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise SaslAuthenticationFailedError(
            "SASL PLAIN message must be authzid NUL username NUL password"
        )
    authzid, username, password = parts
    if not username:
        raise SaslAuthenticationFailedError("SASL PLAIN message has an empty user name")
    if authzid and authzid != username:
        raise SaslAuthenticationFailedError(
            "SASL PLAIN authorization id must be empty or the user name"
        )
    return PlainCredentials(authzid, username, password)
