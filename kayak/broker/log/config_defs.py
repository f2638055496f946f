"""Every topic configuration of Kafka 3.x/4.x: its type, default, valid values, and whether
kayak acts on it.

A topic accepts each of these names (a name not here is refused, as Kafka refuses it:
"Unknown topic config name"). Values are parsed and checked with Kafka's types and ranges,
and a bad one is refused naming the configuration. Those kayak cannot act on (replication,
tiered storage, flush tuning) are stored and described like the others;
:data:`NOT_ACTED_UPON` says why for each, which README's table repeats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kayak.errors import ConfigError

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


class ConfigType(IntEnum):
    """DescribeConfigs' ``config_type`` codes (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Check = Callable[[Any], str | None]  # the parsed value -> why it is invalid, or None


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic configuration as Kafka defines it."""

    name: str
    type: ConfigType
    default: str  # as DescribeConfigs shows it
    server_property: str  # the broker-wide default's name ("Server Default Property")
    check: Check | None = None

    def parse(self, raw: object) -> Any:
        """The value as Kafka's type parses it; ConfigError naming the config otherwise."""
        value = parse_value(self.name, self.type, raw)
        if self.check is not None and (why := self.check(value)) is not None:
            raise ConfigError(self.name, f"invalid value {raw!r}: {why}")
        return value

    def normalized(self, raw: object) -> str:
        """The value as it is stored and described (lists without spaces, booleans lower)."""
        return format_value(self.type, self.parse(raw))


def parse_value(name: str, kind: ConfigType, raw: object) -> Any:
    """``raw`` (a string from a request, or a Python value) as a value of ``kind``."""
    text = str(raw).strip() if not isinstance(raw, bool) else str(raw).lower()
    wrong = f"invalid value {raw!r}: "
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ConfigError(name, wrong + "Expected value to be either true or false")
        return text.lower() == "true"
    if kind in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        low, high = {
            ConfigType.INT: (INT32_MIN, INT32_MAX),
            ConfigType.SHORT: (-(2**15), 2**15 - 1),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[kind]
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not low <= number <= high or not re.fullmatch(r"[+-]?\d+", text):
            raise ConfigError(name, wrong + f"Not a number of type {kind.name}")
        return number
    if kind is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(name, wrong + "Not a number of type DOUBLE") from None
    if kind is ConfigType.LIST:
        return [item.strip() for item in text.split(",") if item.strip()] if text else []
    return text


def format_value(kind: ConfigType, value: Any) -> str:
    if kind is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if kind is ConfigType.LIST:
        return ",".join(value)
    if kind is ConfigType.DOUBLE:
        return repr(float(value))
    return str(value)


# -- validators (Kafka's ConfigDef validators, by what they say) -----------------------------


def at_least(low: int | float) -> Check:
    def check(value: Any) -> str | None:
        return None if value >= low else f"Value must be at least {low}"

    return check


def between(low: int | float, high: int | float) -> Check:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"Value must be in the range [{low}, {high}]"

    return check


def one_of(*allowed: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"

    return check


def list_of(*allowed: str, empty: bool = True) -> Check:
    def check(value: Any) -> str | None:
        if not value and not empty:
            return "Empty list not allowed"
        bad = [item for item in value if item not in allowed]
        return f"Invalid value {bad[0]}; must be one of [{', '.join(allowed)}]" if bad else None

    return check


def _gzip_level(value: Any) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be in the range [1, 9] or -1"


_REPLICA = re.compile(r"\d+:\d+")


def _throttled_replicas(value: Any) -> str | None:
    if value == ["*"] or all(_REPLICA.fullmatch(item) for item in value):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


# Kafka 3.9's MetadataVersion: each release and how many internal versions (-IV0, -IV1, ...)
# it had; "0.8.0" to "0.9.0" had none.
_RELEASE_IVS = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1,
    "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3,
    "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}  # fmt: skip
KAFKA_VERSIONS = frozenset(
    [
        *_RELEASE_IVS,
        *(f"{release}-IV{n}" for release, ivs in _RELEASE_IVS.items() for n in range(ivs)),
    ]
)


def _message_format_version(value: Any) -> str | None:
    """Kafka 3.x's check (``MetadataVersion.fromVersionString``): the first three parts of a
    0.x version, the first two of a later one, must name a known version, so ``0.10.0.0``
    and ``2.8.1`` pass and ``9.9`` does not. Kafka 3.x then ignores the value (its brokers
    write magic 2 batches whatever it says); Kafka 4.x removed the config."""
    parts = value.split(".")
    kept = 3 if value.startswith("0.") else 2
    key = value if kept >= len(parts) else ".".join(parts[:kept])
    return None if key in KAFKA_VERSIONS else f"Version {value} is not a valid version"


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_B, _S, _I, _L, _D, _LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)
_WEEK_MS = str(7 * 24 * 3600 * 1000)
_MAX = str(LONG_MAX)

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef("cleanup.policy", _LIST, "delete", "log.cleanup.policy",
                       list_of("compact", "delete", empty=False)),
        TopicConfigDef("compression.gzip.level", _I, "-1", "compression.gzip.level", _gzip_level),
        TopicConfigDef("compression.lz4.level", _I, "9", "compression.lz4.level", between(1, 17)),
        TopicConfigDef("compression.type", _S, "producer", "compression.type",
                       one_of(*COMPRESSION_TYPES)),
        TopicConfigDef("compression.zstd.level", _I, "3", "compression.zstd.level",
                       between(-131072, 22)),
        TopicConfigDef("delete.retention.ms", _L, "86400000", "log.cleaner.delete.retention.ms",
                       at_least(0)),
        TopicConfigDef("file.delete.delay.ms", _L, "60000", "log.segment.delete.delay.ms",
                       at_least(0)),
        TopicConfigDef("flush.messages", _L, _MAX, "log.flush.interval.messages", at_least(1)),
        TopicConfigDef("flush.ms", _L, _MAX, "log.flush.interval.ms", at_least(0)),
        TopicConfigDef("follower.replication.throttled.replicas", _LIST, "",
                       "follower.replication.throttled.replicas", _throttled_replicas),
        TopicConfigDef("index.interval.bytes", _I, "4096", "log.index.interval.bytes",
                       at_least(0)),
        TopicConfigDef("leader.replication.throttled.replicas", _LIST, "",
                       "leader.replication.throttled.replicas", _throttled_replicas),
        TopicConfigDef("local.retention.bytes", _L, "-2", "log.local.retention.bytes",
                       at_least(-2)),
        TopicConfigDef("local.retention.ms", _L, "-2", "log.local.retention.ms", at_least(-2)),
        TopicConfigDef("max.compaction.lag.ms", _L, _MAX, "log.cleaner.max.compaction.lag.ms",
                       at_least(1)),
        TopicConfigDef("max.message.bytes", _I, "1048588", "message.max.bytes", at_least(0)),
        # Removed in Kafka 4.0; accepted for clients and tools written against 3.x.
        TopicConfigDef("message.downconversion.enable", _B, "true",
                       "log.message.downconversion.enable"),
        TopicConfigDef("message.format.version", _S, "3.0-IV1", "log.message.format.version",
                       _message_format_version),
        TopicConfigDef("message.timestamp.after.max.ms", _L, _MAX,
                       "log.message.timestamp.after.max.ms", at_least(0)),
        TopicConfigDef("message.timestamp.before.max.ms", _L, _MAX,
                       "log.message.timestamp.before.max.ms", at_least(0)),
        TopicConfigDef("message.timestamp.difference.max.ms", _L, _MAX,
                       "log.message.timestamp.difference.max.ms", at_least(0)),
        TopicConfigDef("message.timestamp.type", _S, "CreateTime", "log.message.timestamp.type",
                       one_of("CreateTime", "LogAppendTime")),
        TopicConfigDef("min.cleanable.dirty.ratio", _D, "0.5", "log.cleaner.min.cleanable.ratio",
                       between(0, 1)),
        TopicConfigDef("min.compaction.lag.ms", _L, "0", "log.cleaner.min.compaction.lag.ms",
                       at_least(0)),
        TopicConfigDef("min.insync.replicas", _I, "1", "min.insync.replicas", at_least(1)),
        TopicConfigDef("preallocate", _B, "false", "log.preallocate"),
        TopicConfigDef("remote.log.copy.disable", _B, "false", "remote.log.copy.disable"),
        TopicConfigDef("remote.log.delete.on.disable", _B, "false",
                       "remote.log.delete.on.disable"),
        TopicConfigDef("remote.storage.enable", _B, "false", "remote.storage.enable"),
        TopicConfigDef("retention.bytes", _L, "-1", "log.retention.bytes"),
        TopicConfigDef("retention.ms", _L, _WEEK_MS, "log.retention.ms", at_least(-1)),
        TopicConfigDef("segment.bytes", _I, "1073741824", "log.segment.bytes", at_least(14)),
        TopicConfigDef("segment.index.bytes", _I, "10485760", "log.index.size.max.bytes",
                       at_least(4)),
        TopicConfigDef("segment.jitter.ms", _L, "0", "log.roll.jitter.ms", at_least(0)),
        TopicConfigDef("segment.ms", _L, _WEEK_MS, "log.roll.ms", at_least(1)),
        TopicConfigDef("unclean.leader.election.enable", _B, "false",
                       "unclean.leader.election.enable"),
    )
}  # fmt: skip

