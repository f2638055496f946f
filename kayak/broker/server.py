"""The embeddable broker: ``async with Broker(data_dir, port=0) as b: b.bootstrap_servers``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from kayak.broker.catalog import TopicCatalog, remove_orphans
from kayak.broker.config import BrokerConfig
from kayak.broker.connection import BrokerConnection
from kayak.broker.consumer_offsets import ConsumerOffsetsTopic
from kayak.broker.context import BrokerContext
from kayak.broker.group import GroupCoordinator, GroupCoordinatorConfig
from kayak.broker.log import GroupCommit
from kayak.broker.log.files import (
    exclusive_lock,
    fsync_directory,
    remove_quietly,
    write_atomically,
)
from kayak.broker.log.producer_state import ProducerIdAllocator
from kayak.broker.registry import SchemaRegistry
from kayak.broker.shards import ShardAddress, ShardRegistry
from kayak.errors import KafkaError

log = logging.getLogger(__name__)

META_FILE = "meta.properties"
REFRESH_INTERVAL = 0.1  # seconds between checks of the shared cluster map
CLEAN_SHUTDOWN_MARKER = ".kayak-clean-shutdown"


def clean_shutdown_marker(data_dir: Path, node_id: int, shard_count: int) -> Path:
    """The file a shard leaves when it stopped cleanly; each shard has its own.

    Only the process that wrote it may skip recovery: a shard killed while the others
    stopped cleanly must not start as if it had stopped cleanly too.
    """
    suffix = f"-{node_id}" if shard_count > 1 else ""
    return data_dir / f"{CLEAN_SHUTDOWN_MARKER}{suffix}"


class Broker:
    """A single-node, durable Kafka-compatible broker running on the current event loop."""

    def __init__(self, data_dir: str | Path | None = None, **settings: Any) -> None:
        config = BrokerConfig(**settings)
        if data_dir is not None:
            config = replace(config, data_dir=Path(data_dir))
        config.validate()
        self.config = config
        self.context: BrokerContext | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[BrokerConnection] = set()
        self._retention: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._registry: SchemaRegistry | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the data directory and start listening."""
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id = self._load_or_create_meta()
        marker = clean_shutdown_marker(config.data_dir, config.node_id, config.shard_count)
        clean = marker.exists()
        if clean:
            # Gone before anything is written: a crash from here on must recover.
            remove_quietly(marker)
            fsync_directory(config.data_dir)
        started = time.monotonic()
        catalog = TopicCatalog(
            config.data_dir, config.log, config.node_id, config.shard_count, config.flush.syncs
        )
        catalog.open(clean_shutdown=clean)
        if config.node_id == 0:
            remove_orphans(config.data_dir, catalog)
        self.context = BrokerContext(config, catalog, GroupCommit(config.flush), cluster_id)
        self.context.shards = ShardRegistry(config.data_dir, config.shard_count)
        await self._start_extensions(self.context)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, config.host, config.port, reuse_address=True, backlog=1024
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self.context.host = config.advertised_host or host
        self.context.port = port
        self.context.shards.register(ShardAddress(config.node_id, self.context.host, port))
        self._retention = loop.create_task(self._retention_loop())
        if config.schema_registry_port is not None and config.node_id == 0:
            await self._start_registry()
        if config.shard_count > 1:
            self._refresh = loop.create_task(self._refresh_loop())
        log.info(
            "kayak broker %d listening on %s:%d, data in %s (%s start, recovered in %.2fs, "
            "flush=%s)",
            config.node_id,
            self.context.host,
            port,
            config.data_dir,
            "clean" if clean else "unclean",
            time.monotonic() - started,
            config.flush.value,
        )

    async def _start_extensions(self, context: BrokerContext) -> None:
        """Group coordinator (offsets in ``__consumer_offsets``) and producer ids."""
        suffix = f"-{self.config.node_id}" if self.config.shard_count > 1 else ""
        context.producer_ids = ProducerIdAllocator(self.config.data_dir / f"producer-ids{suffix}")
        coordinator_config = GroupCoordinatorConfig(
            group_initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms
        )
        offsets = ConsumerOffsetsTopic(
            context.catalog, context.commit, self.config.node_id, self.config.shard_count
        )
        context.coordinator = GroupCoordinator(coordinator_config, offsets)

    async def _start_registry(self) -> None:
        """The schema registry on its own HTTP port, its state in ``_schemas``."""
        assert self.context is not None
        host = self.config.schema_registry_host or self.config.host
        port = self.config.schema_registry_port
        assert port is not None
        registry = SchemaRegistry(self.context.catalog, host, port)
        try:
            await registry.start()
        except BaseException as exc:
            await self.stop()  # not half started: the Kafka listener is already open
            if isinstance(exc, OSError):
                message = f"schema registry port {host}:{port}: {exc.strerror or exc}"
                raise OSError(exc.errno, message) from exc
            raise
        self._registry = registry
        log.info("schema registry on %s", registry.url)

    async def stop(self) -> None:
        """Stop accepting, close connections, flush and close every log cleanly."""
        if self._registry is not None:
            await self._registry.stop()
            self._registry = None
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        for task in (self._retention, self._refresh):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        context = self.context
        if context is not None:
            if context.coordinator is not None:
                await context.coordinator.close()
            context.commit.close()
            if context.catalog.close():
                marker = clean_shutdown_marker(
                    self.config.data_dir, self.config.node_id, self.config.shard_count
                )
                write_atomically(marker, f"{os.getpid()}\n")
                log.info("kayak broker stopped cleanly")
            else:
                log.error("kayak broker stopped; storage errors: the next start recovers")
        self.context = None

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- addresses ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self.context is not None, "the broker is not running"
        return self.context.port

    @property
    def schema_registry_url(self) -> str | None:
        """``http://host:port`` of the schema registry; None when this broker serves none."""
        return self._registry.url if self._registry is not None else None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers``."""
        assert self.context is not None, "the broker is not running"
        return f"{self.context.host}:{self.context.port}"

    # -- internals ----------------------------------------------------------------------

    def _new_connection(self) -> BrokerConnection:
        assert self.context is not None
        connection = BrokerConnection(self.context, self._connections.discard)
        if len(self._connections) >= self.config.max_connections:
            log.warning("refusing a connection: max.connections=%d", self.config.max_connections)
            connection.refuse()
        else:
            self._connections.add(connection)
        return connection

    def _load_or_create_meta(self) -> str:
        with exclusive_lock(self.config.data_dir / "meta.lock"):
            return self._read_or_write_meta()

    def _read_or_write_meta(self) -> str:
        path = self.config.data_dir / META_FILE
        properties: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                properties[key.strip()] = value.strip()
        if "cluster.id" not in properties:
            raw = uuid.uuid4().bytes
            properties["cluster.id"] = base64.urlsafe_b64encode(raw).decode().rstrip("=")
            properties["node.id"] = str(self.config.node_id)
            text = "".join(f"{k}={v}\n" for k, v in properties.items())
            write_atomically(path, text)
        return properties["cluster.id"]

    async def _refresh_loop(self) -> None:
        """Follow what the other shards change in the cluster map (shards > 1 only)."""
        while True:
            await asyncio.sleep(REFRESH_INTERVAL)
            assert self.context is not None
            try:
                await self.context.catalog.refresh(self.context.commit)
            except (OSError, ValueError):
                log.exception("could not reread the cluster map")

    async def _retention_loop(self) -> None:
        interval = self.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            assert self.context is not None
            for partition in self.context.catalog.partitions():
                try:
                    partition.log.apply_retention()
                except (OSError, KafkaError):
                    log.exception("retention of %s-%d failed", partition.topic, partition.index)
