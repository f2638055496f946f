"""Client configuration by Kafka's own property names.

Each client kind has a small schema table (``PRODUCER``, ``CONSUMER``, ``ADMIN``; the
properties all three share are in ``COMMON``) saying, for every property, its type, its
default (the Java client's, unless the doc says otherwise), what values are allowed and what
it does. ``ProducerConfig.from_user`` (likewise ``ConsumerConfig``, ``AdminConfig``) checks a
user's settings against that table and returns a frozen, typed object::

    cfg = ProducerConfig.from_user({"bootstrap.servers": "localhost:9092"}, linger_ms=10)
    cfg.linger_ms == cfg["linger.ms"] == 10

Settings may be given as a mapping of Kafka names, as keyword arguments with ``_`` for ``.``,
or both (the same property given twice with different values is an error). What the user set,
as opposed to defaults, is in ``explicitly_set``; some rules depend on it, as in Java.

Values are checked strictly: an unknown name, a wrong type, a number out of range or a value
not among the choices raises ``ConfigError`` naming the property, the value and what is
allowed (an unknown name also gets the closest known one suggested). Strings are accepted
where Java's ``.properties`` files would hold them: ``"5"`` for an int, ``"true"`` for a bool,
``"a,b"`` for a list.

A few librdkafka (confluent-kafka) names are accepted as aliases of their Kafka equivalent,
see ``LIBRDKAFKA_ALIASES``; librdkafka names with no equivalent raise ``ConfigError`` saying
what to use instead (``LIBRDKAFKA_NO_EQUIVALENT``).

Properties marked ``kayak_extension`` do not exist in Kafka's clients.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, ClassVar, Self

from kayak.client.partitioner import (
    Partitioner,
    PartitionerSpec,
    partitioner_from_config,
    partitioner_spec,
)
from kayak.errors import ConfigError

__all__ = [
    "ADMIN",
    "COMMON",
    "CONSUMER",
    "LIBRDKAFKA_ALIASES",
    "LIBRDKAFKA_NO_EQUIVALENT",
    "PRODUCER",
    "AdminConfig",
    "ClientConfig",
    "ConfigProperty",
    "ConsumerConfig",
    "ProducerConfig",
    "ValueKind",
    "parse_bootstrap_servers",
]

logger = logging.getLogger(__name__)

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
        if scheme.group(1).upper() != "PLAINTEXT":
            raise _bad_address(entry, "uses a listener kayak does not support; only PLAINTEXT")
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


def _parse_bootstrap(prop: ConfigProperty, value: object) -> tuple[tuple[str, int], ...]:
    return tuple(parse_bootstrap_servers(value))


def _parse_acks(prop: ConfigProperty, value: object) -> int:
    """``all``/``-1``/``0``/``1`` (strings or ints) as the int the Produce request carries."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return -1
    if isinstance(value, int | str) and not isinstance(value, bool):
        text = str(value).strip()
        if text in ("-1", "0", "1"):
            return int(text)
    raise prop.error(value)


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _parse_security_protocol(prop: ConfigProperty, value: object) -> str:
    if isinstance(value, str):
        protocol = value.strip().upper()  # Java compares case-insensitively
        if protocol == "PLAINTEXT":
            return protocol
        if protocol in _SECURITY_PROTOCOLS:
            raise ConfigError(
                prop.name, f"{value!r} is not supported by kayak yet; only PLAINTEXT is"
            )
    raise ConfigError(
        prop.name,
        f"{value!r} is not a security protocol; Kafka's are {', '.join(_SECURITY_PROTOCOLS)} "
        "(kayak supports PLAINTEXT)",
    )


def _parse_non_empty_str(prop: ConfigProperty, value: object) -> str:
    text = _to_str(prop, value)
    if not text:
        raise prop.error(value, "is empty (leave the property unset instead)")
    return text


