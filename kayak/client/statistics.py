"""Client statistics: what a producer, consumer or admin client has done, as a plain dict.

The layout follows librdkafka's statistics JSON where the two map onto each other (the same
key names, ``ts`` in microseconds, ``time`` in seconds, ``brokers`` keyed ``host:port/id``,
``topics`` → ``partitions``, ``cgrp``), so dashboards and scripts written for it carry over;
kayak hands over a dict, not JSON text.

Counting is kept off the hot path: every number is a plain integer attribute bumped where
the bytes or batches are handled anyway (once per request, response or batch, never per
record), and the dict is only built when asked for (:meth:`ClientStatistics.snapshot`) or
every ``statistics.interval.ms`` for ``stats_cb``.

Counters of a connection live in a :class:`ConnectionCounters` the connection owns.
:class:`ClientStatistics` remembers every connection's counters it has seen under the broker's
name, so a broker's numbers keep growing across reconnects; a connection opened and lost
between two snapshots without being seen is the one thing not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

log = logging.getLogger(__name__)

__all__ = [
    "UNKNOWN_OFFSET",
    "ClientStatistics",
    "ConnectionCounters",
    "PartitionCounters",
    "RttStats",
    "StatsCallback",
    "StatsReporter",
]

StatsCallback = Callable[[dict[str, Any]], object]
"""``stats_cb``: called with the statistics dict every ``statistics.interval.ms``."""

UNKNOWN_OFFSET = -1
"""An offset (or lag) not known yet."""

RTT_SAMPLES = 512
"""Round trips kept per connection for the percentiles: the most recent ones."""


class RttStats:
    """Round-trip times of one connection's requests: running min/max/sum/count, and the last
    :data:`RTT_SAMPLES` values (a ring) for p50/p99. Seconds in, microseconds out."""

    __slots__ = ("count", "max", "min", "next", "samples", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.min = float("inf")
        self.max = 0.0
        self.samples: list[float] = []
        self.next = 0  # where the next sample goes once the ring is full

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        if seconds < self.min:
            self.min = seconds
        if seconds > self.max:
            self.max = seconds
        samples = self.samples
        if len(samples) < RTT_SAMPLES:
            samples.append(seconds)
        else:
            samples[self.next] = seconds
            self.next = (self.next + 1) % RTT_SAMPLES

    @staticmethod
    def merged(parts: Iterable[RttStats], sampled: Iterable[RttStats]) -> dict[str, int]:
        """librdkafka's window fields (µs): count, min, max and mean over ``parts``,
        percentiles over the samples kept by ``sampled``."""
        count, total, low, high = 0, 0.0, float("inf"), 0.0
        for part in parts:
            count += part.count
            total += part.total
            low, high = min(low, part.min), max(high, part.max)
        samples = [value for part in sampled for value in part.samples]
        if not count:
            return {"min": 0, "max": 0, "avg": 0, "p50": 0, "p99": 0, "cnt": 0}
        samples.sort()
        return {
            "min": _us(low),
            "max": _us(high),
            "avg": _us(total / count),
            "p50": _us(_percentile(samples, 0.50)),
            "p99": _us(_percentile(samples, 0.99)),
            "cnt": count,
        }


class ConnectionCounters:
    """What one connection sent and received; bumped by the connection itself."""

    __slots__ = ("requests", "rtt", "rx", "rx_bytes", "tx", "tx_bytes")

    def __init__(self) -> None:
        self.tx = 0  # requests written
        self.tx_bytes = 0
        self.rx = 0  # responses read
        self.rx_bytes = 0
        self.requests: dict[type, int] = {}  # request class -> count
        self.rtt = RttStats()


class PartitionCounters:
    """One partition's records and bytes through this client, kept across reassignments."""

    __slots__ = ("committed_offset", "rx_bytes", "rx_records")

    def __init__(self) -> None:
        self.rx_records = 0  # records handed to the application
        self.rx_bytes = 0  # their batches' bytes, framing included (librdkafka's rxbytes)
        self.committed_offset = UNKNOWN_OFFSET  # the last offset this consumer committed


class _Connection(Protocol):
    """What a snapshot reads of a connection (``kayak.client.connection.BrokerConnection``)."""

    host: str
    port: int
    node_id: int
    counters: ConnectionCounters

    @property
    def usable(self) -> bool: ...

    def in_flight(self) -> int: ...


