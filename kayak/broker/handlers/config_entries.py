"""What DescribeConfigs shows: each topic or broker configuration with its source.

A topic's configuration comes from its own override (DYNAMIC_TOPIC_CONFIG), else from the
broker's default: STATIC_BROKER_CONFIG when kayak's broker was started with a value other
than Kafka's default, DEFAULT_CONFIG when it is Kafka's default. Broker configurations are
the ones kayak has (with their values) plus Kafka's defaults for those tools read; a broker
configuration is read-only unless Kafka can change it at runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kayak.broker.config import BrokerConfig
from kayak.broker.group import GroupCoordinatorConfig
from kayak.broker.log import LogConfig
from kayak.broker.log.config_defs import INT32_MAX, LONG_MAX, TOPIC_CONFIGS, ConfigType

# DescribeConfigs' config_source codes
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5

_KAFKA_LOG_DEFAULTS = LogConfig().to_properties()


@dataclass(frozen=True, slots=True)
class Entry:
    """One described configuration and where its value comes from."""

    name: str
    value: str | None
    source: int
    type: ConfigType
    read_only: bool = False
    sensitive: bool = False
    # (name, value, source) from the most to the least specific, the entry's own first
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


def topic_entries(
    properties: dict[str, str], overrides: dict[str, str], broker_log: LogConfig
) -> Iterator[Entry]:
    """Every topic configuration: ``properties`` are the topic's effective values."""
    broker_values = broker_log.to_properties()
    for name, value in properties.items():
        definition = TOPIC_CONFIGS[name]
        server, broker_value = definition.server_property, broker_values[name]
        kafka_default = _KAFKA_LOG_DEFAULTS[name]
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, value, DYNAMIC_TOPIC_CONFIG))
        if broker_value != kafka_default:
            synonyms.append((server, broker_value, STATIC_BROKER_CONFIG))
        synonyms.append((server, kafka_default, DEFAULT_CONFIG))
        yield Entry(name, value, synonyms[0][2], definition.type, synonyms=tuple(synonyms))


# -- the broker ---------------------------------------------------------------------------------

_B, _S, _I, _L, _D, _LIST, _P = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)

# Kafka's broker configurations that its tools and UIs read, with Kafka 3.9's defaults; kayak
# answers those it has with its own values (see broker_entries).
KAFKA_BROKER_DEFAULTS: dict[str, tuple[ConfigType, str | None]] = {
    "advertised.listeners": (_S, None),
    "allow.everyone.if.no.acl.found": (_B, "false"),
    "auto.create.topics.enable": (_B, "true"),
    "auto.leader.rebalance.enable": (_B, "true"),
    "background.threads": (_I, "10"),
    "broker.id": (_I, "-1"),
    "broker.rack": (_S, None),
    "connection.failed.authentication.delay.ms": (_I, "100"),
    "connections.max.idle.ms": (_L, "600000"),
    "connections.max.reauth.ms": (_L, "0"),
    "controlled.shutdown.enable": (_B, "true"),
    "default.replication.factor": (_I, "1"),
    "delete.topic.enable": (_B, "true"),
    "fetch.max.bytes": (_I, "57671680"),
    "group.coordinator.rebalance.protocols": (_LIST, "classic,consumer"),
    "group.initial.rebalance.delay.ms": (_I, "3000"),
    "group.max.session.timeout.ms": (_I, "1800000"),
    "group.max.size": (_I, str(INT32_MAX)),
    "group.min.session.timeout.ms": (_I, "6000"),
    "listeners": (_S, "PLAINTEXT://:9092"),
    "log.cleaner.enable": (_B, "true"),
    "log.dir": (_S, "/tmp/kafka-logs"),
    "log.dirs": (_S, None),
    "log.flush.scheduler.interval.ms": (_L, str(LONG_MAX)),
    "log.retention.check.interval.ms": (_L, "300000"),
    "log.retention.hours": (_I, "168"),
    "log.retention.minutes": (_I, None),
    "log.roll.hours": (_I, "168"),
    "max.connections": (_I, str(INT32_MAX)),
    "max.connections.per.ip": (_I, str(INT32_MAX)),
    "node.id": (_I, "-1"),
    "num.io.threads": (_I, "8"),
    "num.network.threads": (_I, "3"),
    "num.partitions": (_I, "1"),
    "num.recovery.threads.per.data.dir": (_I, "1"),
    "num.replica.fetchers": (_I, "1"),
    "offset.metadata.max.bytes": (_I, "4096"),
    "offsets.retention.minutes": (_I, "10080"),
    "offsets.topic.num.partitions": (_I, "50"),
    "offsets.topic.replication.factor": (_S, "3"),
    "process.roles": (_LIST, ""),
    "queued.max.requests": (_I, "500"),
    "replica.fetch.max.bytes": (_I, "1048576"),
    "replica.lag.time.max.ms": (_L, "30000"),
    "sasl.enabled.mechanisms": (_LIST, "GSSAPI"),
    "sasl.server.max.receive.size": (_I, "524288"),
    "socket.receive.buffer.bytes": (_I, "102400"),
    "socket.request.max.bytes": (_I, "104857600"),
    "socket.send.buffer.bytes": (_I, "102400"),
    "ssl.key.password": (_P, None),
    "super.users": (_S, None),
    "transaction.state.log.min.isr": (_I, "2"),
    "transaction.state.log.num.partitions": (_I, "50"),
    "transaction.state.log.replication.factor": (_S, "3"),
}

