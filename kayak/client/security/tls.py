"""TLS for client connections: one ``ssl.SSLContext`` per client, and readable failures.

The context requires TLS 1.2 or newer and always verifies the broker's certificate chain
(against ``ssl.ca.location``, or the system's CAs when unset); the host name check follows
``ssl.endpoint.identification.algorithm``. With ``ssl.certificate.location`` (and key) the
client presents a certificate for mutual TLS.
"""

from __future__ import annotations

import ssl

from kayak.client.security.config import TlsSettings
from kayak.client.security.errors import SslAuthenticationError
from kayak.errors import ConfigError

__all__ = ["client_ssl_context", "tls_failure"]


def client_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A client ``SSLContext`` for ``tls``; ``ConfigError`` naming the property whose file
    cannot be read (missing, not PEM, wrong key password)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = tls.check_hostname
    if tls.ca_location is not None:
        try:
            context.load_verify_locations(cafile=tls.ca_location)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                tls.ca_property, f"{tls.ca_location!r} cannot be read as PEM CA certificates: {exc}"
            ) from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if tls.certificate_location is not None:
        _load_client_certificate(context, tls)
    return context


def _load_client_certificate(context: ssl.SSLContext, tls: TlsSettings) -> None:
    assert tls.certificate_location is not None
    password = tls.key_password.reveal() if tls.key_password is not None else None
    try:
        # A callable, so that an encrypted key without a password fails instead of prompting
        # on the terminal.
        context.load_cert_chain(
            tls.certificate_location, tls.key_location, password=lambda: password or ""
        )
    except FileNotFoundError as exc:
        missing = exc.filename or tls.certificate_location
        prop = tls.key_property if missing == tls.key_location else tls.certificate_property
        raise ConfigError(prop, f"{missing!r} does not exist") from None
    except (OSError, ssl.SSLError) as exc:
        reason = str(exc)
        # OpenSSL says only "PEM lib" for a missing or wrong password: look at the key.
        if _is_encrypted(tls.key_location or tls.certificate_location):
            problem = (
                "is not set"
                if password is None
                else "does not decrypt the key (or the key is not the certificate's)"
            )
            raise ConfigError(
                "ssl.key.password", f"{problem} ({tls.key_property}={tls.key_location!r})"
            ) from None
        raise ConfigError(
            tls.certificate_property,
            f"{tls.certificate_location!r} with key {tls.key_location!r} cannot be loaded "
            f"(PEM certificate and matching private key expected): {reason}",
        ) from None


def _is_encrypted(key_file: str) -> bool:
    try:
        with open(key_file, "rb") as pem:
            return b"ENCRYPTED" in pem.read(64 * 1024)
    except OSError:
        return False


def tls_failure(exc: BaseException, host: str, port: int) -> SslAuthenticationError:
    """An ``SslAuthenticationError`` naming the broker and why its TLS handshake failed."""
    where = f"TLS handshake with broker {host}:{port} failed"
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            hint = (
                "the broker's certificate is not for this host name (to skip the check, "
                "which is unsafe, set ssl.endpoint.identification.algorithm=none)"
            )
        else:
            hint = (
                "the broker's certificate is not trusted (set ssl.ca.location to the CA "
                "that signed it)"
            )
        return SslAuthenticationError(f"{where}: certificate verify failed: {reason}; {hint}")
    reason = getattr(exc, "reason", None) or str(exc)
    if reason == "WRONG_VERSION_NUMBER" or "wrong version number" in str(exc):
        return SslAuthenticationError(
            f"{where}: the broker does not speak TLS on that port (a PLAINTEXT listener? "
            "check security.protocol)"
        )
    if "CERTIFICATE_REQUIRED" in str(reason).upper() or "certificate required" in str(exc):
        return SslAuthenticationError(
            f"{where}: the broker requires a client certificate (set "
            "ssl.certificate.location and ssl.key.location)"
        )
    if any(alert in str(reason).upper() for alert in _CLIENT_CERTIFICATE_ALERTS):
        return SslAuthenticationError(
            f"{where}: {exc}; the broker refused our client certificate, or its absence (set "
            "ssl.certificate.location and ssl.key.location to a certificate signed by a CA "
            "the broker trusts)"
        )
    return SslAuthenticationError(f"{where}: {exc}")


# Alerts a broker sends in the handshake about the certificate we gave it, or did not (our
# own check of its certificate fails as SSLCertVerificationError instead). OpenSSL brokers
# send unknown_ca for an untrusted one; Java's (Apache Kafka) bad_certificate for a missing
# one and certificate_unknown for an untrusted one.
_CLIENT_CERTIFICATE_ALERTS = (
    "ALERT_BAD_CERTIFICATE",
    "ALERT_CERTIFICATE_UNKNOWN",
    "ALERT_UNKNOWN_CA",
    "ALERT_UNSUPPORTED_CERTIFICATE",
    "ALERT_CERTIFICATE_EXPIRED",
    "ALERT_CERTIFICATE_REVOKED",
)
