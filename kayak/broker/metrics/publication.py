"""Which collectors a running broker serves at ``/metrics``, found by its settings.

A :class:`~kayak.broker.server.Broker` publishes its collectors for its data directory and
node id; the web server's route (:mod:`kayak.broker.metrics.endpoint`) looks them up per
request, so whoever builds the web server needs nothing but the broker's settings. Kept apart
from the route so that a broker serving no HTTP never imports the web stack.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from kayak.broker.config import BrokerConfig

_published: dict[tuple[Path, int], CollectorRegistry] = {}


def _key(config: BrokerConfig) -> tuple[Path, int]:
    return config.data_dir.resolve(), config.node_id


def published(config: BrokerConfig) -> CollectorRegistry | None:
    """The registry served at /metrics for ``config``, if a broker published one."""
    return _published.get(_key(config))


def publish(config: BrokerConfig, collector: Collector) -> None:
    """Serve ``collector`` at ``/metrics`` on the web server built for ``config``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    _published[_key(config)] = registry


def withdraw(config: BrokerConfig) -> None:
    _published.pop(_key(config), None)
