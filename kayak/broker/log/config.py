"""Per-topic log settings, by Kafka's own property names.

Every topic configuration of Kafka 3.x/4.x is accepted (see :mod:`.config_defs` for their
types, defaults and ranges). The ones kayak acts on are attributes of :class:`LogConfig`;
the others are kept as normalized strings in :attr:`LogConfig.others`, so that they are
stored and described like the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

from kayak.broker.log.config_defs import (
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigType,
    TopicConfigDef,
    format_value,
)
from kayak.errors import ConfigError

# Kafka property name -> LogConfig attribute, for the configurations kayak acts on
PROPERTY_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
    "cleanup.policy": "cleanup_policy",
    "message.timestamp.type": "message_timestamp_type",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    # the log cleaner (kayak.broker.log.cleaner)
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}
_ATTRIBUTE_NAMES = {attr: name for name, attr in PROPERTY_NAMES.items()}
# KIP-1030 (Kafka 4.0): smaller segments only multiply files and descriptors.
SEGMENT_BYTES_MINIMUM = 1024 * 1024
# What older kayak versions accepted; topics stored with such a value still load.
_SEGMENT_BYTES_FLOOR = 14


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition's log rolls, indexes, expires, compresses and checks timestamps;
    defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: str = "delete"  # "delete", "compact" or both, comma-separated
    message_timestamp_type: str = "CreateTime"
    # "producer": batches are stored as sent; a codec name: recompressed to it on append
    compression_type: str = "producer"
    compression_gzip_level: int = -1  # -1: the codec's default
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated in 3.6, gone in 4.0
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    # The log cleaner: how long a tombstone or an empty transaction's marker stays once a
    # cleaning saw it, the share of dirty bytes that makes a log due, and how soon after
    # being written a record may (min) and must (max) be compacted.
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # The configurations kayak stores but does not act on: (name, normalized value), sorted.
    others: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_properties(
        cls,
        properties: Mapping[str, Any],
        base: LogConfig | None = None,
        from_user: bool = False,
    ) -> LogConfig:
        """Build from Kafka-named properties (strings from a config file are fine).

        Any topic configuration of Kafka is accepted, checked with Kafka's type and range;
        an unknown name or a bad value raises :class:`ConfigError` naming it.
        ``from_user``: the properties come from a request or a command line, not from the
        broker's own stored topics, and must also meet today's minimums (``segment.bytes``
        ≥ 1 MiB); a topic stored by an older version with a smaller value still loads.
        """
        if cls is LogConfig:
            try:
                # With each value's type: 1 == True, but they need not parse alike.
                key = tuple((name, type(value), value) for name, value in properties.items())
                return _parsed(key, base, from_user)
            except TypeError:  # a value that cannot be a cache key (not from a request or file)
                pass
        return cls._parse(properties, base, from_user)

    @classmethod
    def _parse(
        cls, properties: Mapping[str, Any], base: LogConfig | None, from_user: bool
    ) -> LogConfig:
        base = base or cls()
        changes: dict[str, Any] = {}
        others = dict(base.others)
        for name, raw in properties.items():
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise ConfigError(name, f"Unknown topic config name: {name}")
            attr = PROPERTY_NAMES.get(name)
            if attr is not None:
                changes[attr] = _attribute_value(definition, raw)
            else:
                others[name] = definition.normalized(raw)
        config = replace(base, **changes, others=tuple(sorted(others.items())))
        if from_user:
            config.validate_user_choice()
        else:
            config.validate()
        return config

    def to_properties(self) -> dict[str, str]:
        """Every topic configuration by its Kafka name, as DescribeConfigs reports it."""
        return dict(_properties_of(self))

    def _properties(self) -> tuple[tuple[str, str], ...]:
        properties = {name: d.default for name, d in TOPIC_CONFIGS.items()}
        properties.update(self.others)
        for f in fields(self):
            name = _ATTRIBUTE_NAMES.get(f.name)
            if name is not None:
                value = getattr(self, f.name)
                properties[name] = value if isinstance(value, str) else str(value)
        return tuple(sorted(properties.items()))

    def validate_user_choice(self) -> None:
        """:meth:`validate`, plus what a new setting must meet: the minimums of today
        (KIP-1030) and what this broker can do."""
        if self.segment_bytes < SEGMENT_BYTES_MINIMUM:
            raise ConfigError(
                "segment.bytes",
                f"{self.segment_bytes} is below the minimum {SEGMENT_BYTES_MINIMUM} (1 MiB)",
            )
        if dict(self.others).get("remote.storage.enable") == "true":
            # What a Kafka broker with remote.log.storage.system.enable=false answers.
            raise ConfigError(
                "remote.storage.enable",
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage.",
            )
        self.validate()

    def validate(self) -> None:
        """Check every setting is usable at all (what stored topics must meet)."""
        if self.segment_bytes < _SEGMENT_BYTES_FLOOR:
            raise ConfigError(
                "segment.bytes", f"{self.segment_bytes} is below the minimum {_SEGMENT_BYTES_FLOOR}"
            )
        for attr, name in _ATTRIBUTE_NAMES.items():
            definition = TOPIC_CONFIGS[name]
            # Re-parsing the formatted value applies Kafka's type and range checks.
            value = getattr(self, attr)
            definition.parse(
                value if isinstance(value, str) else format_value(definition.type, value)
            )

    @property
    def deletes(self) -> bool:
        """Whether retention deletes old segments (``cleanup.policy`` includes delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacted(self) -> bool:
        """Whether ``cleanup.policy`` includes compact (records need keys)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far before the broker's clock a CreateTime timestamp may be (KIP-937: the
        deprecated ``message.timestamp.difference.max.ms`` unless this one is set)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far after the broker's clock a CreateTime timestamp may be (see before)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def checks_timestamps(self) -> bool:
        """Whether produced timestamps are checked against the broker's clock at all."""
        return not self.log_append_time and (
            self.timestamp_before_max_ms != LONG_MAX or self.timestamp_after_max_ms != LONG_MAX
        )

    @property
    def recompresses(self) -> bool:
        """Whether appended batches are rewritten to ``compression.type``'s codec."""
        return self.compression_type != "producer"


def _attribute_value(definition: TopicConfigDef, raw: object) -> Any:
    value = definition.parse(raw)
    if definition.type is ConfigType.LIST:
        return ",".join(value)
    return value


# A broker parses the same few property sets over and over (every topic created, loaded or
# described with the defaults, or with the same overrides): parsing and validating one takes
# ~0.1 ms, which made 2,000 topics in one CreateTopics cost a fifth of a second each way.
# LogConfig is frozen, so a cached one is safe to share.
_CACHED_CONFIGS = 1024


@lru_cache(maxsize=_CACHED_CONFIGS)
def _parsed(
    properties: tuple[tuple[str, type, Any], ...], base: LogConfig | None, from_user: bool
) -> LogConfig:
    return LogConfig._parse({name: value for name, _, value in properties}, base, from_user)


@lru_cache(maxsize=_CACHED_CONFIGS)
def _properties_of(config: LogConfig) -> tuple[tuple[str, str], ...]:
    return config._properties()