_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
# The Java client takes assignor class names; these are the built-in ones kayak implements.
_JAVA_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def _parse_assignors(prop: ConfigProperty, value: object) -> tuple[str, ...]:
    names: list[str] = []
    for item in _to_list(prop, value):
        name = _JAVA_ASSIGNORS.get(item, item.lower())
        if name not in _ASSIGNORS:
            raise prop.error(item, "is not an assignor kayak has")
        if name in names:
            raise prop.error(value, f"names {name} twice")
        names.append(name)
    if not names:
        raise prop.error(value, "is empty")
    return tuple(names)


def _parse_partitioner(prop: ConfigProperty, value: object) -> PartitionerSpec:
    return partitioner_spec(value)


# --------------------------------------------------------------------------------------------
# The schema tables
# --------------------------------------------------------------------------------------------


def _int(name: str, default: int, doc: str, *, minimum: int = 0, **extra: Any) -> ConfigProperty:
    """A Java INT property (int32 on the wire)."""
    return ConfigProperty(name, ValueKind.INT, default, doc, minimum, INT_MAX, **extra)


def _long(name: str, default: int, doc: str, *, minimum: int = 0, **extra: Any) -> ConfigProperty:
    """A Java LONG property."""
    return ConfigProperty(name, ValueKind.INT, default, doc, minimum, LONG_MAX, **extra)


def _bool(name: str, default: bool, doc: str) -> ConfigProperty:
    return ConfigProperty(name, ValueKind.BOOL, default, doc)


def _enum(name: str, default: str, choices: tuple[str, ...], doc: str) -> ConfigProperty:
    return ConfigProperty(name, ValueKind.ENUM, default, doc, choices=choices)


def _table(*properties: ConfigProperty) -> Mapping[str, ConfigProperty]:
    return MappingProxyType({prop.name: prop for prop in properties})


_COMMON_PROPERTIES = (
    ConfigProperty(
        "bootstrap.servers",
        ValueKind.LIST,
        None,
        "Brokers to fetch cluster metadata from first: 'host:port,...' or a list; "
        "'[::1]:9092' for IPv6. Parsed into (host, port) pairs.",
        required=True,
        parser=_parse_bootstrap,
    ),
    ConfigProperty(
        "client.id",
        ValueKind.STR,
        "kayak",
        "Sent with every request so brokers can tell clients apart in logs and quotas. "
        "kayak's default is 'kayak' (Java makes up 'producer-1', 'consumer-<group>-1', ...).",
    ),
    _int("request.timeout.ms", 30_000, "How long to wait for a response before retrying."),
    _long("metadata.max.age.ms", 300_000, "Refresh metadata at least this often."),
    _long("reconnect.backoff.ms", 50, "First wait before reconnecting to a broker."),
    _long("reconnect.backoff.max.ms", 1_000, "Cap of the exponential reconnect backoff."),
    _long("retry.backoff.ms", 100, "First wait before retrying a failed request."),
    _long("retry.backoff.max.ms", 1_000, "Cap of the exponential retry backoff."),
    _long(
        "connections.max.idle.ms",
        540_000,
        "Close connections idle this long; -1 never closes them.",
        minimum=-1,
    ),
    _long("socket.connection.setup.timeout.ms", 10_000, "First timeout for opening a connection."),
    _long(
        "socket.connection.setup.timeout.max.ms",
        30_000,
        "Cap of the connection setup timeout, which grows after each failure.",
    ),
    ConfigProperty(
        "security.protocol",
        ValueKind.ENUM,
        "PLAINTEXT",
        "How to talk to brokers. kayak supports only PLAINTEXT for now.",
        choices=("PLAINTEXT",),
        parser=_parse_security_protocol,
    ),
)

_RETRIES = _int(
    "retries",
    INT_MAX,
    "How many times to retry a failed request; bound retrying with the timeouts instead.",
)
_DEFAULT_API_TIMEOUT = _int(
    "default.api.timeout.ms", 60_000, "Timeout of client calls that are not given one."
)