class _Broker:
    """One broker's counters across its connections (one after another, on reconnects)."""

    __slots__ = ("node_id", "parts", "retired_rtt", "totals")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.parts: list[ConnectionCounters] = []  # every connection's counters seen
        self.totals = ConnectionCounters()  # counters of connections gone, folded in
        self.retired_rtt: list[RttStats] = []

    def adopt(self, counters: ConnectionCounters) -> None:
        if not any(part is counters for part in self.parts):
            self.parts.append(counters)

    def retire_except(self, live: ConnectionCounters | None) -> None:
        """Fold the counters of connections that are gone into the totals (they no longer
        change), keeping at most the latest RTT window of them."""
        for part in [p for p in self.parts if p is not live]:
            totals = self.totals
            totals.tx += part.tx
            totals.tx_bytes += part.tx_bytes
            totals.rx += part.rx
            totals.rx_bytes += part.rx_bytes
            for cls, count in part.requests.items():
                totals.requests[cls] = totals.requests.get(cls, 0) + count
            self.retired_rtt = [part.rtt]  # the latest gone connection's window
            rtt = totals.rtt
            rtt.count += part.rtt.count
            rtt.total += part.rtt.total
            rtt.min, rtt.max = min(rtt.min, part.rtt.min), max(rtt.max, part.rtt.max)
            self.parts.remove(part)

    def as_dict(self, name: str, live: _Connection | None) -> dict[str, Any]:
        every = [self.totals, *self.parts]
        requests: dict[str, int] = {}
        for part in every:
            for cls, count in part.requests.items():
                api = str(getattr(cls, "NAME", cls.__name__)).removesuffix("Request")
                requests[api] = requests.get(api, 0) + count
        live_rtt = [p.rtt for p in self.parts]
        rtt = RttStats.merged([self.totals.rtt, *live_rtt], [*self.retired_rtt, *live_rtt])
        return {
            "name": name,
            "nodeid": self.node_id,
            "state": "UP" if live is not None and live.usable else "DOWN",
            "tx": sum(p.tx for p in every),
            "txbytes": sum(p.tx_bytes for p in every),
            "rx": sum(p.rx for p in every),
            "rxbytes": sum(p.rx_bytes for p in every),
            "req": requests,
            "rtt": rtt,
            "outbuf_cnt": live.in_flight() if live is not None else 0,
        }


