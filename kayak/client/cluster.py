"""What a client knows of the cluster: brokers, topics, partition leaders, and connections.

Bootstrap tries each configured address in turn until one answers. With
``allow.auto.create.topics`` (producers and consumers, on by default as in Kafka's Java
clients) Metadata requests ask the broker to create the topics they name; the admin client
never does. Metadata is cached and
refreshed when it is older than ``metadata.max.age.ms``, when a caller reports stale
leadership (NOT_LEADER_OR_FOLLOWER and friends), or when a topic it needs is missing. There is
one connection per broker, shared by the producer's, consumer's and admin's requests to it,
reopened with exponential backoff after a failure.

Every connection is secured the same way (``security``: TLS context and SASL settings, built
once from the configuration). An authentication failure (TLS or SASL) is raised at once,
not retried: connecting again with the same settings would only fail again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kayak.client.backoff import ExponentialBackoff
from kayak.client.config import ClientConfig
from kayak.client.connection import BrokerConnection
from kayak.client.security.channel import ConnectionSecurity
from kayak.client.security.errors import is_authentication_error
from kayak.client.statistics import ConnectionCounters
from kayak.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    KayakError,
    NetworkError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kayak.protocol.messages import MetadataRequest
from kayak.protocol.messages.metadata_request import MetadataRequestTopic
from kayak.protocol.messages.metadata_response import MetadataResponse, MetadataResponsePartition

log = logging.getLogger(__name__)

METADATA_MAX_VERSION = 12
BOOTSTRAP = -1  # node id of a bootstrap connection before the broker's real id is known


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1 while there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    internal: bool = False
    error_code: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(slots=True)
class ClusterMetadata:
    """One snapshot of the cluster as a Metadata response described it."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    fetched_at: float = 0.0
    topic_errors: dict[str, int] = field(default_factory=dict)
    """Topics the last Metadata answer refused, with the error code (missing ones left out)."""


