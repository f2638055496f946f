"""The property model of client configuration, and how a user's value becomes a typed one.

``ConfigProperty`` describes one property (Kafka name, ``ValueKind``, default, limits, doc
line); its ``convert`` checks a value given by the user and returns it typed, by the generic
conversion of its kind (``"5"`` to 5, ``"a,b"`` to a tuple, ...) or, for a property that needs
more, by its own parser (``parse_acks``, ``parse_bootstrap``, ...). Those parsers live here
too, with ``parse_bootstrap_servers`` for ``bootstrap.servers``; the tables naming them are in
:mod:`kayak.client.config.schema`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kayak.client.partitioner import PartitionerSpec, partitioner_spec
from kayak.client.security.config import (
    KAFKA_SECURITY_PROTOCOLS,
    SASL_MECHANISMS,
    JaasConfig,
    Secret,
    TokenCallback,
    parse_jaas_config,
)
from kayak.client.statistics import StatsCallback
from kayak.errors import ConfigError

INT_MAX = 2**31 - 1  # Java int: these values go on the wire as int32
LONG_MAX = 2**63 - 1


class ValueKind(Enum):
    """The type of a property's value."""

    INT = "int"
    BOOL = "bool"
    STR = "str"
    LIST = "list"
    ENUM = "enum"
    CALLABLE = "callable"


Parser = Callable[["ConfigProperty", object], object]


@dataclass(frozen=True)
class ConfigProperty:
    """One configuration property: its name, type, default, allowed values and doc line.

    ``parser`` replaces the generic conversion for ``kind`` when a property needs more (a
    host:port list, ``acks``'s ``all``, ...).
    """

    name: str
    kind: ValueKind
    default: object
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    required: bool = False
    kayak_extension: bool = False
    parser: Parser | None = field(default=None, repr=False, compare=False)

    @property
    def attr(self) -> str:
        """The Python attribute (and keyword argument) name: dots become underscores."""
        return self.name.replace(".", "_")

    def convert(self, value: object) -> object:
        """Check ``value`` and return it in its typed form; ``ConfigError`` if not allowed."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(self.name, f"must be set to {self.allowed()}, not None")
        if self.parser is not None:
            return self.parser(self, value)
        return _CONVERTERS[self.kind](self, value)

    def allowed(self) -> str:
        """What values are allowed, in words (for error messages and docs)."""
        if self.kind is ValueKind.INT:
            return f"an integer {_range_text(self.minimum, self.maximum)}"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        return _KIND_WORDS[self.kind]

    def error(self, value: object, problem: str = "") -> ConfigError:
        """A ``ConfigError`` naming this property, ``value`` and what is allowed."""
        shown = f"{value!r} ({type(value).__name__})" if not isinstance(value, str) else repr(value)
        return ConfigError(
            self.name, f"{shown} {problem or 'is not allowed'}; expected {self.allowed()}"
        )


_KIND_WORDS = {
    ValueKind.INT: "an integer",
    ValueKind.BOOL: "true or false",
    ValueKind.STR: "a string",
    ValueKind.LIST: "a comma-separated string or a list of strings",
    ValueKind.ENUM: "one of the listed choices",
    ValueKind.CALLABLE: "a name or a callable",
}


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if maximum is None or maximum >= LONG_MAX:
        return f">= {minimum}" if minimum is not None else ""
    if minimum is None:
        return f"<= {maximum}"
    return f"from {minimum} to {maximum}"


# --------------------------------------------------------------------------------------------
# Generic conversions, one per kind
# --------------------------------------------------------------------------------------------

_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def _to_int(prop: ConfigProperty, value: object) -> int:
    # bool is an int subclass; True for a size or timeout is surely a mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise prop.error(value, "is not an integer")
    if (prop.minimum is not None and number < prop.minimum) or (
        prop.maximum is not None and number > prop.maximum
    ):
        raise prop.error(value, "is out of range")
    return number


def _to_bool(prop: ConfigProperty, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise prop.error(value, "is not a boolean")


def _to_str(prop: ConfigProperty, value: object) -> str:
    if isinstance(value, str):
        return value.strip()  # Java trims string values too
    raise prop.error(value, "is not a string")


def _to_enum(prop: ConfigProperty, value: object) -> str:
    if isinstance(value, str):
        wanted = value.strip().lower()
        for choice in prop.choices:
            if choice.lower() == wanted:
                return choice
    raise prop.error(value)


def _to_list(prop: ConfigProperty, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Sequence[object] = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise prop.error(value, "is not a list")
    if not all(isinstance(item, str) for item in items):
        raise prop.error(value, "holds something other than strings")
    return tuple(text for item in items if (text := str(item).strip()))


def _not_converted(prop: ConfigProperty, value: object) -> object:
    raise prop.error(value, "cannot be checked: the property has no parser")


_CONVERTERS: dict[ValueKind, Parser] = {
    ValueKind.INT: _to_int,
    ValueKind.BOOL: _to_bool,
    ValueKind.STR: _to_str,
    ValueKind.ENUM: _to_enum,
    ValueKind.LIST: _to_list,
    ValueKind.CALLABLE: _not_converted,
}


# --------------------------------------------------------------------------------------------
# Parsers for the properties that need more than their kind's conversion
# --------------------------------------------------------------------------------------------

_SCHEME = re.compile(r"([A-Za-z_]+)://")
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # Java's validHostPattern also allows '_'
_PORT = re.compile(r"[0-9]{1,5}")
_BOOTSTRAP = "bootstrap.servers"


def _bad_address(entry: object, problem: str) -> ConfigError:
    return ConfigError(_BOOTSTRAP, f"{entry!r} {problem}")


def _parse_address(entry: str) -> tuple[str, int]:
    """``host:port``, ``[ipv6]:port``, optionally after ``PLAINTEXT://``."""
    text = entry.strip()
    scheme = _SCHEME.match(text)
    if scheme:
        # As in Java, a listener prefix is tolerated and ignored: security.protocol decides.
        if scheme.group(1).upper() not in KAFKA_SECURITY_PROTOCOLS:
            raise _bad_address(
                entry,
                f"starts with {scheme.group(0)!r}, which is not a Kafka listener "
                f"({', '.join(KAFKA_SECURITY_PROTOCOLS)})",
            )
        text = text[scheme.end() :]
    if text.startswith("["):
        host, closing, rest = text[1:].partition("]")
        if not closing:
            raise _bad_address(entry, "has no ']' closing the IPv6 address")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _bad_address(
                entry, f"has {host!r} in brackets, which is not an IPv6 address"
            ) from None
        if not rest.startswith(":"):
            raise _bad_address(entry, "has no port; expected [address]:port")
        port_text = rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise _bad_address(entry, "has no port; expected host:port")
        if ":" in host:
            raise _bad_address(entry, "looks like an IPv6 address: write it as [address]:port")
        if not _HOST_NAME.fullmatch(host):
            raise _bad_address(entry, "has no valid host name before the port")
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise _bad_address(entry, f"has port {port_text!r}; a port is a number from 1 to 65535")
    return host, int(port_text)