_PRODUCER_PROPERTIES = (
    ConfigProperty(
        "acks",
        ValueKind.ENUM,
        -1,
        "Replicas that must have a record before the leader acknowledges it: all (-1), 1 or 0. "
        "Stored as the int -1, 0 or 1.",
        choices=("all", "-1", "0", "1"),
        parser=_parse_acks,
    ),
    _long("linger.ms", 5, "How long to wait for more records before sending a batch."),
    _int("batch.size", 16_384, "Bytes of records per partition batch."),
    _long("buffer.memory", 33_554_432, "Bytes of records waiting to be sent, at most."),
    _long("max.block.ms", 60_000, "How long send() may wait for metadata or buffer space."),
    _int("max.request.size", 1_048_576, "Largest Produce request (and record batch) in bytes."),
    _enum(
        "compression.type",
        "none",
        ("none", "gzip", "snappy", "lz4", "zstd"),
        "Codec for record batches.",
    ),
    _RETRIES,
    _int(
        "delivery.timeout.ms",
        120_000,
        "Time from send() to success or failure, retries included; at least linger.ms + "
        "request.timeout.ms.",
    ),
    _int(
        "max.in.flight.requests.per.connection",
        5,
        "Unacknowledged requests per broker; at most 5 with idempotence.",
        minimum=1,
    ),
    _bool(
        "enable.idempotence",
        True,
        "Exactly one copy of each record per partition, in order (needs acks=all, retries > 0).",
    ),
    ConfigProperty(
        "partitioner",
        ValueKind.CALLABLE,
        "default",
        "How records are spread over partitions: a name (default, sticky, round_robin, random, "
        "murmur2, murmur2_random, consistent, consistent_random), a Java partitioner class "
        "name, or a callable. kayak's name for Java's partitioner.class, which is an alias.",
        parser=_parse_partitioner,
    ),
    ConfigProperty(
        "transactional.id",
        ValueKind.STR,
        None,
        "Identity for transactions across producer restarts; implies idempotence.",
        nullable=True,
        parser=_parse_non_empty_str,
    ),
)

_CONSUMER_PROPERTIES = (
    ConfigProperty(
        "group.id", ValueKind.STR, None, "The consumer group to join, if any.", nullable=True
    ),
    ConfigProperty(
        "group.instance.id",
        ValueKind.STR,
        None,
        "A stable member identity for static membership (no rebalance on restart).",
        nullable=True,
        parser=_parse_non_empty_str,
    ),
    _enum(
        "auto.offset.reset",
        "latest",
        ("latest", "earliest", "none"),
        "Where to start without a committed offset (none: raise).",
    ),
    _bool("enable.auto.commit", True, "Commit consumed offsets in the background."),
    _int("auto.commit.interval.ms", 5_000, "How often to auto-commit."),
    _int("fetch.min.bytes", 1, "Bytes a fetch waits for, up to fetch.max.wait.ms."),
    _int("fetch.max.bytes", 52_428_800, "Bytes a fetch response should hold at most."),
    _int("fetch.max.wait.ms", 500, "How long the broker may hold a fetch for fetch.min.bytes."),
    _int("max.partition.fetch.bytes", 1_048_576, "Bytes per partition per fetch, at most."),
    _int("max.poll.records", 500, "Records one poll returns at most.", minimum=1),
    _int(
        "max.poll.interval.ms",
        300_000,
        "Longest time between polls before the member leaves the group.",
        minimum=1,
    ),
    _int(
        "session.timeout.ms",
        45_000,
        "Without a heartbeat for this long the member is removed from the group.",
        minimum=1,
    ),
    _int(
        "heartbeat.interval.ms",
        3_000,
        "Time between heartbeats; lower than session.timeout.ms, typically a third of it.",
        minimum=1,
    ),
    ConfigProperty(
        "partition.assignment.strategy",
        ValueKind.LIST,
        ("range", "cooperative-sticky"),
        "Assignors, preferred first: range, roundrobin, cooperative-sticky (or Java's class "
        "names for them).",
        choices=_ASSIGNORS,
        parser=_parse_assignors,
    ),
    _enum(
        "isolation.level",
        "read_uncommitted",
        ("read_uncommitted", "read_committed"),
        "read_committed hides records of open and aborted transactions.",
    ),
    _bool("check.crcs", True, "Check the CRC of fetched record batches."),
    ConfigProperty(
        "client.rack", ValueKind.STR, "", "The client's rack, to fetch from a nearby replica."
    ),
    _DEFAULT_API_TIMEOUT,
    _int(
        "fetch.pipeline.depth",
        2,
        "kayak extension: fetch requests in flight per broker, to overlap network and decoding.",
        minimum=1,
        kayak_extension=True,
    ),
    _long(
        "prefetch.max.bytes",
        64 * 1024 * 1024,
        "kayak extension: bytes of fetched, not yet polled records to buffer at most.",
        minimum=1,
        kayak_extension=True,
    ),
)

