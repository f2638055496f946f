"""Broker settings, by Kafka's property names where Kafka has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log import FlushMode, LogConfig
from kayak.errors import ConfigError


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """How one broker listens, stores and limits; defaults are kayak's embedded defaults."""

    data_dir: Path = Path("kayak-data")
    host: str = "127.0.0.1"
    port: int = 9092
    node_id: int = 0
    shard_count: int = 1  # broker processes sharing data_dir (kayak broker --shards N)
    advertised_host: str | None = None  # default: the address actually listened on
    flush: FlushMode = FlushMode.GROUP
    num_partitions: int = 1  # num.partitions
    auto_create_topics: bool = True  # auto.create.topics.enable
    socket_request_max_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    max_connections: int = 10_000  # max.connections
    log: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    # The schema registry's HTTP port (0: ephemeral); None: no registry. Shard 0 serves it.
    schema_registry_port: int | None = None
    schema_registry_host: str | None = None  # default: ``host``

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", f"{self.port} is not a TCP port")
        if self.schema_registry_port is not None and not 0 <= self.schema_registry_port <= 65535:
            raise ConfigError(
                "schema.registry.port", f"{self.schema_registry_port} is not a TCP port"
            )
        if not 0 <= self.node_id < self.shard_count:
            raise ConfigError("node.id", f"{self.node_id} is not a shard of {self.shard_count}")
        if self.num_partitions < 1:
            raise ConfigError("num.partitions", "must be at least 1")
        if self.socket_request_max_bytes < 1024:
            raise ConfigError("socket.request.max.bytes", "must be at least 1024")
        if self.max_connections < 1:
            raise ConfigError("max.connections", "must be at least 1")
        self.log.validate()