def _address_of(item: object) -> tuple[str, int]:
    if isinstance(item, str):
        return _parse_address(item)
    # A (host, port) pair, as Python socket code writes addresses.
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        host, port = item
        if isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
            return host, port
    raise _bad_address(item, "is not a 'host:port' string or a (host, port) pair")


def parse_bootstrap_servers(value: object) -> list[tuple[str, int]]:
    """Parse ``bootstrap.servers``: ``"h1:9092,h2:9092"`` or a list of ``"host:port"`` strings
    (or ``(host, port)`` pairs) into ``[(host, port), ...]``.

    IPv6 addresses go in brackets, ``"[::1]:9092"``; a ``PLAINTEXT://`` prefix is allowed.
    Empty entries are skipped, as Java does; no entries at all, a duplicate, or a bad entry
    raise ``ConfigError``.
    """
    if isinstance(value, str):
        items: Sequence[object] = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = [item for item in value if not (isinstance(item, str) and not item.strip())]
    else:
        raise ConfigError(_BOOTSTRAP, f"expected 'host:port,...' or a list, got {value!r}")
    if not items:
        raise ConfigError(_BOOTSTRAP, "is empty: give at least one broker, e.g. 'localhost:9092'")
    addresses = [_address_of(item) for item in items]
    seen: set[tuple[str, int]] = set()
    for address in addresses:
        if address in seen:
            raise ConfigError(_BOOTSTRAP, f"lists {address[0]}:{address[1]} twice")
        seen.add(address)
    return addresses


def parse_bootstrap(prop: ConfigProperty, value: object) -> tuple[tuple[str, int], ...]:
    """``bootstrap.servers`` as ``parse_bootstrap_servers`` reads it, frozen into a tuple."""
    return tuple(parse_bootstrap_servers(value))