class ClientStatistics:
    """Builds a client's statistics dict; one per client, fed by the client's own parts.

    ``kind`` is librdkafka's ``type`` ("producer", "consumer"; "admin" for the admin
    client). ``connections`` lists the client's connections at the moment of a snapshot, by
    the broker's name in the dict (see :func:`cluster_connections`), plus any the client
    keeps apart (a consumer's ``GroupCoordinator``).
    """

    def __init__(
        self,
        kind: str,
        client_id: str,
        connections: Callable[[], Iterable[tuple[str, _Connection]]],
    ) -> None:
        self.kind = kind
        self.client_id = client_id
        self.name = f"{client_id}#{kind}-{_next_instance()}"
        self._connections = connections
        self._brokers: dict[str, _Broker] = {}
        self._started = time.monotonic()

    def brokers(self) -> dict[str, dict[str, Any]]:
        """``brokers`` of the snapshot, adopting the connections open now."""
        live: dict[str, _Connection] = {}
        for name, connection in self._connections():
            broker = self._brokers.get(name)
            if broker is None:
                broker = self._brokers[name] = _Broker(connection.node_id)
            broker.adopt(connection.counters)
            live[name] = connection
        out = {}
        for name, broker in self._brokers.items():
            current = live.get(name)
            broker.retire_except(current.counters if current is not None else None)
            out[name] = broker.as_dict(name, current)
        return out

    def snapshot(
        self,
        topics: dict[str, dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The whole dict: top-level totals, ``brokers``, ``topics`` and ``extra`` keys
        (``msg_cnt``, ``txmsgs``, ``cgrp``, ... from the client)."""
        now = time.time()
        brokers = self.brokers()
        stats: dict[str, Any] = {
            "name": self.name,
            "client_id": self.client_id,
            "type": self.kind,
            "ts": int(time.monotonic() * 1_000_000),
            "time": int(now),
            "age": int((time.monotonic() - self._started) * 1_000_000),
            "msg_cnt": 0,
            "msg_size": 0,
            "tx": sum(b["tx"] for b in brokers.values()),
            "tx_bytes": sum(b["txbytes"] for b in brokers.values()),
            "rx": sum(b["rx"] for b in brokers.values()),
            "rx_bytes": sum(b["rxbytes"] for b in brokers.values()),
            "txmsgs": 0,
            "txmsg_bytes": 0,
            "rxmsgs": 0,
            "rxmsg_bytes": 0,
            "brokers": brokers,
            "topics": topics or {},
        }
        stats.update(extra)
        return stats


def partition_entry(
    *,
    txmsgs: int = 0,
    txbytes: int = 0,
    rxmsgs: int = 0,
    rxbytes: int = 0,
    fetch_offset: int = UNKNOWN_OFFSET,
    committed_offset: int = UNKNOWN_OFFSET,
    hi_offset: int = UNKNOWN_OFFSET,
    consumer_lag: int = UNKNOWN_OFFSET,
    **extra: int,
) -> dict[str, int]:
    """One partition's dict, every key present (-1: not known, or not this kind's)."""
    return {
        "txmsgs": txmsgs,
        "txbytes": txbytes,
        "rxmsgs": rxmsgs,
        "rxbytes": rxbytes,
        "fetch_offset": fetch_offset,
        "committed_offset": committed_offset,
        "hi_offset": hi_offset,
        "consumer_lag": consumer_lag,
        **extra,
    }


def nest_partitions(
    entries: Iterable[tuple[str, int, dict[str, int]]],
) -> dict[str, dict[str, Any]]:
    """``{topic: {"topic": topic, "partitions": {p: entry}}}`` from (topic, p, entry)."""
    topics: dict[str, dict[str, Any]] = {}
    for topic, partition, entry in entries:
        topics.setdefault(topic, {"topic": topic, "partitions": {}})["partitions"][partition] = (
            entry
        )
    return topics


def sum_partitions(topics: dict[str, dict[str, Any]], key: str) -> int:
    return sum(p[key] for t in topics.values() for p in t["partitions"].values())


class StatsReporter:
    """Calls ``stats_cb`` with a fresh snapshot every ``statistics.interval.ms`` (librdkafka's
    periodic statistics), from a task on the client's loop; a failing callback is logged and
    the reports go on. An async callback is awaited before the next report."""

    def __init__(
        self, interval_ms: int, callback: StatsCallback, snapshot: Callable[[], dict[str, Any]]
    ) -> None:
        self._interval = interval_ms / 1000
        self._callback = callback
        self._snapshot = snapshot
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                result = self._callback(self._snapshot())
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("stats_cb failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def reporter_for(
    interval_ms: int, callback: StatsCallback | None, snapshot: Callable[[], dict[str, Any]]
) -> StatsReporter | None:
    """A reporter when both ``statistics.interval.ms`` and ``stats_cb`` are set, else None
    (a warning when only one is: librdkafka emits statistics to no one in that case)."""
    if interval_ms > 0 and callback is not None:
        return StatsReporter(interval_ms, callback, snapshot)
    if interval_ms > 0:
        log.warning("statistics.interval.ms is set but no stats_cb is: no statistics reported")
    elif callback is not None:
        log.warning("stats_cb is set but statistics.interval.ms is 0: it will not be called")
    return None


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


_instances = itertools.count(1)


def _next_instance() -> int:
    return next(_instances)


class _HasConnections(Protocol):
    """A ``kayak.client.cluster.Cluster`` (kept structural: this module imports no client)."""

    def connections(self) -> dict[int, Any]: ...


def cluster_connections(cluster: _HasConnections | None) -> list[tuple[str, _Connection]]:
    """The cluster's connections open now, named librdkafka's way: node id, or "bootstrap"
    for a connection to a bootstrap address before the broker's id is known."""
    if cluster is None:
        return []
    return [
        (f"{c.host}:{c.port}/{'bootstrap' if node < 0 else node}", c)
        for node, c in cluster.connections().items()
    ]
