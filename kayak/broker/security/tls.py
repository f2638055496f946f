"""TLS for the broker's SSL and SASL_SSL listeners: the server context and client principals.

The context is built once at start, so a missing file, a key that does not match its
certificate or a wrong key password stops the broker immediately with an error naming the
file, rather than at the first client's handshake.

Kernel TLS (kTLS) would let fetches keep ``sendfile`` under TLS, but it needs both the
kernel's ``tls`` upper-layer protocol and an ``ssl`` module with ``OP_ENABLE_KTLS`` (Python
3.12+ built against OpenSSL 3 with kTLS); :func:`ktls_available` says whether this machine
has both and, if not, why. Without it TLS fetches are copied through user space.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

from kayak.broker.security.principal import Principal
from kayak.errors import ConfigError

# Linux's TCP_ULP socket option (not exported by the socket module).
_TCP_ULP = 31

# RFC 2253 short names for the attribute types Python's getpeercert() spells out.
_RFC2253_NAMES = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_RFC2253_SPECIAL = frozenset(',+"\\<>;=')


class _KeyPassword:
    """The key password callback: records that OpenSSL asked (the key is encrypted) and
    never lets OpenSSL fall back to prompting on a terminal."""

    def __init__(self, password: str | None) -> None:
        self.password = password
        self.asked = False

    def __call__(self) -> bytes:
        self.asked = True
        if self.password is None:
            raise ConfigError("ssl.key.password", "the key is encrypted; give --ssl-key-password")
        return self.password.encode()


def server_context(
    certificate: Path,
    key: Path,
    key_password: str | None = None,
    ca: Path | None = None,
) -> ssl.SSLContext:
    """A TLS 1.2+ server context for the broker's certificate chain and private key.

    With ``ca``, clients must present a certificate signed by it (Kafka's
    ``ssl.client.auth=required``). Raises ``ConfigError`` naming the file at fault.
    """
    for name, path in (("ssl.certificate.location", certificate), ("ssl.key.location", key)):
        _check_readable(name, path)
    if ca is not None:
        _check_readable("ssl.ca.location", ca)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # Parsing the chain on its own first tells a bad certificate from a bad key.
        ssl.create_default_context(cafile=str(certificate))
    except ssl.SSLError as exc:
        raise ConfigError(
            "ssl.certificate.location", f"{certificate} holds no PEM certificate ({exc.reason})"
        ) from None
    password = _KeyPassword(key_password)
    try:
        context.load_cert_chain(str(certificate), str(key), password=password)
    except ssl.SSLError as exc:
        raise _key_error(key, certificate, exc, password) from None
    if ca is not None:
        try:
            context.load_verify_locations(cafile=str(ca))
        except ssl.SSLError as exc:
            raise ConfigError(
                "ssl.ca.location", f"{ca} holds no PEM CA certificate ({exc.reason})"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _check_readable(name: str, path: Path) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(name, f"cannot read {path}: {exc.strerror or exc}") from None


def _key_error(
    key: Path, certificate: Path, exc: ssl.SSLError, password: _KeyPassword
) -> ConfigError:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return ConfigError("ssl.key.location", f"{key} is not the key of {certificate}")
    if password.asked and password.password is not None:
        return ConfigError(
            "ssl.key.password", f"cannot decrypt {key} with --ssl-key-password (wrong password?)"
        )
    return ConfigError("ssl.key.location", f"{key} holds no usable PEM private key ({exc})")


def principal_from_peercert(peercert: dict[str, Any] | None) -> Principal | None:
    """The client certificate's subject as Kafka's SSL principal (``User:CN=alice,O=org``).

    Kafka names SSL clients by ``X500Principal.getName()``, the RFC 2253 form: relative
    distinguished names from the last to the first, short attribute names. None without a
    (verified) client certificate.
    """
    if not peercert or not peercert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_RFC2253_NAMES.get(t, t)}={_escape(v)}" for t, v in rdn))
    return Principal.user(",".join(rdns))


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in _RFC2253_SPECIAL else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def ktls_available() -> tuple[bool, str]:
    """Whether TLS records could be sent by the kernel here (so ``sendfile`` stays zero-copy),
    and a reason when not."""
    reasons = []
    if not hasattr(ssl, "OP_ENABLE_KTLS"):
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        reasons.append(f"Python {version}'s ssl module has no OP_ENABLE_KTLS")
    kernel = _kernel_tls_ulp()
    if kernel:
        reasons.append(kernel)
    if reasons:
        return False, "; ".join(reasons)
    return True, f"kernel tls ULP and {ssl.OPENSSL_VERSION} with OP_ENABLE_KTLS"


def _kernel_tls_ulp() -> str | None:
    """None if the kernel accepts the ``tls`` ULP on a TCP socket, else why not."""
    if not sys.platform.startswith("linux"):
        return f"kernel TLS is Linux only (this is {sys.platform})"
    try:
        # The ULP can only be set on a connected socket.
        with (
            socket.create_server(("127.0.0.1", 0)) as server,
            socket.create_connection(server.getsockname()[:2], timeout=2) as client,
        ):
            accepted, _ = server.accept()
            accepted.close()
            client.setsockopt(socket.IPPROTO_TCP, _TCP_ULP, b"tls")
    except OSError as exc:
        code = exc.errno or 0
        name = errno.errorcode.get(code, str(code))
        return f"the kernel has no tls ULP (setsockopt TCP_ULP 'tls': {name}, {os.strerror(code)})"
    return None