def parse_acks(prop: ConfigProperty, value: object) -> int:
    """``all``/``-1``/``0``/``1`` (strings or ints) as the int the Produce request carries."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return -1
    if isinstance(value, int | str) and not isinstance(value, bool):
        text = str(value).strip()
        if text in ("-1", "0", "1"):
            return int(text)
    raise prop.error(value)


def parse_security_protocol(prop: ConfigProperty, value: object) -> str:
    """One of Kafka's security protocols, in upper case."""
    if isinstance(value, str):
        protocol = value.strip().upper()  # Java compares case-insensitively
        if protocol in KAFKA_SECURITY_PROTOCOLS:
            return protocol
    raise ConfigError(
        prop.name,
        f"{value!r} is not a security protocol; Kafka's are {', '.join(KAFKA_SECURITY_PROTOCOLS)}",
    )


_UNSUPPORTED_MECHANISMS = {
    "GSSAPI": "Kerberos (GSSAPI) is not supported by kayak",
    "AWS_MSK_IAM": "AWS_MSK_IAM is not supported by kayak; MSK also takes SCRAM-SHA-512",
}


def parse_sasl_mechanism(prop: ConfigProperty, value: object) -> str:
    """A SASL mechanism kayak has, in upper case; the ones it lacks say so."""
    if isinstance(value, str):
        mechanism = value.strip().upper()
        if mechanism in SASL_MECHANISMS:
            return mechanism
        if mechanism in _UNSUPPORTED_MECHANISMS:
            raise ConfigError(prop.name, f"{value!r}: {_UNSUPPORTED_MECHANISMS[mechanism]}")
    raise prop.error(value)


def parse_secret(prop: ConfigProperty, value: object) -> Secret:
    """A password: kept as a ``Secret`` (masked when shown); never echoed in errors."""
    if isinstance(value, Secret):
        return value
    if isinstance(value, str):
        return Secret(value.strip())  # Java trims PASSWORD values too
    raise ConfigError(prop.name, f"must be a string, not a {type(value).__name__}")


def parse_jaas(prop: ConfigProperty, value: object) -> JaasConfig:
    """``sasl.jaas.config`` parsed into a ``JaasConfig``."""
    if isinstance(value, JaasConfig):
        return value
    if isinstance(value, Secret):
        value = value.reveal()
    if isinstance(value, str):
        return parse_jaas_config(value)
    raise ConfigError(prop.name, f"must be a string, not a {type(value).__name__}")


def parse_token_callback(prop: ConfigProperty, value: object) -> TokenCallback:
    """An OAUTHBEARER token callback: anything callable."""
    if callable(value):
        return value
    raise ConfigError(
        prop.name,
        f"must be a callable returning (token, expiry_seconds_since_epoch), not "
        f"a {type(value).__name__}",
    )


def parse_stats_callback(prop: ConfigProperty, value: object) -> StatsCallback:
    """``stats_cb``: anything callable (called with the statistics dict)."""
    if callable(value):
        return value
    raise ConfigError(
        prop.name, f"must be a callable taking the statistics dict, not a {type(value).__name__}"
    )


def parse_identification(prop: ConfigProperty, value: object) -> str:
    """``ssl.endpoint.identification.algorithm``: ``https`` or ``none``."""
    # Java turns the check off with an empty string, librdkafka with "none".
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        return "none"
    if isinstance(value, str) and value.strip().lower() == "https":
        return "https"
    raise prop.error(value)


def parse_non_empty_str(prop: ConfigProperty, value: object) -> str:
    """A string that is not empty once trimmed."""
    text = _to_str(prop, value)
    if not text:
        raise prop.error(value, "is empty (leave the property unset instead)")
    return text


ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
"""The assignors kayak implements, by their Kafka names."""
# The Java client takes assignor class names; these are the built-in ones kayak implements.
_JAVA_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def parse_assignors(prop: ConfigProperty, value: object) -> tuple[str, ...]:
    """Assignor names (or Java's class names for them), each once, preferred first."""
    names: list[str] = []
    for item in _to_list(prop, value):
        name = _JAVA_ASSIGNORS.get(item, item.lower())
        if name not in ASSIGNORS:
            raise prop.error(item, "is not an assignor kayak has")
        if name in names:
            raise prop.error(value, f"names {name} twice")
        names.append(name)
    if not names:
        raise prop.error(value, "is empty")
    return tuple(names)


def parse_partitioner(prop: ConfigProperty, value: object) -> PartitionerSpec:
    """A partitioner name, Java class name or callable, as ``partitioner_spec`` takes it."""
    return partitioner_spec(value)
