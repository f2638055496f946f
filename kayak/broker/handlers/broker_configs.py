"""AlterConfigs and IncrementalAlterConfigs on a broker resource, answered as Kafka answers.

Kafka's checks, in its order (``DynamicBrokerConfig.validateConfigs``): a Kafka config that
cannot change at runtime is refused ("Cannot update these configs dynamically"); a keystore
or truststore setting without a listener prefix is refused; values must parse as their type;
per-broker configs cannot be set at the cluster-default level (empty resource name). What
passes is accepted: Kafka's dynamic configs kayak has no use for (Kerberos, thread pools, log
cleaner, quotas, ...) and names Kafka does not know at all (custom plugin configs), as a
Kafka broker accepts them. kayak keeps those in memory, per broker, and DescribeConfigs shows
them (DYNAMIC_BROKER_CONFIG, or DYNAMIC_DEFAULT_BROKER_CONFIG for the empty name) until the
broker stops; they change nothing. The dynamic configs kayak does act on (listeners,
connection limits, SASL mechanisms, the topic defaults) are refused unless they leave the
value as it is: kayak applies no broker change at runtime.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence

from kayak.broker.context import BrokerContext
from kayak.broker.handlers.config_entries import (
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    Entry,
    is_dynamic,
    is_known_broker_config,
    listener_only,
    unused_dynamic_type,
)
from kayak.broker.log.config_defs import ConfigType, parse_value
from kayak.errors import ConfigError, ErrorCode

log = logging.getLogger(__name__)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_VERBS = {APPEND: "append", SUBTRACT: "subtract"}
Change = tuple[str, int, str | None]  # (name, operation, value)

# Per running broker: resource name ("" = cluster default, else the broker id) -> config.
_ACCEPTED: weakref.WeakKeyDictionary[BrokerContext, dict[str, dict[str, str]]] = (
    weakref.WeakKeyDictionary()
)


def accepted_configs(broker: BrokerContext) -> dict[str, dict[str, str]]:
    """The broker configs accepted at runtime and kept (see the module docstring)."""
    return _ACCEPTED.setdefault(broker, {"": {}, str(broker.node_id): {}})


def kept_entries(broker: BrokerContext, described: set[str]) -> list[Entry]:
    """Entries for kept configs that the broker's own list does not describe."""
    kept = accepted_configs(broker)
    entries: dict[str, Entry] = {}
    for resource, source in (("", DYNAMIC_DEFAULT_BROKER_CONFIG),
                             (str(broker.node_id), DYNAMIC_BROKER_CONFIG)):  # fmt: skip
        for name, value in kept[resource].items():
            if name in described:
                continue
            kind = unused_dynamic_type(name) or ConfigType.STRING
            sensitive = kind is ConfigType.PASSWORD
            shown = None if sensitive else value
            entries[name] = Entry(name, shown, source, kind, sensitive=sensitive,
                                  synonyms=((name, shown, source),))  # fmt: skip
    return [entries[name] for name in sorted(entries)]


def with_kept(broker: BrokerContext, entries: list[Entry]) -> list[Entry]:
    """The broker's entries with kept runtime values put in front of the configured ones."""
    kept = accepted_configs(broker)
    own = kept[str(broker.node_id)]
    default = kept[""]
    out = []
    for entry in entries:
        layers = [(own, DYNAMIC_BROKER_CONFIG), (default, DYNAMIC_DEFAULT_BROKER_CONFIG)]
        synonyms = [(entry.name, layer[entry.name], source)
                    for layer, source in layers if entry.name in layer]  # fmt: skip
        if synonyms:
            entry = Entry(entry.name, synonyms[0][1], synonyms[0][2], entry.type,
                          entry.read_only, entry.sensitive,
                          tuple(synonyms) + entry.synonyms)  # fmt: skip
        out.append(entry)
    return out + kept_entries(broker, {entry.name for entry in entries})