class Cluster:
    """The client's view of the cluster and its connections to it."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.security = ConnectionSecurity.from_config(config.security)
        self.metadata = ClusterMetadata()
        # Only producer and consumer configurations have the property; the admin's never asks.
        self.allow_auto_create_topics = bool(getattr(config, "allow_auto_create_topics", False))
        self._connections: dict[int, BrokerConnection] = {}
        # Per (node, host, port): a reconnected broker keeps counting where it left off.
        self._counters: dict[tuple[int, str, int], ConnectionCounters] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        # Fetches get connections of their own: a broker (Apache Kafka's too) handles one
        # connection's requests one at a time, in order, so anything sent behind a Fetch
        # parked for fetch.max.wait.ms would wait that long (see fetch_connection).
        self._fetch_connections: dict[int, BrokerConnection] = {}
        self._fetch_connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (attempts, last failure)
        self._topics: set[str] = set()
        self._refreshing: asyncio.Task[ClusterMetadata] | None = None
        self._backoff = ExponentialBackoff(
            config.reconnect_backoff_ms, config.reconnect_backoff_max_ms
        )
        self._closing: set[asyncio.Future[None]] = set()
        self._closed = False

    # -- bootstrap and metadata -----------------------------------------------------------

    async def bootstrap(self) -> None:
        """Reach any bootstrap server and load metadata, within ``request.timeout.ms``.

        A connection lost in the middle of that first Metadata request (a broker restarting
        as the client starts) is retried with backoff like a refused one, not raised."""
        deadline = time.monotonic() + self._request_timeout
        attempt = 0
        while True:
            try:
                await self.refresh_metadata()
                return
            except (KafkaError, KafkaTimeoutError) as exc:
                if not exc.retriable or self._closed or time.monotonic() >= deadline:
                    raise
                log.debug("bootstrap metadata failed (%s); retrying", exc)
            await asyncio.sleep(
                min(self._backoff.delay(attempt), max(deadline - time.monotonic(), 0))
            )
            attempt += 1

    def add_topics(self, topics: Iterable[str]) -> None:
        """Topics whose metadata every refresh should include."""
        self._topics.update(topics)

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, all_topics: bool = False
    ) -> ClusterMetadata:
        """Fetch fresh metadata; concurrent callers share one request."""
        if topics:
            self.add_topics(topics)
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh(all_topics))
            self._refreshing.add_done_callback(_retrieve_exception)
        return await asyncio.shield(self._refreshing)

    async def _refresh(self, all_topics: bool) -> ClusterMetadata:
        connection = await self.any_connection()
        wanted = (
            None if all_topics else [MetadataRequestTopic(name=t) for t in sorted(self._topics)]
        )
        version = connection.version_for(MetadataRequest, METADATA_MAX_VERSION)
        if wanted is not None and not wanted and version == 0:
            wanted = [MetadataRequestTopic(name="__kayak_none__")]  # v0: empty list means all
        request = MetadataRequest(
            topics=wanted, allow_auto_topic_creation=self.allow_auto_create_topics
        )
        response: MetadataResponse = await connection.request(request, version)
        snapshot = ClusterMetadata(
            brokers={
                b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
            },
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            fetched_at=time.monotonic(),
        )
        if not all_topics:
            snapshot.topics = dict(self.metadata.topics)
        for t in response.topics:
            if t.name is None:
                continue
            partitions = {p.partition_index: _partition_info(t.name, p) for p in t.partitions}
            if t.error_code:
                snapshot.topics.pop(t.name, None)
                if t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    snapshot.topic_errors[t.name] = t.error_code
                    log.debug("metadata for %s: error %d", t.name, t.error_code)
                continue
            snapshot.topics[t.name] = TopicInfo(t.name, t.topic_id, partitions, t.is_internal)
        self.metadata = snapshot
        self._forget_moved_brokers()
        return snapshot

    def _forget_moved_brokers(self) -> None:
        for pool in (self._connections, self._fetch_connections):
            self._forget_moved(pool)

    def _forget_moved(self, pool: dict[int, BrokerConnection]) -> None:
        for node, connection in list(pool.items()):
            info = self.metadata.brokers.get(node)
            moved = info is None or (info.host, info.port) != (connection.host, connection.port)
            if node != BOOTSTRAP and moved:
                del pool[node]
                self._closing = {t for t in self._closing if not t.done()}
                self._closing.add(asyncio.ensure_future(connection.close()))

    def metadata_is_stale(self) -> bool:
        age_ms = (time.monotonic() - self.metadata.fetched_at) * 1000
        return age_ms >= self.config.metadata_max_age_ms

    async def topic(self, name: str, timeout: float | None = None) -> TopicInfo:
        """Metadata for ``name``, refreshing until it appears or the timeout passes.

        A refresh that fails retriably (the broker asked went away mid-request, as when it
        restarts) is retried with backoff within the timeout, like a topic not there yet."""
        self.add_topics([name])
        known = self.metadata.topics.get(name)
        if known is not None and not self.metadata_is_stale():
            return known
        deadline = time.monotonic() + (timeout if timeout is not None else self._request_timeout)
        attempt = 0
        while True:
            try:
                snapshot = await self.refresh_metadata()
            except (KafkaError, KafkaTimeoutError) as exc:
                if not exc.retriable or self._closed or time.monotonic() >= deadline:
                    raise
                log.debug("metadata for %s failed (%s); retrying", name, exc)
                snapshot = None
            if snapshot is not None:
                found = snapshot.topics.get(name)
                if found is not None:
                    return found
                _raise_if_refused(snapshot, name)
            if time.monotonic() >= deadline:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            await asyncio.sleep(
                min(self._backoff.delay(attempt), max(deadline - time.monotonic(), 0))
            )
            attempt += 1

    def leader(self, topic: str, partition: int) -> int:
        """The leader's node id, or -1 if unknown (refresh metadata and retry)."""
        info = self.metadata.topics.get(topic)
        if info is None or partition not in info.partitions:
            return -1
        return info.partitions[partition].leader

    # -- connections ----------------------------------------------------------------------

    @property
    def _request_timeout(self) -> float:
        return self.config.request_timeout_ms / 1000

    async def connection(self, node_id: int) -> BrokerConnection:
        """The connection to broker ``node_id``, opened (with backoff) if needed."""
        return await self._pooled(node_id, self._connections, self._connecting)

    async def fetch_connection(self, node_id: int) -> BrokerConnection:
        """A second connection to broker ``node_id``, for Fetch requests only. A Fetch may
        be parked at the broker for fetch.max.wait.ms, and brokers answer a connection's
        requests in order (Apache Kafka mutes a connection while a request of it is being
        handled), so ListOffsets, OffsetFetch, heartbeats and commits go on the other."""
        return await self._pooled(node_id, self._fetch_connections, self._fetch_connecting)

    async def _pooled(
        self,
        node_id: int,
        pool: dict[int, BrokerConnection],
        connecting: dict[int, asyncio.Task[BrokerConnection]],
    ) -> BrokerConnection:
        existing = pool.get(node_id)
        if existing is not None and existing.usable:
            return existing
        task = connecting.get(node_id)
        if task is None or task.done():
            task = asyncio.ensure_future(self._open(node_id, pool))
            task.add_done_callback(_retrieve_exception)
            connecting[node_id] = task
        return await asyncio.shield(task)

    async def _open(self, node_id: int, pool: dict[int, BrokerConnection]) -> BrokerConnection:
        info = self.metadata.brokers.get(node_id)
        if info is None:
            await self.refresh_metadata()
            info = self.metadata.brokers.get(node_id)
            if info is None:
                raise NetworkError(f"broker {node_id} is not in the cluster's metadata")
        return await self._dial(node_id, info.host, info.port, pool)

    async def _dial(
        self, node_id: int, host: str, port: int, pool: dict[int, BrokerConnection] | None = None
    ) -> BrokerConnection:
        attempts, last = self._failures.get(node_id, (0, 0.0))
        if attempts:
            wait = self._backoff.delay(attempts - 1) - (time.monotonic() - last)
            if wait > 0:
                await asyncio.sleep(wait)
        connection = BrokerConnection(
            host, port, node_id=node_id, client_id=self.config.client_id,
            request_timeout_ms=self.config.request_timeout_ms, security=self.security,
            counters=self._counters.setdefault((node_id, host, port), ConnectionCounters()),
        )  # fmt: skip
        try:
            await connection.connect(self.config.socket_connection_setup_timeout_ms / 1000)
        except KayakError:
            self._failures[node_id] = (attempts + 1, time.monotonic())
            await connection.close()
            raise
        self._failures.pop(node_id, None)
        (self._connections if pool is None else pool)[node_id] = connection
        return connection

    def connections(self) -> dict[int, BrokerConnection]:
        """The connections open now, by node id (-1 and below: bootstrap addresses)."""
        return dict(self._connections)

    async def any_connection(self) -> BrokerConnection:
        """A usable connection to any broker: a known one, else each bootstrap in turn."""
        for connection in self._connections.values():
            if connection.usable:
                return connection
        for node_id in list(self.metadata.brokers):
            try:
                return await self.connection(node_id)
            except KayakError as exc:
                if is_authentication_error(exc):
                    raise
                continue
        return await self._bootstrap_connection()

    async def _bootstrap_connection(self) -> BrokerConnection:
        deadline = time.monotonic() + self._request_timeout
        errors: list[str] = []
        attempt = 0
        while True:
            for host, port in self.config.bootstrap_servers:
                try:
                    return await self._dial(BOOTSTRAP, host, port)
                except KayakError as exc:
                    if is_authentication_error(exc):
                        raise
                    errors.append(f"{host}:{port}: {exc}")
            if time.monotonic() >= deadline or self._closed:
                raise KafkaTimeoutError(
                    "no bootstrap server answered within request.timeout.ms: "
                    + "; ".join(errors[-len(self.config.bootstrap_servers) :])
                )
            await asyncio.sleep(
                min(self._backoff.delay(attempt), max(deadline - time.monotonic(), 0))
            )
            attempt += 1

    async def close(self) -> None:
        self._closed = True
        for task in [*self._connecting.values(), *self._fetch_connecting.values()]:
            task.cancel()
        for connection in [*self._connections.values(), *self._fetch_connections.values()]:
            await connection.close()
        self._connections.clear()
        self._fetch_connections.clear()


