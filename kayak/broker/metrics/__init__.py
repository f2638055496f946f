"""The broker's Prometheus metrics: plain counters on the hot path, samples at scrape time.

- :class:`BrokerMetrics`: what one broker process counts (requests, group commit, and
  references to the catalog, connections and committed offsets it reads when scraped).
- :class:`BrokerCollector` / :class:`ClusterCollector`: those numbers as metric families;
  the latter merges the other shards' snapshots and computes consumer lag.
- :func:`publish` / :func:`withdraw`: what ``GET /metrics`` serves for a broker; the route
  itself is :mod:`kayak.broker.metrics.endpoint`, imported only by the web server (aiohttp
  costs a broker that serves no HTTP a third of its start).
"""

from __future__ import annotations

from kayak.broker.metrics.cluster import ClusterCollector, SnapshotWriter
from kayak.broker.metrics.collector import BrokerCollector, BrokerMetrics, FlushStats
from kayak.broker.metrics.publication import publish, withdraw
from kayak.broker.metrics.requests import RequestMetrics

__all__ = [
    "BrokerCollector",
    "BrokerMetrics",
    "ClusterCollector",
    "FlushStats",
    "RequestMetrics",
    "SnapshotWriter",
    "publish",
    "withdraw",
]
