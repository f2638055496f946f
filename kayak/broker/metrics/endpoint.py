"""``GET /metrics`` on the broker's web server, in Prometheus' text format.

The web server is assembled by :func:`kayak.broker.web.broker_web_server` for whichever
extension serves HTTP (the schema registry today). Its route finds what to serve at request
time, in :mod:`kayak.broker.metrics.publication`.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from kayak.broker.config import BrokerConfig
from kayak.broker.metrics.publication import published

METRICS_PATH = "/metrics"


def metrics_routes(config: BrokerConfig) -> list[web.RouteDef]:
    """The ``/metrics`` route for the web server of the broker configured by ``config``."""

    async def metrics(request: web.Request) -> web.Response:
        registry = published(config)
        if registry is None:
            raise web.HTTPNotFound(text="metrics are off on this broker")
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response

    return [web.get(METRICS_PATH, metrics)]