def refusal(
    broker: BrokerContext,
    resource: str,
    changes: Sequence[Change],
    current: dict[str, Entry],
) -> tuple[int, str] | None:
    """Kafka's answer to these changes of broker resource ``resource`` (None: accepted),
    checked in Kafka's order."""
    names = [name for name, _, _ in changes]
    static = sorted(n for n in names if is_known_broker_config(n) and not is_dynamic(n))
    if static:
        static_names = ", ".join(static)
        return ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {static_names}"
    prefixed = sorted(n for n in names if listener_only(n))
    if prefixed:
        return ErrorCode.INVALID_REQUEST, (
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {', '.join(prefixed)}"
        )
    for name, operation, value in changes:
        why = _bad_change(name, operation, value)
        if why is not None:
            return why
    # Configs kayak acts on: a change that is not a no-op would need applying.
    acted = sorted(
        name
        for name, operation, value in changes
        if is_dynamic(name) and unused_dynamic_type(name) is None
        and not _no_op(current.get(name), operation, value)
    )  # fmt: skip
    if acted:
        return ErrorCode.INVALID_REQUEST, (
            f"kayak does not change broker configs at runtime: {', '.join(acted)}; start "
            "`kayak broker` with the new values (topic configs can be changed at runtime)"
        )
    if resource == "" and (per_broker := sorted(n for n in names if _per_broker(n))):
        return ErrorCode.INVALID_REQUEST, (
            f"Cannot update these configs at default cluster level, broker id must be "
            f"specified: {', '.join(per_broker)}"
        )
    return None


def keep(
    broker: BrokerContext, resource: str, changes: Sequence[Change], replace_all: bool
) -> None:
    """Apply accepted ``changes`` to what is kept for ``resource`` (AlterConfigs replaces
    the whole set; IncrementalAlterConfigs edits it)."""
    kept = accepted_configs(broker)[resource]
    if replace_all:
        kept.clear()
    for name, operation, value in changes:
        if is_dynamic(name) and unused_dynamic_type(name) is None:
            continue  # a no-op on a config kayak acts on: nothing to keep
        if operation == DELETE:
            kept.pop(name, None)
        elif operation == SET and value is not None:
            kept[name] = value
        elif operation in _VERBS:
            items = [i for i in kept.get(name, "").split(",") if i]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if operation == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            kept[name] = ",".join(items)
        log.info("broker config %s %s at runtime: kept, kayak does not use it", name,
                 "removed" if operation == DELETE else "set")  # fmt: skip


def _bad_change(name: str, operation: int, value: str | None) -> tuple[int, str] | None:
    kind = unused_dynamic_type(name)
    if operation == SET and value is None:
        return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}"
    if operation in _VERBS and kind is not ConfigType.LIST:
        return ErrorCode.INVALID_CONFIG, (
            f"Config value {_VERBS[operation]} is not allowed for config key: {name}"
        )
    if operation not in (SET, DELETE, APPEND, SUBTRACT):
        return ErrorCode.INVALID_REQUEST, f"unknown config operation {operation} on {name}"
    if operation == SET and kind is not None and value is not None:
        try:
            parse_value(name, kind, value)
        except ConfigError as exc:
            why = exc.message.partition(": ")[2] or exc.message
            return ErrorCode.INVALID_REQUEST, (
                f"Invalid value {value} for configuration {name}: {why}"
            )
    return None


def _no_op(entry: Entry | None, operation: int, value: str | None) -> bool:
    if entry is None:
        return False
    if operation == SET:
        return value == entry.value
    return operation == DELETE  # nothing was set at runtime, so nothing to delete


def _per_broker(name: str) -> bool:
    """Kafka's per-broker configs (listener and SSL/SASL settings), which the cluster-wide
    default level refuses."""
    return (name.startswith(("ssl.", "sasl.")) or name in _PER_BROKER) and name not in (
        "max.connections", "max.connection.creation.rate", "num.network.threads",
    )  # fmt: skip


_PER_BROKER = frozenset(
    {"listeners", "listener.security.protocol.map", "principal.builder.class",
     "advertised.listeners"}
)  # fmt: skip
