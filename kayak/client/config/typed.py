"""The typed configurations (``ClientConfig`` and its producer, consumer and admin kinds).

``from_user`` resolves each name the user gave (Kafka's, a keyword with ``_`` for ``.``, or a
librdkafka alias) to a property of the kind's schema, converts its value, fills in defaults,
then applies the rules across properties Java's clients apply (``_reconcile``: idempotence and
``acks``, timeouts that must cover others, the TLS and SASL settings) before freezing the
result.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from kayak.client.config.properties import INT_MAX, ConfigProperty
from kayak.client.config.schema import (
    ADMIN,
    COMMON,
    CONSUMER,
    KIND_SCHEMAS,
    LIBRDKAFKA_ALIASES,
    LIBRDKAFKA_NO_EQUIVALENT,
    PRODUCER,
)
from kayak.client.partitioner import Partitioner, PartitionerSpec, partitioner_from_config
from kayak.client.security.config import (
    JaasConfig,
    Secret,
    SecurityConfig,
    TokenCallback,
    security_config,
    security_warnings,
)
from kayak.client.statistics import StatsCallback
from kayak.errors import ConfigError

# The package's one logger, under the name it had before the split, so logging set up for
# kayak.client.config (levels, filters) keeps seeing these records.
logger = logging.getLogger("kayak.client.config")


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
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: Secret | None = None
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_truststore_location: str | None = None
    ssl_truststore_type: str = "JKS"
    ssl_keystore_location: str | None = None
    ssl_keystore_type: str = "JKS"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    sasl_jaas_config: JaasConfig | None = None
    sasl_oauthbearer_config: str | None = None
    oauth_cb: TokenCallback | None = None
    statistics_interval_ms: int = 0
    stats_cb: StatsCallback | None = None
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
        owners = [kind for kind, schema in KIND_SCHEMAS if name in schema]
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
        if keyword in cls.SCHEMA:  # a name with '_' in it already (oauth_cb)
            return keyword
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
        security_config(values, explicit)  # raises ConfigError for what is missing or contradicts
        # A configuration rebuilt from as_dict() names every property: warn only about values.
        changed = frozenset(n for n in explicit if values[n] != cls.SCHEMA[n].default)
        for warning in security_warnings(values, changed):
            logger.warning("%s", warning)
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

    @functools.cached_property
    def security(self) -> SecurityConfig:
        """TLS and SASL settings put together (what connections need), built once."""
        return security_config(self.as_dict(), self.explicitly_set)

    def __getitem__(self, name: str) -> object:
        """The value of the property with Kafka name ``name``."""
        prop = self.SCHEMA.get(name)
        if prop is None:
            raise KeyError(f"{name!r} is not a {self.KIND} setting")
        return getattr(self, prop.attr)

    def as_dict(self) -> dict[str, object]:
        """Every property by Kafka name, in schema order. Passwords are ``Secret`` objects
        (shown masked); they go back into ``from_user`` as they are."""
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
    transaction_timeout_ms: int
    allow_auto_create_topics: bool

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
    transactional = values["transactional.id"] is not None
    if transactional and "enable.idempotence" in explicit and not values["enable.idempotence"]:
        raise ConfigError(
            "enable.idempotence",
            "is false, but transactional.id is set and transactions need the idempotent "
            "producer: leave enable.idempotence unset (or true), or unset transactional.id",
        )
    if transactional and not values["enable.idempotence"]:
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
    allow_auto_create_topics: bool

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