def _retrieve_exception(task: asyncio.Task[object]) -> None:
    # A shared task's callers may all have been cancelled: its failure is theirs to see, not
    # a "Task exception was never retrieved" warning.
    if not task.cancelled():
        task.exception()


def _raise_if_refused(snapshot: ClusterMetadata, name: str) -> None:
    """Raise at once when the broker refused ``name`` for good (an invalid name, no
    permission): waiting for it to appear would only run out the timeout."""
    code = snapshot.topic_errors.get(name)
    if code is None:
        return
    error = error_for_code(code)(f"topic {name!r}: {error_for_code(code).default_message}")
    if not error.retriable:
        raise error


def _partition_info(topic: str, p: MetadataResponsePartition) -> PartitionInfo:
    return PartitionInfo(
        topic,
        p.partition_index,
        p.leader_id,
        p.leader_epoch,
        tuple(p.replica_nodes),
        tuple(p.isr_nodes),
        p.error_code,
    )


def raise_partition_error(code: int, topic: str, partition: int) -> None:
    """Raise the kayak error for a per-partition error code (no-op for 0)."""
    if code:
        cls = error_for_code(code)
        raise cls(f"{topic}-{partition}: {cls.error_name}")


__all__ = [
    "BrokerInfo",
    "Cluster",
    "ClusterMetadata",
    "KafkaError",
    "PartitionInfo",
    "TopicInfo",
    "raise_partition_error",
]
