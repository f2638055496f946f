"""Per-topic log settings, by Kafka's own property names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kayak.errors import ConfigError

# Kafka property name -> LogConfig attribute
PROPERTY_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
    "cleanup.policy": "cleanup_policy",
    "message.timestamp.type": "message_timestamp_type",
}
_CLEANUP_POLICIES = {"delete", "compact", "compact,delete", "delete,compact"}
# KIP-1030 (Kafka 4.0): smaller segments only multiply files and descriptors.
SEGMENT_BYTES_MINIMUM = 1024 * 1024
# What older kayak versions accepted; topics stored with such a value still load.
_SEGMENT_BYTES_FLOOR = 14
_TIMESTAMP_TYPES = {"CreateTime", "LogAppendTime"}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition's log rolls, indexes and expires; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"

    @classmethod
    def from_properties(
        cls,
        properties: Mapping[str, Any],
        base: LogConfig | None = None,
        from_user: bool = False,
    ) -> LogConfig:
        """Build from Kafka-named properties (strings from a config file are fine).

        ``from_user``: the properties come from a request or a command line, not from the
        broker's own stored topics, and must also meet today's minimums (``segment.bytes``
        ≥ 1 MiB); a topic stored by an older version with a smaller value still loads.
        """
        changes: dict[str, Any] = {}
        for name, raw in properties.items():
            attr = PROPERTY_NAMES.get(name)
            if attr is None:
                raise ConfigError(name, "not a topic configuration kayak knows")
            changes[attr] = _coerce(name, attr, raw)
        config = replace(base or cls(), **changes)
        if from_user:
            config.validate_user_choice()
        else:
            config.validate()
        return config

    def to_properties(self) -> dict[str, str]:
        """Kafka-named properties, as DescribeConfigs reports them."""
        by_attr = {attr: name for name, attr in PROPERTY_NAMES.items()}
        return {by_attr[f.name]: str(getattr(self, f.name)) for f in fields(self)}

    def validate_user_choice(self) -> None:
        """:meth:`validate`, plus the minimums a new setting must meet (KIP-1030)."""
        if self.segment_bytes < SEGMENT_BYTES_MINIMUM:
            raise ConfigError(
                "segment.bytes",
                f"{self.segment_bytes} is below the minimum {SEGMENT_BYTES_MINIMUM} (1 MiB)",
            )
        self.validate()

    def validate(self) -> None:
        """Check every setting is usable at all (what stored topics must meet)."""
        if self.segment_bytes < _SEGMENT_BYTES_FLOOR:
            raise ConfigError(
                "segment.bytes", f"{self.segment_bytes} is below the minimum {_SEGMENT_BYTES_FLOOR}"
            )
        if self.segment_ms < 1:
            raise ConfigError("segment.ms", f"{self.segment_ms} must be at least 1")
        if self.retention_ms < -1:
            raise ConfigError("retention.ms", f"{self.retention_ms} must be -1 or more")
        if self.index_interval_bytes < 0:
            raise ConfigError("index.interval.bytes", "must not be negative")
        if self.max_message_bytes < 0:
            raise ConfigError("max.message.bytes", "must not be negative")
        if self.cleanup_policy not in _CLEANUP_POLICIES:
            raise ConfigError("cleanup.policy", f"{self.cleanup_policy!r} is not delete/compact")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise ConfigError(
                "message.timestamp.type",
                f"{self.message_timestamp_type!r} is not one of CreateTime, LogAppendTime",
            )

    @property
    def deletes(self) -> bool:
        """Whether retention deletes old segments (``cleanup.policy`` includes delete)."""
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


def _coerce(name: str, attr: str, raw: Any) -> Any:
    if attr in ("cleanup_policy", "message_timestamp_type"):
        return str(raw).replace(" ", "")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ConfigError(name, f"{raw!r} is not an integer") from None
