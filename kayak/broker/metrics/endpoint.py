"""``GET /metrics`` on the broker's web server, in Prometheus' text format.

The web server is assembled by :func:`kayak.broker.web.broker_web_server` for whichever
extension serves HTTP (the schema registry today). Its route finds what to serve at request
time: the collectors a running :class:`~kayak.broker.server.Broker` published for its data
directory and node id, so the server's builder needs nothing but the broker's settings.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from kayak.broker.config import BrokerConfig

METRICS_PATH = "/metrics"

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


def metrics_routes(config: BrokerConfig) -> list[web.RouteDef]:
    """The ``/metrics`` route for the web server of the broker configured by ``config``."""
    key = _key(config)

    async def metrics(request: web.Request) -> web.Response:
        registry = _published.get(key)
        if registry is None:
            raise web.HTTPNotFound(text="metrics are off on this broker")
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response

    return [web.get(METRICS_PATH, metrics)]