_BROKER_TOPIC_DEFAULTS = frozenset(d.server_property for d in TOPIC_CONFIGS.values())

# Configurations a Kafka broker changes at runtime (DynamicBrokerConfig); every other one
# is read-only, and altering it is refused as Kafka refuses it.
_DYNAMIC = frozenset(
    {d.server_property for d in TOPIC_CONFIGS.values()}
    - {"log.message.format.version", "leader.replication.throttled.replicas",
       "follower.replication.throttled.replicas"}
    | {"advertised.listeners", "background.threads", "listeners", "max.connections",
       "max.connections.per.ip", "num.io.threads", "num.network.threads",
       "num.recovery.threads.per.data.dir", "num.replica.fetchers", "sasl.enabled.mechanisms",
       "ssl.key.password", "log.retention.hours", "log.retention.minutes", "log.roll.hours",
       "log.flush.scheduler.interval.ms"}
)  # fmt: skip


# Kafka's dynamic broker configurations kayak has no use for (Kafka 3.9's
# DynamicBrokerConfig.AllDynamicConfigs less those kayak acts on), with their types: a change
# is accepted and kept, as a Kafka broker accepts it (see broker_configs).
_UNUSED_DYNAMIC: dict[str, ConfigType] = {
    "background.threads": _I, "config.providers": _LIST,
    "follower.replication.throttled.rate": _L, "leader.replication.throttled.rate": _L,
    "listener.security.protocol.map": _S, "log.cleaner.backoff.ms": _L,
    "log.cleaner.dedupe.buffer.size": _L, "log.cleaner.io.buffer.load.factor": _D,
    "log.cleaner.io.buffer.size": _I, "log.cleaner.io.max.bytes.per.second": _D,
    "log.cleaner.threads": _I, "log.flush.scheduler.interval.ms": _L,
    "max.connection.creation.rate": _I, "max.connections.per.ip.overrides": _S,
    "metric.reporters": _LIST, "num.io.threads": _I, "num.network.threads": _I,
    "num.recovery.threads.per.data.dir": _I, "num.replica.fetchers": _I,
    "principal.builder.class": ConfigType.CLASS, "producer.id.expiration.ms": _I,
    "remote.log.index.file.cache.total.size.bytes": _L,
    "remote.log.manager.copy.max.bytes.per.second": _L,
    "remote.log.manager.fetch.max.bytes.per.second": _L,
    "replica.alter.log.dirs.io.max.bytes.per.second": _L,
    "sasl.jaas.config": _P, "sasl.kerberos.kinit.cmd": _S,
    "sasl.kerberos.min.time.before.relogin": _L, "sasl.kerberos.principal.to.local.rules": _LIST,
    "sasl.kerberos.service.name": _S, "sasl.kerberos.ticket.renew.jitter": _D,
    "sasl.kerberos.ticket.renew.window.factor": _D,
    "sasl.login.refresh.buffer.seconds": ConfigType.SHORT,
    "sasl.login.refresh.min.period.seconds": ConfigType.SHORT,
    "sasl.login.refresh.window.factor": _D, "sasl.login.refresh.window.jitter": _D,
    "sasl.mechanism.inter.broker.protocol": _S, "ssl.cipher.suites": _LIST,
    "ssl.client.auth": _S, "ssl.enabled.protocols": _LIST,
    "ssl.endpoint.identification.algorithm": _S, "ssl.engine.factory.class": ConfigType.CLASS,
    "ssl.keymanager.algorithm": _S, "ssl.protocol": _S, "ssl.provider": _S,
    "ssl.secure.random.implementation": _S, "ssl.trustmanager.algorithm": _S,
    "transaction.partition.verification.enable": _B,
}  # fmt: skip

# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix
# (listener.name.NAME.ssl.keystore.location), refused without one.
_LISTENER_ONLY = frozenset(
    {"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
     "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
     "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates"}
)  # fmt: skip

# Static Kafka broker configurations tools are known to try to alter, besides those above.
_STATIC = frozenset(
    {"zookeeper.connect", "controller.quorum.voters", "controller.listener.names",
     "inter.broker.listener.name", "inter.broker.protocol.version", "log.message.format.version",
     "authorizer.class.name", "delegation.token.secret.key", "reserved.broker.max.id"}
)  # fmt: skip


