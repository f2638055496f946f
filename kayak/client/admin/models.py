"""What the admin client takes and returns: plain, immutable values.

Nothing here talks to a broker; ``kayak.client.admin.Admin`` builds these from responses.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from kayak.client.types import TopicPartition

__all__ = [
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionDescription",
    "ResourceType",
    "TopicDescription",
]


# -- topics ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``-1`` partitions or replication factor: the broker's default
    (``num.partitions``, ``default.replication.factor``; CreateTopics v4+)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What the broker says it created (ids and counts are known from CreateTopics v5+;
    older brokers leave ``topic_id`` as the nil UUID and the counts at -1)."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition: its leader (-1 while there is none), replicas and in-sync replicas."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic as Metadata describes it."""

    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: tuple[PartitionDescription, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        """Replicas of the first partition (every partition has as many, normally)."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    def topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.name, p.partition) for p in self.partitions]


# -- cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster's id, its controller (-1 if not known) and its brokers."""

    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


# -- groups ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups names it (``state`` from ListGroups v4+, else empty)."""

    group_id: str
    protocol_type: str
    state: str = ""
    group_type: str = ""
    coordinator: int = -1


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A group member; for consumer groups its subscription and assignment are decoded."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None = None
    assignment: tuple[TopicPartition, ...] = ()
    subscription: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as DescribeGroups describes it, and which broker coordinates it."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int

    @property
    def assignment(self) -> dict[TopicPartition, str]:
        """Every assigned partition and the id of the member it is assigned to."""
        return {tp: m.member_id for m in self.members for tp in m.assignment}


# -- offsets ---------------------------------------------------------------------------------


class OffsetSpec:
    """Which offset ``Admin.list_offsets`` looks up: the special values, or a timestamp.

    The values are the ints ListOffsets carries; any timestamp in ms since the epoch (>= 0)
    asks for the earliest offset whose record timestamp is at or after it.
    """

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3  # the offset of the record with the highest timestamp (ListOffsets v7+)

    @staticmethod
    def timestamp(ms: int) -> int:
        """The spec for the first record at or after ``ms`` milliseconds since the epoch."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(f"a timestamp is a non-negative int of milliseconds, not {ms!r}")
        return ms

    @staticmethod
    def describe(spec: int) -> str:
        names = {-1: "latest", -2: "earliest", -3: "max-timestamp"}
        return names.get(spec, f"timestamp {spec}")


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer. For a timestamp with no record at or after it both are -1."""

    offset: int
    timestamp: int


# -- configs ---------------------------------------------------------------------------------


class ResourceType(IntEnum):
    """Config resource types (DescribeConfigs, AlterConfigs)."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    """Where a config value comes from (DescribeConfigs v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, code: int) -> ConfigSource:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A topic or broker whose configs to describe or alter."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str) -> ConfigResource:
        return cls(ResourceType.BROKER, str(node_id))

    def __str__(self) -> str:
        kind = "broker" if self.type is ResourceType.BROKER else self.type.name.lower()
        return f"{kind} {self.name}"


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource; ``value`` is None for sensitive values."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_default: bool = False
    read_only: bool = False
    is_sensitive: bool = False

    @property
    def is_override(self) -> bool:
        """Set on the resource itself rather than inherited."""
        return self.source in (
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
            ConfigSource.DYNAMIC_BROKER_CONFIG,
        )
