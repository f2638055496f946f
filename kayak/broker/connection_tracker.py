"""The broker's open connections, counted against ``max.connections`` and
``max.connections.per.ip``, and the periodic sweep that closes those past a deadline."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Protocol

from kayak.broker.context import BrokerContext
from kayak.broker.metrics.requests import RequestMetrics
from kayak.broker.security.listeners import Listener
from kayak.broker.security.session import ConnectionSession

log = logging.getLogger(__name__)


class TrackedConnection(Protocol):
    """What the tracker and its readers (metrics, the broker's session list) need of a
    connection (``BrokerConnection``)."""

    listener: Listener
    session: ConnectionSession

    def check_deadlines(self, now: float, idle_s: float, receive_s: float) -> None: ...

    def close(self) -> None: ...


class ConnectionTracker:
    """The broker's open connections: max.connections, max.connections.per.ip and the
    periodic deadline sweep (idle connections, requests that never finish arriving)."""

    def __init__(self, broker: BrokerContext, metrics: RequestMetrics | None = None) -> None:
        config = broker.config
        self.metrics = metrics  # None: requests are not timed
        self.created = 0  # connections admitted since start (metrics)
        self.refused = 0  # connections refused by a limit (metrics)
        self.max_connections = config.max_connections
        self.max_per_ip = config.max_connections_per_ip
        self.idle_s = config.connections_max_idle_ms / 1000
        self.receive_s = config.request_receive_timeout_ms / 1000
        self.connections: set[TrackedConnection] = set()
        self._per_ip: Counter[str] = Counter()

    @property
    def sweep_interval(self) -> float:
        """Seconds between sweeps: about a second, finer when a deadline is shorter."""
        return max(min(1.0, self.idle_s / 4, self.receive_s / 4), 0.01)

    def admit(self, connection: TrackedConnection, client_host: str) -> bool:
        """Count a connection that just opened; False (log line) if over a limit."""
        if len(self.connections) >= self.max_connections:
            self.refused += 1
            log.warning(
                "refusing a connection from %s: max.connections=%d",
                client_host,
                self.max_connections,
            )
            return False
        if self._per_ip[client_host] >= self.max_per_ip:
            self.refused += 1
            log.warning(
                "refusing a connection from %s: it has %d open (max.connections.per.ip=%d)",
                client_host,
                self._per_ip[client_host],
                self.max_per_ip,
            )
            return False
        self.connections.add(connection)
        self._per_ip[client_host] += 1
        self.created += 1
        return True

    def remove(self, connection: TrackedConnection, client_host: str) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self._per_ip[client_host] -= 1
            if self._per_ip[client_host] <= 0:
                del self._per_ip[client_host]

    def sweep(self, now: float | None = None) -> None:
        """Close connections past a deadline (one log line each)."""
        now = time.monotonic() if now is None else now
        for connection in list(self.connections):
            connection.check_deadlines(now, self.idle_s, self.receive_s)

    def close_all(self) -> None:
        for connection in list(self.connections):
            connection.close()
