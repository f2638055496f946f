"""The broker's Prometheus metrics: plain counters on the hot path, samples at scrape time.

- :class:`BrokerMetrics`: what one broker process counts (requests, group commit, and
  references to the catalog, connections and committed offsets it reads when scraped).
- :class:`BrokerCollector` / :class:`ClusterCollector`: those numbers as metric families;
  the latter merges the other shards' snapshots and computes consumer lag.
- :func:`metrics_routes`: ``GET /metrics`` for the broker's web server.
"""

from __future__ import annotations

from kayak.broker.metrics.cluster import ClusterCollector, SnapshotWriter
from kayak.broker.metrics.collector import BrokerCollector, BrokerMetrics, FlushStats
from kayak.broker.metrics.endpoint import METRICS_PATH, metrics_routes, publish, withdraw
from kayak.broker.metrics.requests import RequestMetrics

__all__ = [
    "METRICS_PATH",
    "BrokerCollector",
    "BrokerMetrics",
    "ClusterCollector",
    "FlushStats",
    "RequestMetrics",
    "SnapshotWriter",
    "metrics_routes",
    "publish",
    "withdraw",
]