COMMON: Mapping[str, ConfigProperty] = _table(*_COMMON_PROPERTIES)
"""Properties every client kind takes."""

PRODUCER: Mapping[str, ConfigProperty] = _table(*_COMMON_PROPERTIES, *_PRODUCER_PROPERTIES)
"""The producer's properties (``COMMON`` included)."""

CONSUMER: Mapping[str, ConfigProperty] = _table(*_COMMON_PROPERTIES, *_CONSUMER_PROPERTIES)
"""The consumer's properties (``COMMON`` included)."""

ADMIN: Mapping[str, ConfigProperty] = _table(
    # The Java admin client closes idle connections after 5 minutes, not 9.
    *(
        replace(prop, default=300_000) if prop.name == "connections.max.idle.ms" else prop
        for prop in _COMMON_PROPERTIES
    ),
    _RETRIES,
    _DEFAULT_API_TIMEOUT,
)
"""The admin client's properties (``COMMON`` included)."""

_KIND_SCHEMAS: tuple[tuple[str, Mapping[str, ConfigProperty]], ...] = (
    ("producer", PRODUCER),
    ("consumer", CONSUMER),
    ("admin", ADMIN),
)

LIBRDKAFKA_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "queue.buffering.max.ms": "linger.ms",
        "compression.codec": "compression.type",
        # librdkafka's default is 60 s, Java's request.timeout.ms 30 s; the meaning matches.
        "socket.timeout.ms": "request.timeout.ms",
        "message.timeout.ms": "delivery.timeout.ms",
        "request.required.acks": "acks",
        "message.send.max.retries": "retries",
        "fetch.wait.max.ms": "fetch.max.wait.ms",
        "fetch.message.max.bytes": "max.partition.fetch.bytes",
        # Not librdkafka's: Java's name for what kayak calls partitioner.
        "partitioner.class": "partitioner",
    }
)
"""librdkafka (and Java ``partitioner.class``) names accepted for the Kafka property named."""

LIBRDKAFKA_NO_EQUIVALENT: Mapping[str, str] = MappingProxyType(
    {
        "batch.num.messages": "librdkafka caps batches by record count; kayak, like Kafka's "
        "Java client, caps them by bytes: set batch.size instead",
        "queue.buffering.max.messages": "kayak bounds buffered records by bytes only: set "
        "buffer.memory instead",
        "queue.buffering.max.kbytes": "set buffer.memory instead (in bytes, not kilobytes)",
        "message.max.bytes": "in librdkafka this caps a whole request; kayak's producer uses "
        "Java's max.request.size for that (Java's message.max.bytes is a broker setting)",
        "sticky.partitioning.linger.ms": "kayak's sticky partitioners move on when a batch is "
        "complete (KIP-480), not after a time",
    }
)
"""librdkafka names with no kayak equivalent, and what to do instead."""


