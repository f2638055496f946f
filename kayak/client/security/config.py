"""The client's security settings: TLS and SASL, checked and put together once per client.

``security_config(values)`` turns the Kafka-named properties of a client configuration
(``security.protocol``, ``ssl.*``, ``sasl.*``, ``oauth_cb``) into a :class:`SecurityConfig`,
raising ``ConfigError`` naming the property when something is missing or contradicts
something else. Secrets (passwords, the JAAS string) are held as :class:`Secret`, whose
``repr`` and ``str`` show asterisks, so a configuration can be printed or logged safely.

``sasl.jaas.config`` is read as Kafka's Java client reads it: exactly one login module,
a control flag and ``key=value`` options, ended by ``;``::

    org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kayak.errors import ConfigError

__all__ = [
    "KAFKA_SECURITY_PROTOCOLS",
    "SASL_MECHANISMS",
    "JaasConfig",
    "SaslSettings",
    "Secret",
    "SecurityConfig",
    "TlsSettings",
    "parse_jaas_config",
    "security_config",
    "security_warnings",
]

KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

_MASK = "********"

TokenCallback = Callable[..., Any]
"""``oauth_cb``: called (with ``sasl.oauthbearer.config`` if it takes an argument, as
confluent-kafka does) for an OAUTHBEARER token; returns ``(token, expiry)`` with expiry in
seconds since the epoch, or ``(token, expiry, principal, extensions)``; may be a coroutine."""


class Secret:
    """A password or other secret: compares by value, never shows it in ``repr``/``str``.

    ``reveal()`` gives the value to the code that must send it.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({_MASK!r})"

    def __str__(self) -> str:
        return _MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[Any, ...]:
        # Configurations travel to Spark executors pickled.
        return (Secret, (self._value,))


# --------------------------------------------------------------------------------------------
# sasl.jaas.config
# --------------------------------------------------------------------------------------------