def is_dynamic(name: str) -> bool:
    """Whether a Kafka broker accepts a runtime change of broker configuration ``name``."""
    return name in _DYNAMIC or name in _UNUSED_DYNAMIC or name in _LISTENER_ONLY


def unused_dynamic_type(name: str) -> ConfigType | None:
    """The type of a dynamic broker configuration kayak does not use (None: kayak uses it,
    or it is not one)."""
    return _UNUSED_DYNAMIC.get(name)


def listener_only(name: str) -> bool:
    """Whether ``name`` may change at runtime only with a listener prefix (keystores)."""
    return name in _LISTENER_ONLY


def is_known_broker_config(name: str) -> bool:
    """Whether ``name`` is a Kafka broker configuration kayak knows (an unknown one is a
    custom config, which Kafka accepts)."""
    return (
        name in KAFKA_BROKER_DEFAULTS or name in _BROKER_TOPIC_DEFAULTS or name in _STATIC
        or is_dynamic(name)
    )  # fmt: skip


def broker_entries(config: BrokerConfig, groups: GroupCoordinatorConfig | None) -> list[Entry]:
    """Every broker configuration kayak describes, sorted by name."""
    kayak = _kayak_values(config, groups)
    kinds = dict(KAFKA_BROKER_DEFAULTS)
    defaults = {name: default for name, (_, default) in KAFKA_BROKER_DEFAULTS.items()}
    for name, definition in TOPIC_CONFIGS.items():
        kinds[definition.server_property] = (definition.type, definition.default)
        defaults[definition.server_property] = _KAFKA_LOG_DEFAULTS[name]
    # The broker's topic defaults, by their broker property names.
    for name, log_value in config.log.to_properties().items():
        kayak[TOPIC_CONFIGS[name].server_property] = log_value
    entries = []
    for name in sorted(kinds):
        kind = kinds[name][0]
        default = defaults[name]
        value: str | None = kayak.get(name, default)
        sensitive = kind is ConfigType.PASSWORD
        synonyms: list[tuple[str, str | None, int]] = []
        if value != default:
            synonyms.append((name, None if sensitive else value, STATIC_BROKER_CONFIG))
        synonyms.append((name, None if sensitive else default, DEFAULT_CONFIG))
        entries.append(
            Entry(
                name,
                None if sensitive else value,
                synonyms[0][2],
                kind,
                read_only=not is_dynamic(name),
                sensitive=sensitive,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def _kayak_values(config: BrokerConfig, groups: GroupCoordinatorConfig | None) -> dict[str, str]:
    """kayak's own values of the broker configurations it has or fixes."""
    listeners = ",".join(str(listener) for listener in config.effective_listeners)
    advertised = ",".join(str(listener) for listener in config.advertised_listeners) or None
    values: dict[str, str | None] = {
        "advertised.listeners": advertised,
        "allow.everyone.if.no.acl.found": _bool(config.allow_everyone_without_acls),
        "auto.create.topics.enable": _bool(config.auto_create_topics),
        "broker.id": str(config.node_id),
        "connection.failed.authentication.delay.ms": str(
            config.connection_failed_authentication_delay_ms
        ),
        "connections.max.idle.ms": str(config.connections_max_idle_ms),
        "connections.max.reauth.ms": str(config.connections_max_reauth_ms),
        "default.replication.factor": "1",
        "group.coordinator.rebalance.protocols": "classic",
        "group.initial.rebalance.delay.ms": str(config.group_initial_rebalance_delay_ms),
        "listeners": listeners,
        "log.cleaner.enable": _bool(config.log_cleaner_enable),
        "log.dir": str(config.data_dir),
        "log.dirs": str(config.data_dir),
        "log.retention.check.interval.ms": str(config.retention_check_interval_ms),
        "max.connections": str(config.max_connections),
        "max.connections.per.ip": str(config.max_connections_per_ip),
        "node.id": str(config.node_id),
        "num.partitions": str(config.num_partitions),
        "offsets.topic.num.partitions": str(config.shard_count),
        "offsets.topic.replication.factor": "1",
        "process.roles": "broker,controller",
        "sasl.enabled.mechanisms": ",".join(config.sasl_enabled_mechanisms),
        "sasl.server.max.receive.size": str(config.sasl_server_max_receive_size),
        "socket.request.max.bytes": str(config.socket_request_max_bytes),
        "ssl.key.password": config.ssl_key_password,
        "super.users": ";".join(config.super_users) or None,
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.replication.factor": "1",
    }
    if groups is not None:
        values["group.min.session.timeout.ms"] = str(groups.group_min_session_timeout_ms)
        values["group.max.session.timeout.ms"] = str(groups.group_max_session_timeout_ms)
        values["group.max.size"] = str(groups.group_max_size)
        values["offset.metadata.max.bytes"] = str(groups.offset_metadata_max_bytes)
    # None: kayak has no value (Kafka's default null is shown as null)
    return {name: value for name, value in values.items() if value is not None}


def _bool(value: bool) -> str:
    return "true" if value else "false"