# --------------------------------------------------------------------------------------------
# The typed configuration objects
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """Settings every kayak client takes (``COMMON``); base of the per-client configs.

    Build one with ``from_user``. Read a setting as an attribute (``cfg.request_timeout_ms``)
    or by its Kafka name (``cfg["request.timeout.ms"]``).
    """

    KIND: ClassVar[str] = "client"
    SCHEMA: ClassVar[Mapping[str, ConfigProperty]] = COMMON

    bootstrap_servers: tuple[tuple[str, int], ...]
    client_id: str
    request_timeout_ms: int
    metadata_max_age_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    connections_max_idle_ms: int
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int
    security_protocol: str
    explicitly_set: frozenset[str] = frozenset()
    """Kafka names of the properties the user gave (after resolving aliases)."""

    @classmethod
    def from_user(cls, config: Mapping[str, object] | None = None, /, **kwargs: object) -> Self:
        """Check the user's settings and return the complete, typed configuration.

        ``config`` maps Kafka property names (or librdkafka aliases) to values; ``kwargs``
        take the same names with ``_`` for ``.`` (``linger_ms=5``). Raises ``ConfigError``
        for anything not allowed.
        """
        given = cls._gather(config, kwargs)
        values: dict[str, Any] = {name: prop.default for name, prop in cls.SCHEMA.items()}
        values.update(given)
        for name, prop in cls.SCHEMA.items():
            if prop.required and values[name] is None:
                raise ConfigError(name, f"is required: {prop.doc}")
        explicit = frozenset(given)
        cls._reconcile(values, explicit)
        typed = {cls.SCHEMA[name].attr: value for name, value in values.items()}
        return cls(**typed, explicitly_set=explicit)

    @classmethod
    def _gather(
        cls, config: Mapping[str, object] | None, kwargs: Mapping[str, object]
    ) -> dict[str, object]:
        """Resolve every given name to a property, convert its value, catch contradictions."""
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"expected a mapping of property names to values, got {config!r}")
        written: list[tuple[str, str, object]] = [
            (str(key), cls._property_name(str(key)), value) for key, value in (config or {}).items()
        ]
        written += [(key, cls._keyword_property_name(key), value) for key, value in kwargs.items()]
        given: dict[str, object] = {}
        given_as: dict[str, str] = {}
        for as_written, name, raw in written:
            value = cls.SCHEMA[name].convert(raw)
            if name in given and given[name] != value:
                raise ConfigError(
                    name,
                    f"given twice with different values: {given_as[name]}={given[name]!r} and "
                    f"{as_written}={value!r}",
                )
            given[name] = value
            given_as[name] = as_written
        return given

    @classmethod
    def _property_name(cls, name: str, *, keyword: str | None = None) -> str:
        """The schema name for ``name`` as the user wrote it (as ``keyword``, with ``_`` for
        ``.``, if given that way); ``ConfigError`` if there is none."""
        if name in cls.SCHEMA:
            return name
        shown = keyword or name
        target = LIBRDKAFKA_ALIASES.get(name)
        if target is not None:
            if target not in cls.SCHEMA:
                raise ConfigError(shown, f"stands for {target!r}, not a {cls.KIND} setting")
            logger.debug("configuration %r is taken as its Kafka name %r", shown, target)
            return target
        if name in LIBRDKAFKA_NO_EQUIVALENT:
            raise ConfigError(shown, f"has no kayak equivalent: {LIBRDKAFKA_NO_EQUIVALENT[name]}")
        owners = [kind for kind, schema in _KIND_SCHEMAS if name in schema]
        if owners:
            raise ConfigError(shown, f"is a {' and '.join(owners)} setting, not a {cls.KIND} one")
        known = [*cls.SCHEMA, *(a for a, t in LIBRDKAFKA_ALIASES.items() if t in cls.SCHEMA)]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = ""
        if close:
            hint = f"; did you mean {close[0].replace('.', '_') if keyword else close[0]!r}?"
        raise ConfigError(shown, f"is not a {cls.KIND} setting{hint}")

    @classmethod
    def _keyword_property_name(cls, keyword: str) -> str:
        """The schema name for a keyword argument (``linger.ms`` for ``linger_ms``)."""
        return cls._property_name(keyword.replace("_", "."), keyword=keyword)

    @classmethod
    def _reconcile(cls, values: dict[str, Any], explicit: frozenset[str]) -> None:
        """Rules across properties, after Java's ``postProcessParsedConfig``; may adjust
        ``values`` in place."""
        # Java: setting only reconnect.backoff.ms turns the exponential backoff off.
        if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
            logger.warning(
                "reconnect.backoff.ms is set but reconnect.backoff.max.ms is not: reconnecting "
                "with a constant %d ms backoff, as Kafka's Java client does",
                values["reconnect.backoff.ms"],
            )
            values["reconnect.backoff.max.ms"] = values["reconnect.backoff.ms"]
        for first, cap in (
            ("retry.backoff.ms", "retry.backoff.max.ms"),
            ("socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms"),
        ):
            if values[first] > values[cap]:
                logger.warning(
                    "%s (%d) is greater than %s (%d): using a constant %d ms",
                    first,
                    values[first],
                    cap,
                    values[cap],
                    values[cap],
                )

    def __getitem__(self, name: str) -> object:
        """The value of the property with Kafka name ``name``."""
        prop = self.SCHEMA.get(name)
        if prop is None:
            raise KeyError(f"{name!r} is not a {self.KIND} setting")
        return getattr(self, prop.attr)

    def as_dict(self) -> dict[str, object]:
        """Every property by Kafka name, in schema order."""
        return {name: getattr(self, prop.attr) for name, prop in self.SCHEMA.items()}


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(ClientConfig):
    """The producer's configuration (``PRODUCER``).

    As in Java: idempotence, on by default, is silently turned off by ``acks`` other than
    ``all`` or ``retries=0`` unless ``enable.idempotence`` was set explicitly (then it is an
    error); ``delivery.timeout.ms`` below ``linger.ms + request.timeout.ms`` is an error if set
    explicitly and raised to that sum otherwise.
    """

    KIND: ClassVar[str] = "producer"
    SCHEMA: ClassVar[Mapping[str, ConfigProperty]] = PRODUCER

    acks: int
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    max_request_size: int
    compression_type: str
    retries: int
    delivery_timeout_ms: int
    max_in_flight_requests_per_connection: int
    enable_idempotence: bool
    partitioner: PartitionerSpec
    transactional_id: str | None

    def make_partitioner(self) -> Partitioner:
        """A partitioner built from the ``partitioner`` setting (new state for a name)."""
        return partitioner_from_config(self.partitioner)

    @classmethod
    def _reconcile(cls, values: dict[str, Any], explicit: frozenset[str]) -> None:
        super()._reconcile(values, explicit)
        _reconcile_idempotence(values, explicit)
        _reconcile_delivery_timeout(values, explicit)


