"""Group coordinator settings, by Kafka's own broker property names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kayak.errors import ConfigError

# Kafka property name -> GroupCoordinatorConfig attribute
PROPERTY_NAMES = {
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "group.max.size": "group_max_size",
}

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """How the group coordinator paces rebalances and bounds members; defaults are Kafka's.

    - ``group_initial_rebalance_delay_ms`` (``group.initial.rebalance.delay.ms``): how long the
      first rebalance of an empty group waits for more members, extended by the same amount
      while new members keep arriving, never past the rebalance timeout.
    - ``group_min_session_timeout_ms`` / ``group_max_session_timeout_ms``
      (``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``): the session
      timeouts a JoinGroup may ask for; others get INVALID_SESSION_TIMEOUT.
    - ``offset_metadata_max_bytes`` (``offset.metadata.max.bytes``): the longest metadata string
      an offset commit may carry. Like Kafka, the limit counts characters, not encoded bytes.
    - ``group_max_size`` (``group.max.size``): members (including those that were just told
      MEMBER_ID_REQUIRED) a group admits; more get GROUP_MAX_SIZE_REACHED.
    """

    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    offset_metadata_max_bytes: int = 4096
    group_max_size: int = _INT32_MAX

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, Any], base: GroupCoordinatorConfig | None = None
    ) -> GroupCoordinatorConfig:
        """Build from Kafka-named properties (strings from a config file are fine)."""
        changes: dict[str, int] = {}
        for name, raw in properties.items():
            attr = PROPERTY_NAMES.get(name)
            if attr is None:
                raise ConfigError(name, "not a group coordinator configuration kayak knows")
            try:
                changes[attr] = int(raw)
            except (TypeError, ValueError):
                raise ConfigError(name, f"expected an integer, got {raw!r}") from None
        return replace(base or cls(), **changes)

    def validate(self) -> None:
        """Raise :class:`ConfigError` (naming the Kafka property) for unusable values."""
        if self.group_initial_rebalance_delay_ms < 0:
            raise ConfigError("group.initial.rebalance.delay.ms", "must be >= 0")
        if self.group_min_session_timeout_ms < 0:
            raise ConfigError("group.min.session.timeout.ms", "must be >= 0")
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise ConfigError(
                "group.max.session.timeout.ms", "must be >= group.min.session.timeout.ms"
            )
        if self.offset_metadata_max_bytes < 0:
            raise ConfigError("offset.metadata.max.bytes", "must be >= 0")
        if self.group_max_size < 1:
            raise ConfigError("group.max.size", "must be >= 1")
