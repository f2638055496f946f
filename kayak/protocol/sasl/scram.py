"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them.

No channel binding (gs2 header ``n,,``), user names escaped as the RFC says (``=2C``,
``=3D``), passwords used as their UTF-8 bytes (Kafka does no SASLprep). The broker stores a
:class:`ScramCredential` (salt, iterations, StoredKey, ServerKey), never the password.

A client's proof is bound to the server's fresh nonce, so a proof recorded from one exchange
is worthless in the next; the client checks the server's signature, so a server that does not
know the credential cannot pretend it does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kayak.errors import SaslAuthenticationFailedError

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka refuses fewer
MAX_ITERATIONS = 16384  # and more, when credentials are altered through the API
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"
_NONCE_BYTES = 24
# An unknown user gets a salt derived from this, so that its answer looks like a real one.
_DECOY_SECRET = os.urandom(32)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a SCRAM password."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hash_name(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        known = ", ".join(SCRAM_MECHANISMS)
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism ({known})") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored form, from a salted password (AlterUserScramCredentials sends that)."""
    hash_name = _hash_name(mechanism)
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def scram_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """The stored form of ``password`` (a fresh random salt unless one is given)."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"SCRAM needs at least {MIN_ITERATIONS} iterations, not {iterations}")
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (for PLAIN, HTTP basic)."""
    candidate = scram_credential(
        credential.mechanism, password, salt=credential.salt, iterations=credential.iterations
    )
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


def _escape_username(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape_username(text: str) -> str:
    if "=" in text.replace("=3D", "").replace("=2C", ""):
        raise SaslAuthenticationFailedError("SCRAM user name has an invalid escape")
    return text.replace("=2C", ",").replace("=3D", "=")


def _new_nonce() -> str:
    return secrets.token_urlsafe(_NONCE_BYTES)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``a=x,b=y`` to pairs, in order; SaslAuthenticationFailedError when malformed."""
    pairs = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslAuthenticationFailedError(f"malformed SCRAM {what}: {part[:40]!r}")
        pairs.append((key, value))
    return pairs


def _decode_text(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError(f"SCRAM {what} is not UTF-8") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslAuthenticationFailedError(f"SCRAM {what} is not base64") from None


class ScramClient:
    """The client's half of one SCRAM exchange: first message, final message, check."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self.username = username
        self._password = password
        self._nonce = nonce or _new_nonce()
        self._first_bare = f"n={_escape_username(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism!r}, {self.username!r})"

    def first_message(self) -> bytes:
        """client-first-message."""
        return (_GS2_HEADER + self._first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        """client-final-message with the proof, after checking the server's first message."""
        text = _decode_text(server_first, "server-first-message")
        fields = dict(_attributes(text, "server-first-message"))
        if "e" in fields:
            raise SaslAuthenticationFailedError(f"SCRAM refused by the broker: {fields['e']}")
        nonce, salt_text, iterations_text = fields.get("r"), fields.get("s"), fields.get("i")
        if nonce is None or salt_text is None or iterations_text is None:
            raise SaslAuthenticationFailedError("SCRAM server-first-message lacks r, s or i")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationFailedError("SCRAM server nonce does not extend ours")
        if not iterations_text.isdigit() or int(iterations_text) < MIN_ITERATIONS:
            raise SaslAuthenticationFailedError(
                f"SCRAM iteration count {iterations_text!r} is below {MIN_ITERATIONS}"
            )
        salt = _unb64(salt_text, "salt")
        salted = salted_password(self.mechanism, self._password, salt, int(iterations_text))
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = _hmac(self._hash, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self._hash, salted, b"Server Key")
        self._server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        """Check the server's signature; ``SaslAuthenticationFailedError`` when wrong."""
        if self._server_signature is None:
            raise SaslAuthenticationFailedError("SCRAM server-final before client-final")
        text = _decode_text(server_final, "server-final-message")
        fields = dict(_attributes(text, "server-final-message"))
        if "e" in fields:
            raise SaslAuthenticationFailedError(f"SCRAM refused by the broker: {fields['e']}")
        verifier = fields.get("v")
        if verifier is None or not hmac.compare_digest(
            _unb64(verifier, "server signature"), self._server_signature
        ):
            raise SaslAuthenticationFailedError(
                "the broker's SCRAM signature is wrong: it does not know this credential"
            )


class ScramServer:
    """The broker's half of one SCRAM exchange.

    ``lookup`` gives the stored credential of a user of this mechanism (None: no such user).
    An unknown user is answered like a known one and fails only at the proof, so that the
    answers do not tell which user names exist.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce or _new_nonce()
        self.username = ""
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def server_first(self, client_first: bytes) -> bytes:
        """Answer client-first-message with the salt, iterations and combined nonce."""
        if self._server_first:
            raise SaslAuthenticationFailedError("SCRAM client-first-message sent twice")
        text = _decode_text(client_first, "client-first-message")
        if not text.startswith(_GS2_HEADER):
            # "y,," / "p=..." (channel binding) or an authzid: Kafka supports neither.
            raise SaslAuthenticationFailedError(
                "SCRAM client-first-message must start with 'n,,' (no channel binding, "
                "no authorization id)"
            )
        self._first_bare = text[len(_GS2_HEADER) :]
        fields = _attributes(self._first_bare, "client-first-message")
        if len(fields) < 2 or fields[0][0] != "n" or fields[1][0] != "r" or not fields[1][1]:
            raise SaslAuthenticationFailedError("SCRAM client-first-message lacks n= and r=")
        extensions = dict(fields[2:])
        if extensions.get("tokenauth", "false").lower() == "true":
            raise SaslAuthenticationFailedError("delegation tokens are not supported")
        self.username = _unescape_username(fields[0][1])
        if not self.username:
            raise SaslAuthenticationFailedError("SCRAM user name is empty")
        self._credential = self._lookup(self.username)
        salt, iterations = self._salt_and_iterations()
        self._nonce = fields[1][1] + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        return self._server_first.encode()

    def _salt_and_iterations(self) -> tuple[bytes, int]:
        if self._credential is not None:
            return self._credential.salt, self._credential.iterations
        decoy = hmac.new(_DECOY_SECRET, self.username.encode(), "sha256").digest()
        return decoy, MIN_ITERATIONS

    def server_final(self, client_final: bytes) -> bytes:
        """Check the client's proof; the server-final-message, or SaslAuthenticationFailedError."""
        if not self._server_first:
            raise SaslAuthenticationFailedError("SCRAM client-final-message before client-first")
        text = _decode_text(client_final, "client-final-message")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationFailedError("SCRAM client-final-message has no proof")
        fields = dict(_attributes(without_proof, "client-final-message"))
        if fields.get("c") != _CHANNEL_BINDING:
            raise SaslAuthenticationFailedError("SCRAM channel binding must be 'biws' (none)")
        if fields.get("r") != self._nonce:
            raise SaslAuthenticationFailedError("SCRAM nonce does not match this exchange")
        proof = _unb64(proof_text, "proof")
        credential = self._credential
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        if credential is None or len(proof) != len(credential.stored_key):
            raise SaslAuthenticationFailedError(self._failure())
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored_key = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(stored_key, credential.stored_key):
            raise SaslAuthenticationFailedError(self._failure())
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()

    def _failure(self) -> str:
        return f"authentication failed for {self.username!r} with {self.mechanism}: bad credentials"