# Login module class name (after any shading prefix, as Databricks' "kafkashaded.") to the
# SASL mechanism family it logs in for.
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
}
_UNSUPPORTED_MODULES = {
    "com.sun.security.auth.module.Krb5LoginModule": "Kerberos (GSSAPI) is not supported by kayak",
    "software.amazon.msk.auth.iam.IAMLoginModule": "AWS_MSK_IAM is not supported by kayak; use "
    "SCRAM-SHA-512 (MSK supports it) or OAUTHBEARER with an oauth_cb",
}
_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS = "sasl.jaas.config"
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>"(?:[^"\\]|\\.)*")
      | (?P<semicolon>;)
      | (?P<equals>=)
      | (?P<word>[^\s=;"]+)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class JaasConfig:
    """A parsed ``sasl.jaas.config``: the login module, its flag, its options.

    ``family`` is ``PLAIN``, ``SCRAM`` or ``OAUTHBEARER``. Option values are kept as
    :class:`Secret` when they are secrets (``password``), so the whole object prints safely.
    """

    login_module: str
    family: str
    flag: str
    options: Mapping[str, str | Secret] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        """An option's value (revealed), or None."""
        value = self.options.get(name)
        if isinstance(value, Secret):
            return value.reveal()
        return value

    def __str__(self) -> str:
        shown = "".join(f' {k}="{v}"' for k, v in self.options.items())
        return f"{self.login_module} {self.flag}{shown};"


def _jaas_error(problem: str) -> ConfigError:
    example = (
        "expected e.g. org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="...";'
    )
    return ConfigError(_JAAS, f"{problem}; {example}")


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise _jaas_error(f"cannot read it at character {pos + 1} (an unclosed quote?)")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def _unquote(token: str) -> str:
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def parse_jaas_config(text: str) -> JaasConfig:
    """Parse a JAAS login configuration as Kafka's clients take it (one login module).

    Raises ``ConfigError`` for ``sasl.jaas.config`` saying what is wrong; the message never
    contains option values (they may be passwords).
    """
    tokens = _tokens(text)
    if not tokens:
        raise _jaas_error("is empty")
    kind, module = tokens[0]
    if kind != "word":
        raise _jaas_error("does not start with a login module class name")
    if len(tokens) < 2 or tokens[1][0] != "word" or tokens[1][1].lower() not in _FLAGS:
        raise _jaas_error(
            f"has no control flag after {module}: one of {', '.join(_FLAGS)} must follow it"
        )
    flag = tokens[1][1].lower()
    options: dict[str, str | Secret] = {}
    position = 2
    while position < len(tokens) and tokens[position][0] != "semicolon":
        options.update([_option(tokens, position)])
        position += 3
    if position >= len(tokens):
        raise _jaas_error("does not end with ';'")
    if position != len(tokens) - 1:
        raise _jaas_error("holds more than one login module; Kafka's clients take exactly one")
    return JaasConfig(module, _module_family(module), flag, options)


def _option(tokens: list[tuple[str, str]], position: int) -> tuple[str, str | Secret]:
    name_kind, name = tokens[position]
    if name_kind != "word":
        raise _jaas_error(
            f"has a quoted string where an option name should be (option {position - 1})"
        )
    if position + 2 >= len(tokens) or tokens[position + 1][0] != "equals":
        raise _jaas_error(f"option {name!r} has no '=value'")
    value_kind, raw = tokens[position + 2]
    if value_kind == "quoted":
        value = _unquote(raw)
    elif value_kind == "word":
        value = raw
    else:
        raise _jaas_error(f"option {name!r} has no value after '='")
    return name, Secret(value) if "password" in name.lower() else value


def _module_family(module: str) -> str:
    for name, family in _LOGIN_MODULES.items():
        if module == name or module.endswith("." + name):
            return family
    for name, problem in _UNSUPPORTED_MODULES.items():
        if module == name or module.endswith("." + name):
            raise _jaas_error(f"names {name}: {problem}")
    known = ", ".join(_LOGIN_MODULES)
    raise _jaas_error(f"names login module {module!r}, which kayak does not know ({known})")


# --------------------------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsSettings:
    """How to set up TLS: trusted CAs, our certificate (mutual TLS), host name checking.

    ``*_property`` fields name the property each file came from, for error messages.
    """

    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: Secret | None = None
    check_hostname: bool = True
    ca_property: str = "ssl.ca.location"
    certificate_property: str = "ssl.certificate.location"
    key_property: str = "ssl.key.location"


@dataclass(frozen=True)
class SaslSettings:
    """How to authenticate with SASL: the mechanism and its credentials."""

    mechanism: str
    username: str | None = None
    password: Secret | None = None
    token_callback: TokenCallback | None = None
    oauthbearer_config: str = ""
    unsecured_subject: str | None = None  # OAuthBearerLoginModule's unsecured login
    extensions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SecurityConfig:
    """A client's complete security setup, from its configuration (see ``security_config``)."""

    protocol: str = "PLAINTEXT"
    tls: TlsSettings | None = None
    sasl: SaslSettings | None = None

    @property
    def uses_tls(self) -> bool:
        return self.tls is not None

    @property
    def uses_sasl(self) -> bool:
        return self.sasl is not None


def security_config(
    values: Mapping[str, Any], explicit: frozenset[str] = frozenset()
) -> SecurityConfig:
    """The security setup described by ``values`` (Kafka property names to typed values).

    ``explicit`` names the properties the user set (a default ``sasl.mechanism`` does not
    contradict a SCRAM login module; a chosen one does). Raises ``ConfigError``.
    """
    protocol = str(values.get("security.protocol", "PLAINTEXT"))
    tls = _tls_settings(values) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl_settings(values, explicit, protocol) if protocol.startswith("SASL_") else None
    return SecurityConfig(protocol, tls, sasl)


def security_warnings(values: Mapping[str, Any], explicit: frozenset[str]) -> list[str]:
    """Settings that have no effect with the chosen ``security.protocol`` (Java ignores them
    silently; kayak says so once)."""
    protocol = str(values.get("security.protocol", "PLAINTEXT"))
    warnings = []
    unused = []
    if protocol not in ("SSL", "SASL_SSL"):
        unused += sorted(name for name in explicit if name.startswith("ssl."))
    if not protocol.startswith("SASL_"):
        unused += sorted(
            name for name in explicit if name.startswith("sasl.") or name == "oauth_cb"
        )
    if unused:
        warnings.append(
            f"{', '.join(unused)} set but security.protocol is {protocol}: "
            f"{'it has' if len(unused) == 1 else 'they have'} no effect"
        )
    return warnings


def _text(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    return None if value is None or value == "" else str(value)


def _pem_store(values: Mapping[str, Any], kind: str) -> str | None:
    """``ssl.<kind>.location`` if set, after checking ``ssl.<kind>.type`` is PEM."""
    location = _text(values, f"ssl.{kind}.location")
    if location is None:
        return None
    store_type = str(values.get(f"ssl.{kind}.type") or "JKS").upper()
    if store_type != "PEM":
        instead = (
            "ssl.ca.location"
            if kind == "truststore"
            else "ssl.certificate.location and ssl.key.location"
        )
        raise ConfigError(
            f"ssl.{kind}.type",
            f"is {store_type}, but kayak reads only PEM files: convert the {kind} (keytool / "
            f"openssl) and set ssl.{kind}.type=PEM, or use {instead}",
        )
    return location


def _one_of(first: str, second: str, found: str | None, other: str | None) -> str | None:
    if found is not None and other is not None:
        raise ConfigError(first, f"and {second} are both set; set only one of them")
    return found if found is not None else other


def _tls_settings(values: Mapping[str, Any]) -> TlsSettings:
    ca = _text(values, "ssl.ca.location")
    truststore = _pem_store(values, "truststore")
    _one_of("ssl.ca.location", "ssl.truststore.location", ca, truststore)
    certificate = _text(values, "ssl.certificate.location")
    key = _text(values, "ssl.key.location")
    keystore = _pem_store(values, "keystore")
    if keystore is not None and (certificate is not None or key is not None):
        raise ConfigError(
            "ssl.keystore.location",
            "is set together with ssl.certificate.location/ssl.key.location; set only one way",
        )
    if key is not None and certificate is None:
        raise ConfigError(
            "ssl.key.location",
            "is set but ssl.certificate.location is not: mutual TLS needs the certificate too",
        )
    password = values.get("ssl.key.password")
    store_property = "ssl.keystore.location"
    algorithm = str(values.get("ssl.endpoint.identification.algorithm") or "https").lower()
    return TlsSettings(
        ca_location=ca if ca is not None else truststore,
        certificate_location=certificate if certificate is not None else keystore,
        key_location=key if key is not None else keystore,
        key_password=password if isinstance(password, Secret) else None,
        check_hostname=algorithm == "https",
        ca_property="ssl.truststore.location" if truststore is not None else "ssl.ca.location",
        certificate_property=store_property if keystore else "ssl.certificate.location",
        key_property=store_property if keystore else "ssl.key.location",
    )


def _revealed(value: object) -> str | None:
    if isinstance(value, Secret):
        return value.reveal()
    return None if value is None else str(value)


def _agreeing(name: str, direct: str | None, from_jaas: str | None, *, secret: bool) -> str | None:
    if direct is not None and from_jaas is not None and direct != from_jaas:
        shown = "" if secret else f" ({direct!r} and {from_jaas!r})"
        raise ConfigError(
            name,
            f"and the {name.split('.')[-1]} in sasl.jaas.config differ{shown}; set one of them",
        )
    return direct if direct is not None else from_jaas


def _sasl_settings(
    values: Mapping[str, Any], explicit: frozenset[str], protocol: str
) -> SaslSettings:
    mechanism = str(values.get("sasl.mechanism") or "PLAIN")
    jaas = values.get(_JAAS)
    if jaas is not None and not isinstance(jaas, JaasConfig):
        raise ConfigError(_JAAS, "was not parsed")  # the property's parser makes JaasConfig
    if jaas is not None:
        _check_family(jaas, mechanism, "sasl.mechanism" in explicit)
    if mechanism == "OAUTHBEARER":
        return _oauthbearer_settings(values, jaas, protocol)
    username = _agreeing(
        "sasl.username",
        _text(values, "sasl.username"),
        jaas.option("username") if jaas else None,
        secret=False,
    )
    password = _agreeing(
        "sasl.password",
        _revealed(values.get("sasl.password")),
        jaas.option("password") if jaas else None,
        secret=True,
    )
    for name, value in (("sasl.username", username), ("sasl.password", password)):
        if not value:
            raise ConfigError(
                name,
                f"is needed: security.protocol={protocol} with sasl.mechanism={mechanism} "
                f"needs sasl.username and sasl.password (or sasl.jaas.config with username "
                f"and password)",
            )
    assert username is not None and password is not None
    return SaslSettings(mechanism, username, Secret(password))


def _check_family(jaas: JaasConfig, mechanism: str, mechanism_set: bool) -> None:
    family = "SCRAM" if mechanism.startswith("SCRAM-") else mechanism
    if jaas.family == family:
        return
    wanted = {
        "PLAIN": "PLAIN",
        "SCRAM": "SCRAM-SHA-256 or SCRAM-SHA-512",
        "OAUTHBEARER": "OAUTHBEARER",
    }[jaas.family]
    given = f"is {mechanism}" if mechanism_set else f"is not set (kayak's default is {mechanism})"
    raise ConfigError(
        "sasl.mechanism",
        f"{given}, but sasl.jaas.config logs in with {jaas.login_module.rsplit('.', 1)[-1]}: "
        f"set sasl.mechanism={wanted}",
    )


def _oauthbearer_settings(
    values: Mapping[str, Any], jaas: JaasConfig | None, protocol: str
) -> SaslSettings:
    callback = values.get("oauth_cb")
    subject = jaas.option("unsecuredLoginStringClaim_sub") if jaas is not None else None
    if callback is None and subject is None:
        raise ConfigError(
            "oauth_cb",
            f"is needed: security.protocol={protocol} with sasl.mechanism=OAUTHBEARER needs a "
            "token callback (oauth_cb) returning (token, expiry), or, for development only, "
            'sasl.jaas.config with unsecuredLoginStringClaim_sub="name"',
        )
    extensions = {}
    if jaas is not None:
        extensions = {
            key.removeprefix("unsecuredLoginExtension_"): str(jaas.option(key))
            for key in jaas.options
            if key.startswith("unsecuredLoginExtension_")
        }
    return SaslSettings(
        "OAUTHBEARER",
        token_callback=callback,
        oauthbearer_config=str(values.get("sasl.oauthbearer.config") or ""),
        unsecured_subject=subject if callback is None else None,
        extensions=extensions,
    )