def _reconcile_idempotence(values: dict[str, Any], explicit: frozenset[str]) -> None:
    if values["enable.idempotence"]:
        # (property, its value, what the idempotent producer needs instead)
        conflicts = [
            (name, values[name], need)
            for name, need, ok in (
                ("acks", "all (-1)", values["acks"] == -1),
                ("retries", "more than 0", values["retries"] > 0),
            )
            if not ok
        ]
        if conflicts and "enable.idempotence" in explicit:
            name, value, need = conflicts[0]
            raise ConfigError(
                name,
                f"is {value}, but the idempotent producer (enable.idempotence=true) needs "
                f"{need}; set enable.idempotence=false to use {name}={value}",
            )
        if conflicts:
            logger.info(
                "idempotence disabled because %s",
                " and ".join(
                    f"{name}={value} (it needs {need})" for name, value, need in conflicts
                ),
            )
            values["enable.idempotence"] = False
        elif values["max.in.flight.requests.per.connection"] > 5:
            raise ConfigError(
                "max.in.flight.requests.per.connection",
                f"is {values['max.in.flight.requests.per.connection']}, but the idempotent "
                "producer allows at most 5; set enable.idempotence=false to allow more",
            )
    if values["transactional.id"] is not None and not values["enable.idempotence"]:
        raise ConfigError(
            "transactional.id",
            "needs the idempotent producer, but enable.idempotence is off (it needs acks=all "
            "and retries > 0)",
        )


