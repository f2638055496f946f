"""The embeddable broker: ``async with Broker(data_dir, port=0) as b: b.bootstrap_servers``.

A broker listens on every listener of its configuration at once (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``, each on its own port); clients are told the address of the
listener their request arrived on (its ``advertised.listeners`` entry when there is one).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import ssl
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kayak.broker.catalog import TopicCatalog, remove_orphans
from kayak.broker.config import BrokerConfig
from kayak.broker.connection import BrokerConnection
from kayak.broker.connection_tracker import ConnectionTracker
from kayak.broker.consumer_offsets import TOPIC as CONSUMER_OFFSETS
from kayak.broker.consumer_offsets import ConsumerOffsetsTopic
from kayak.broker.context import BrokerContext
from kayak.broker.group import GroupCoordinator, GroupCoordinatorConfig
from kayak.broker.log import LogWriter
from kayak.broker.log.cleaner.manager import LogCleaner
from kayak.broker.log.files import (
    DirectoryLock,
    exclusive_lock,
    fsync_directory,
    remove_quietly,
    write_atomically,
)
from kayak.broker.log.open_files import OPEN_FILES, default_fd_limit
from kayak.broker.log.producer_state import ProducerIdAllocator
from kayak.broker.metrics import (
    BrokerCollector,
    BrokerMetrics,
    ClusterCollector,
    SnapshotWriter,
    publish,
    withdraw,
)
from kayak.broker.security.acls import Authorizer
from kayak.broker.security.authenticator import SaslAuthenticator
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import Listener, SecurityProtocol
from kayak.broker.security.session import ConnectionSession
from kayak.broker.security.tls import ktls_available, server_context
from kayak.broker.shards import ShardAddress, ShardRegistry
from kayak.broker.txn.coordinator import TransactionCoordinator
from kayak.broker.txn.markers import MarkerWriter
from kayak.broker.txn.state_log import TransactionStateLog
from kayak.errors import KafkaError

if TYPE_CHECKING:
    from kayak.broker.registry import SchemaRegistry
    from kayak.broker.web import WebMount

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

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        metrics: bool = True,
        web_mounts: Sequence[WebMount] = (),
        **settings: Any,
    ) -> None:
        """``settings`` are :class:`BrokerConfig` fields; ``metrics=False`` turns the
        Prometheus metrics off (nothing is timed or counted per request, ``/metrics`` is 404);
        ``web_mounts`` add pages to the registry's web server (``kayak broker`` adds the web
        console)."""
        config = BrokerConfig(**settings)
        if data_dir is not None:
            config = replace(config, data_dir=Path(data_dir))
        config.validate()
        self.config = config
        # Built now: a bad certificate, key or password fails here, naming the file.
        self.ssl_context: ssl.SSLContext | None = None
        if config.tls_needed:
            assert config.ssl_certificate_location and config.ssl_key_location  # validated
            self.ssl_context = server_context(
                config.ssl_certificate_location,
                config.ssl_key_location,
                config.ssl_key_password,
                config.ssl_ca_location,
            )
        self.context: BrokerContext | None = None
        self._servers: list[asyncio.Server] = []
        # protocol -> the listener's address as advertised to clients (actual port if 0)
        self._advertised: dict[SecurityProtocol, Listener] = {}
        self._tracker: ConnectionTracker | None = None
        self._sweep: asyncio.Task[None] | None = None
        self._retention: asyncio.Task[None] | None = None
        self._cleaner: asyncio.Task[None] | None = None
        self._transaction_timeouts: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._registry: SchemaRegistry | None = None
        self._web_mounts = tuple(web_mounts)
        self._lock: DirectoryLock | None = None
        self.metrics: BrokerMetrics | None = BrokerMetrics(config.node_id) if metrics else None
        self._offsets: ConsumerOffsetsTopic | None = None
        self._snapshots: SnapshotWriter | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Lock and recover the data directory, and start listening.

        ``OSError`` when another broker process holds the directory (or this shard's part of
        it), naming that process's pid.
        """
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        lock_name = ".lock" if config.node_id == 0 else f".lock-{config.node_id}"
        self._lock = DirectoryLock(config.data_dir / lock_name)
        self._lock.acquire()
        OPEN_FILES.resize_for_fd_limit(default_fd_limit())  # ulimit -n as it is now
        try:
            await self._start_locked()
        except BaseException:
            self._lock.release()
            raise

    async def _start_locked(self) -> None:
        config = self.config
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
        self.context = BrokerContext(config, catalog, LogWriter(config.flush), cluster_id)
        self.context.shards = ShardRegistry(config.data_dir, config.shard_count)
        await self._start_extensions(self.context)
        loop = asyncio.get_running_loop()
        self._tracker = ConnectionTracker(
            self.context, self.metrics.requests if self.metrics is not None else None
        )
        self._start_metrics(self.context, self._tracker)
        await self._open_listeners()
        first = next(iter(self._advertised.values()))
        self.context.host, self.context.port = first.host, first.port
        listeners = tuple((a.name, a.host, a.port) for a in self._advertised.values())
        self.context.shards.register(
            ShardAddress(config.node_id, first.host, first.port, listeners)
        )
        self._sweep = loop.create_task(self._sweep_loop(self._tracker))
        self._retention = loop.create_task(self._retention_loop())
        if config.log_cleaner_enable:
            self._cleaner = loop.create_task(LogCleaner.for_broker(config).run(catalog.partitions))
        self._transaction_timeouts = loop.create_task(self._transaction_loop())
        if config.schema_registry_port is not None and config.node_id == 0:
            await self._start_registry()
        if config.shard_count > 1:
            self._refresh = loop.create_task(self._refresh_loop())
        log.info(
            "kayak broker %d listening on %s:%d, data in %s (%s start, recovered in %.2fs, "
            "flush=%s)",
            config.node_id,
            first.host,
            first.port,
            config.data_dir,
            "clean" if clean else "unclean",
            time.monotonic() - started,
            config.flush.value,
        )
        self._log_listeners()

    async def _open_listeners(self) -> None:
        """One server per listener; a port that cannot be bound stops the start."""
        assert self.context is not None
        loop = asyncio.get_running_loop()
        config = self.config
        for listener in config.effective_listeners:
            try:
                # No ssl= here: each connection runs its own TLS handshake once it has been
                # counted against the connection limits (BrokerConnection.connection_made).
                server = await loop.create_server(
                    functools.partial(self._new_connection, listener),
                    listener.host,
                    listener.port,
                    reuse_address=True,
                    backlog=1024,
                )
            except OSError as exc:
                await self.stop()
                message = f"listener {listener}: {exc.strerror or exc}"
                raise OSError(exc.errno, message) from exc
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self._advertised[listener.protocol] = self._advertise(listener, port)

    def _advertise(self, listener: Listener, bound_port: int) -> Listener:
        """What clients are told for ``listener``: its advertised.listeners entry (port 0:
        the bound port), else the address it listens on."""
        for advertised in self.config.advertised_listeners:
            if advertised.protocol is listener.protocol:
                return Listener(listener.protocol, advertised.host, advertised.port or bound_port)
        host = self.config.advertised_host or listener.host
        return Listener(listener.protocol, host, bound_port)

    def _log_listeners(self) -> None:
        listeners = self.config.effective_listeners
        if len(listeners) == 1 and listeners[0].protocol is SecurityProtocol.PLAINTEXT:
            return
        for listener in listeners:
            advertised = self._advertised[listener.protocol]
            log.info(
                "kayak broker %d listener %s on %s:%d (advertised as %s:%d)",
                self.config.node_id,
                listener.name,
                listener.host,
                self.bound_address(listener.protocol)[1],
                advertised.host,
                advertised.port,
            )
        if any(listener.protocol.uses_tls for listener in listeners):
            available, reason = ktls_available()
            if available:
                log.info(
                    "kernel TLS available (%s) but not used yet: TLS fetches are copied "
                    "through user space",
                    reason,
                )
            else:
                log.info(
                    "kernel TLS unavailable (%s): TLS fetches are copied through user space",
                    reason,
                )

    async def _start_extensions(self, context: BrokerContext) -> None:
        """Group coordinator (offsets in ``__consumer_offsets``), producer ids, SASL users and
        their authenticator, ACLs."""
        suffix = f"-{self.config.node_id}" if self.config.shard_count > 1 else ""
        context.producer_ids = ProducerIdAllocator(self.config.data_dir / f"producer-ids{suffix}")
        coordinator_config = GroupCoordinatorConfig(
            group_initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms
        )
        offsets = ConsumerOffsetsTopic(
            context.catalog, context.writer, self.config.node_id, self.config.shard_count
        )
        context.coordinator = GroupCoordinator(coordinator_config, offsets)
        self._offsets = offsets
        await self._start_transactions(context)
        context.credentials = CredentialStore.open(self.config.data_dir)
        context.authenticator = SaslAuthenticator(self.config)
        context.authorizer = Authorizer.open(self.config.data_dir, self.config)

    def _start_metrics(self, context: BrokerContext, tracker: ConnectionTracker) -> None:
        """Point the metrics at what they read when scraped; shard 0 serves them at
        ``/metrics`` on its web server, other shards leave snapshots for it to merge."""
        metrics = self.metrics
        if metrics is None:
            return
        metrics.catalog = context.catalog
        metrics.connections = tracker
        metrics.offsets = self._offsets
        context.writer.observer = metrics.flush
        config = self.config
        local = BrokerCollector(metrics)
        if config.node_id == 0:
            publish(config, ClusterCollector(local, config.data_dir, config.shard_count))
        elif config.schema_registry_port is not None:
            self._snapshots = SnapshotWriter(local, config.data_dir, config.node_id)
            self._snapshots.start()

    async def _start_registry(self) -> None:
        """The schema registry on its own HTTP(S) port, its state in ``_schemas``; secured
        by the broker's settings (TLS, basic auth against the SASL users, writers)."""
        assert self.context is not None
        host = self.config.schema_registry_host or self.config.host
        port = self.config.schema_registry_port
        assert port is not None
        # Imported here: its web stack (aiohttp) is a third of a broker's start, paid only
        # by brokers that serve HTTP.
        from kayak.broker.registry import SchemaRegistry

        authenticator = self.context.authenticator
        registry = SchemaRegistry(
            self.context.catalog, self.context.writer, host, port,
            config=self.config, credentials=self.context.credentials,
            # The SASL logins' limiter: HTTP basic auth is no way around it.
            limiter=authenticator.limiter if authenticator is not None else None,
            web_mounts=self._web_mounts,
        )  # fmt: skip
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
        if self._snapshots is not None:
            await self._snapshots.stop()
            self._snapshots = None
        if self.metrics is not None:
            withdraw(self.config)
        for server in self._servers:
            server.close()
        self._servers = []
        if self._tracker is not None:
            self._tracker.close_all()
        for task in (
            self._sweep,
            self._retention,
            self._refresh,
            self._transaction_timeouts,
            self._cleaner,
        ):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        context = self.context
        if context is not None:
            if context.coordinator is not None:
                await context.coordinator.close()
            context.writer.close()
            if context.catalog.close():
                marker = clean_shutdown_marker(
                    self.config.data_dir, self.config.node_id, self.config.shard_count
                )
                write_atomically(marker, f"{os.getpid()}\n")
                log.info("kayak broker stopped cleanly")
            else:
                log.error("kayak broker stopped; storage errors: the next start recovers")
        self.context = None
        if self._lock is not None:
            self._lock.release()  # last: the directory is ours until everything is closed

    async def serve_forever(self) -> None:
        assert self._servers, "the broker is not running"
        await asyncio.gather(*(server.serve_forever() for server in self._servers))

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
        """``host:port`` for clients' ``bootstrap.servers`` (the first listener)."""
        assert self.context is not None, "the broker is not running"
        return f"{self.context.host}:{self.context.port}"

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every listener, as advertised to clients, with the ports actually bound."""
        assert self.context is not None, "the broker is not running"
        return tuple(self._advertised.values())

    def listener_address(self, protocol: SecurityProtocol | str) -> tuple[str, int]:
        """``(host, port)`` advertised for the listener of ``protocol``; KeyError if none."""
        assert self.context is not None, "the broker is not running"
        advertised = self._advertised[SecurityProtocol(protocol)]
        return advertised.host, advertised.port

    def bound_address(self, protocol: SecurityProtocol | str) -> tuple[str, int]:
        """``(host, port)`` the listener of ``protocol`` listens on (the advertised address may
        differ); KeyError if there is none."""
        wanted = SecurityProtocol(protocol)
        for server, listener in zip(self._servers, self.config.effective_listeners, strict=False):
            if listener.protocol is wanted:
                host, port = server.sockets[0].getsockname()[:2]
                return str(host), int(port)
        raise KeyError(wanted)

    def connection_sessions(self) -> list[ConnectionSession]:
        """The security session of every open connection (listener, principal)."""
        assert self._tracker is not None, "the broker is not running"
        return [connection.session for connection in self._tracker.connections]

    def bootstrap_servers_for(self, protocol: SecurityProtocol | str) -> str:
        """``host:port`` of the listener of ``protocol`` (``"SSL"``, ``"SASL_SSL"``, ...)."""
        host, port = self.listener_address(protocol)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    # -- internals ----------------------------------------------------------------------

    def _new_connection(self, listener: Listener) -> BrokerConnection:
        # Limits are checked once the connection is made (before any TLS handshake), when
        # the client's address is known.
        assert self.context is not None and self._tracker is not None
        tls = self.ssl_context if listener.protocol.uses_tls else None
        return BrokerConnection(self.context, listener, self._tracker, tls)

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

    @staticmethod
    async def _sweep_loop(tracker: ConnectionTracker) -> None:
        """Close idle connections and overdue requests (one cheap pass every interval)."""
        while True:
            await asyncio.sleep(tracker.sweep_interval)
            tracker.sweep()

    async def _start_transactions(self, context: BrokerContext) -> None:
        """The transaction coordinator, its state replayed from ``__transaction_state``;
        transactions decided before a crash get their markers now."""
        config = self.config
        allocator = context.producer_ids
        assert allocator is not None
        shards, node_id = config.shard_count, config.node_id
        context.markers = MarkerWriter(context.catalog, context.writer)
        if self._offsets is not None:  # offsets committed in transactions wait for markers
            context.markers.listen(CONSUMER_OFFSETS, self._offsets)
        context.transactions = TransactionCoordinator(
            TransactionStateLog(context.catalog, context.writer, node_id, shards),
            allocator,
            context.markers,
            offsets_partition_for=context.coordinator_for,
            # Shards interleave producer ids, as InitProducerId without a transactional id does.
            allocate_id=lambda: allocator.allocate() * shards + node_id,
            max_timeout_ms=config.transaction_max_timeout_ms,
        )
        await context.transactions.resume()

    async def _transaction_loop(self) -> None:
        """Abort transactions open past their timeout; retry markers that failed."""
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            coordinator = self.context.transactions if self.context is not None else None
            if coordinator is None:
                continue
            try:
                await coordinator.abort_timed_out()
                await coordinator.resume()
            except (OSError, KafkaError):
                log.exception("aborting timed-out transactions failed")

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
