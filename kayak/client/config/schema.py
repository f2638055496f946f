"""The schema tables: every property each client kind takes, and the librdkafka aliases.

``COMMON`` holds what every client takes; ``PRODUCER``, ``CONSUMER`` and ``ADMIN`` add each
kind's own properties to it. ``LIBRDKAFKA_ALIASES`` maps librdkafka names to their Kafka
equivalent and ``LIBRDKAFKA_NO_EQUIVALENT`` says what to use instead of those without one. The
typed configurations checking a user's settings against these are in
:mod:`kayak.client.config.typed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from kayak.client.config.properties import (
    ASSIGNORS,
    INT_MAX,
    LONG_MAX,
    ConfigProperty,
    ValueKind,
    parse_acks,
    parse_assignors,
    parse_bootstrap,
    parse_identification,
    parse_jaas,
    parse_non_empty_str,
    parse_partitioner,
    parse_sasl_mechanism,
    parse_secret,
    parse_security_protocol,
    parse_stats_callback,
    parse_token_callback,
)
from kayak.client.security.config import KAFKA_SECURITY_PROTOCOLS, SASL_MECHANISMS

# --------------------------------------------------------------------------------------------
# Builders of table entries
# --------------------------------------------------------------------------------------------


def _int(name: str, default: int, doc: str, *, minimum: int = 0, **extra: Any) -> ConfigProperty:
    """A Java INT property (int32 on the wire)."""
    return ConfigProperty(name, ValueKind.INT, default, doc, minimum, INT_MAX, **extra)


def _long(name: str, default: int, doc: str, *, minimum: int = 0, **extra: Any) -> ConfigProperty:
    """A Java LONG property."""
    return ConfigProperty(name, ValueKind.INT, default, doc, minimum, LONG_MAX, **extra)


def _optional_str(name: str, doc: str, **extra: Any) -> ConfigProperty:
    return ConfigProperty(name, ValueKind.STR, None, doc, nullable=True, **extra)


def _secret(name: str, doc: str) -> ConfigProperty:
    return _optional_str(name, doc, parser=parse_secret)


def _bool(name: str, default: bool, doc: str) -> ConfigProperty:
    return ConfigProperty(name, ValueKind.BOOL, default, doc)


def _enum(name: str, default: str, choices: tuple[str, ...], doc: str) -> ConfigProperty:
    return ConfigProperty(name, ValueKind.ENUM, default, doc, choices=choices)


def _table(*properties: ConfigProperty) -> Mapping[str, ConfigProperty]:
    return MappingProxyType({prop.name: prop for prop in properties})


_STORE_TYPES = ("JKS", "PKCS12", "PEM")

_SECURITY_PROPERTIES = (
    _optional_str(
        "ssl.ca.location",
        "PEM file of the CA certificate(s) that signed the brokers' certificates; unset: the "
        "system's trusted CAs.",
    ),
    _optional_str(
        "ssl.certificate.location",
        "PEM file of the client's certificate (chain), for mutual TLS.",
    ),
    _optional_str("ssl.key.location", "PEM file of the client certificate's private key."),
    _secret("ssl.key.password", "Password of an encrypted ssl.key.location (or keystore) key."),
    ConfigProperty(
        "ssl.endpoint.identification.algorithm",
        ValueKind.ENUM,
        "https",
        "https: check that the broker's certificate is for the host name connected to; "
        "none (or empty, as in Java) turns that check off. The chain is always verified.",
        choices=("https", "none"),
        parser=parse_identification,
    ),
    _optional_str(
        "ssl.truststore.location",
        "Java's name for the CA file; kayak reads it only with ssl.truststore.type=PEM.",
    ),
    _enum("ssl.truststore.type", "JKS", _STORE_TYPES, "Format of ssl.truststore.location."),
    _optional_str(
        "ssl.keystore.location",
        "Java's name for the client certificate and key in one file; kayak reads it only with "
        "ssl.keystore.type=PEM (key password: ssl.key.password).",
    ),
    _enum("ssl.keystore.type", "JKS", _STORE_TYPES, "Format of ssl.keystore.location."),
    ConfigProperty(
        "sasl.mechanism",
        ValueKind.ENUM,
        "PLAIN",
        "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER. Java's default, "
        "GSSAPI (Kerberos), is not supported, so kayak's default is PLAIN.",
        choices=SASL_MECHANISMS,
        parser=parse_sasl_mechanism,
    ),
    _optional_str("sasl.username", "SASL user name (librdkafka's name; or sasl.jaas.config)."),
    _secret("sasl.password", "SASL password (librdkafka's name; or sasl.jaas.config)."),
    _optional_str(
        "sasl.jaas.config",
        "Java's login configuration, e.g. 'org.apache.kafka.common.security.plain."
        'PlainLoginModule required username="u" password="p";\' (PlainLoginModule, '
        "ScramLoginModule, OAuthBearerLoginModule with unsecuredLoginStringClaim_sub).",
        parser=parse_jaas,
    ),
    _optional_str(
        "sasl.oauthbearer.config",
        "librdkafka's: a string passed to oauth_cb when it takes an argument.",
    ),
    ConfigProperty(
        "oauth_cb",
        ValueKind.CALLABLE,
        None,
        "OAUTHBEARER token callback (confluent-kafka's name): returns (token, expiry in "
        "seconds since the epoch); called again for each re-authentication. May be async.",
        nullable=True,
        parser=parse_token_callback,
    ),
)

_COMMON_PROPERTIES = (
    ConfigProperty(
        "bootstrap.servers",
        ValueKind.LIST,
        None,
        "Brokers to fetch cluster metadata from first: 'host:port,...' or a list; "
        "'[::1]:9092' for IPv6. Parsed into (host, port) pairs.",
        required=True,
        parser=parse_bootstrap,
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
        "How to talk to brokers: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL "
        "authentication, over TLS for SASL_SSL).",
        choices=KAFKA_SECURITY_PROTOCOLS,
        parser=parse_security_protocol,
    ),
    *_SECURITY_PROPERTIES,
    _int(
        "statistics.interval.ms",
        0,
        "librdkafka's: call stats_cb with the client's statistics() this often; 0 turns "
        "periodic statistics off (statistics() can still be called at any time).",
    ),
    ConfigProperty(
        "stats_cb",
        ValueKind.CALLABLE,
        None,
        "Called every statistics.interval.ms with the statistics dict (confluent-kafka's "
        "name; it passes JSON text, kayak the dict itself: json.dumps it for the text). May "
        "be async; runs on the client's event loop (the sync facades' loop thread).",
        nullable=True,
        parser=parse_stats_callback,
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

_ALLOW_AUTO_CREATE_TOPICS = _bool(
    "allow.auto.create.topics",
    True,
    "Ask the broker to create a missing topic (with its defaults) when its metadata is "
    "requested, as Kafka's Java clients do; the broker's auto.create.topics.enable decides.",
)

_PRODUCER_PROPERTIES = (
    ConfigProperty(
        "acks",
        ValueKind.ENUM,
        -1,
        "Replicas that must have a record before the leader acknowledges it: all (-1), 1 or 0. "
        "Stored as the int -1, 0 or 1.",
        choices=("all", "-1", "0", "1"),
        parser=parse_acks,
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
        parser=parse_partitioner,
    ),
    ConfigProperty(
        "transactional.id",
        ValueKind.STR,
        None,
        "Identity for transactions across producer restarts; implies idempotence.",
        nullable=True,
        parser=parse_non_empty_str,
    ),
    _int(
        "transaction.timeout.ms",
        60_000,
        "How long the transaction coordinator lets a transaction stay open before it aborts "
        "it (at most the broker's transaction.max.timeout.ms).",
        minimum=1,
    ),
    _ALLOW_AUTO_CREATE_TOPICS,
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
        parser=parse_non_empty_str,
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
        choices=ASSIGNORS,
        parser=parse_assignors,
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
    _ALLOW_AUTO_CREATE_TOPICS,
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

KIND_SCHEMAS: tuple[tuple[str, Mapping[str, ConfigProperty]], ...] = (
    ("producer", PRODUCER),
    ("consumer", CONSUMER),
    ("admin", ADMIN),
)
"""Each client kind with its table, to tell a user which kind a misplaced name belongs to."""

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
        "sasl.mechanisms": "sasl.mechanism",
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