LIST_CONFIGS = frozenset(name for name, d in TOPIC_CONFIGS.items() if d.type is ConfigType.LIST)

# Stored and described, but kayak does nothing with them: why, per config (README's table).
NOT_ACTED_UPON: dict[str, str] = {
    "min.insync.replicas": "one replica: every write is acknowledged by the only copy",
    "unclean.leader.election.enable": "one replica: there is no other leader to elect",
    "leader.replication.throttled.replicas": "no replication to throttle",
    "follower.replication.throttled.replicas": "no replication to throttle",
    "message.format.version": "kayak always stores magic 2 batches (Kafka 3.x accepts and "
    "ignores it; 4.x removed it)",
    "message.downconversion.enable": "kayak does not down-convert for Fetch v0-3 clients",
    "flush.messages": "durability follows the broker's flush mode (group commit), not per topic",
    "flush.ms": "durability follows the broker's flush mode (group commit), not per topic",
    "file.delete.delay.ms": "expired segments are removed at once",
    "preallocate": "segment files grow as written",
    "segment.index.bytes": "index files grow as needed",
    "segment.jitter.ms": "segments roll exactly at segment.ms",
    "local.retention.ms": "no tiered storage",
    "local.retention.bytes": "no tiered storage",
    "remote.log.copy.disable": "no tiered storage",
    "remote.log.delete.on.disable": "no tiered storage",
    "remote.storage.enable": "no tiered storage (true is refused, as a Kafka broker without "
    "tiered storage refuses it)",
}