def _reconcile_delivery_timeout(values: dict[str, Any], explicit: frozenset[str]) -> None:
    # A record may wait linger.ms before it is sent and request.timeout.ms for the answer: a
    # shorter delivery timeout could expire records that never had a chance.
    floor = min(values["linger.ms"] + values["request.timeout.ms"], INT_MAX)
    if values["delivery.timeout.ms"] >= floor:
        return
    if "delivery.timeout.ms" in explicit:
        raise ConfigError(
            "delivery.timeout.ms",
            f"{values['delivery.timeout.ms']} is less than linger.ms + request.timeout.ms = "
            f"{floor}; it must be at least that",
        )
    logger.warning(
        "delivery.timeout.ms defaults to %d ms, less than linger.ms + request.timeout.ms; "
        "using %d ms",
        values["delivery.timeout.ms"],
        floor,
    )
    values["delivery.timeout.ms"] = floor


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(ClientConfig):
    """The consumer's configuration (``CONSUMER``).

    As in Java: without a ``group.id``, ``enable.auto.commit`` is off unless set (and setting
    it to true is an error). ``heartbeat.interval.ms`` must be below ``session.timeout.ms``.
    """

    KIND: ClassVar[str] = "consumer"
    SCHEMA: ClassVar[Mapping[str, ConfigProperty]] = CONSUMER

    group_id: str | None
    group_instance_id: str | None
    auto_offset_reset: str
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    max_poll_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    partition_assignment_strategy: tuple[str, ...]
    isolation_level: str
    check_crcs: bool
    client_rack: str
    default_api_timeout_ms: int
    fetch_pipeline_depth: int
    prefetch_max_bytes: int

    @classmethod
    def _reconcile(cls, values: dict[str, Any], explicit: frozenset[str]) -> None:
        super()._reconcile(values, explicit)
        if values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
            raise ConfigError(
                "heartbeat.interval.ms",
                f"{values['heartbeat.interval.ms']} is not lower than session.timeout.ms "
                f"({values['session.timeout.ms']}); a third of it or less is usual",
            )
        if values["group.id"] is None:
            if "enable.auto.commit" not in explicit:
                values["enable.auto.commit"] = False
            elif values["enable.auto.commit"]:
                raise ConfigError(
                    "enable.auto.commit",
                    "cannot be true without a group.id: there is no group to commit offsets to",
                )


@dataclass(frozen=True, kw_only=True)
class AdminConfig(ClientConfig):
    """The admin client's configuration (``ADMIN``).

    As in Java: ``default.api.timeout.ms`` below ``request.timeout.ms`` is an error if set
    explicitly and raised to it otherwise.
    """

    KIND: ClassVar[str] = "admin"
    SCHEMA: ClassVar[Mapping[str, ConfigProperty]] = ADMIN

    retries: int
    default_api_timeout_ms: int

    @classmethod
    def _reconcile(cls, values: dict[str, Any], explicit: frozenset[str]) -> None:
        super()._reconcile(values, explicit)
        api_timeout, request_timeout = (
            values["default.api.timeout.ms"],
            values["request.timeout.ms"],
        )
        if api_timeout >= request_timeout:
            return
        if "default.api.timeout.ms" in explicit:
            raise ConfigError(
                "default.api.timeout.ms",
                f"{api_timeout} is less than request.timeout.ms ({request_timeout}); it must be "
                "at least that",
            )
        logger.warning(
            "default.api.timeout.ms defaults to %d ms, less than request.timeout.ms; using %d ms",
            api_timeout,
            request_timeout,
        )
        values["default.api.timeout.ms"] = request_timeout
