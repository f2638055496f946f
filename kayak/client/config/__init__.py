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

The package's modules, each building on the one before: ``properties`` (the property model and
the conversion of one value), ``schema`` (the tables of properties and aliases) and ``typed``
(the typed configurations, where a user's settings come in, and the rules across properties).
"""

from __future__ import annotations

from kayak.client.config.properties import ConfigProperty, ValueKind, parse_bootstrap_servers
from kayak.client.config.schema import (
    ADMIN,
    COMMON,
    CONSUMER,
    LIBRDKAFKA_ALIASES,
    LIBRDKAFKA_NO_EQUIVALENT,
    PRODUCER,
)
from kayak.client.config.typed import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig

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
    "admin_share",
    "parse_bootstrap_servers",
]


def admin_share(properties: dict[str, str]) -> dict[str, str]:
    """The admin client's share of a producer's or consumer's properties: what every client
    takes (``security.protocol``, ``sasl.*``, ``ssl.*``, timeouts, ``client.id``), without
    ``acks``, ``linger.ms`` and the like, which the admin client refuses."""
    return {
        name: value
        for name, value in properties.items()
        if name in ADMIN or LIBRDKAFKA_ALIASES.get(name) in ADMIN
    }
