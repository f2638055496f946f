"""The console's routes, and mounting them on the broker's web server."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler

from kayak.console import (
    broker_metrics,
    groups,
    messages,
    metrics_history,
    overview,
    schemas,
    topics,
)
from kayak.console.assets import SCRIPT, STYLE, asset_handler
from kayak.console.cluster import Clients, ClientSettings, broker_settings
from kayak.console.layout import PREFIX, SCRIPT_PATH, STYLE_PATH
from kayak.console.registry import RegistryAccess
from kayak.console.view import STATE_KEY, ConsoleState, ListenerFacts, PartitionSize

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig
    from kayak.broker.web.server import WebServer

log = logging.getLogger(__name__)


def routes() -> list[web.RouteDef]:
    """Every console route: pages are GETs under ``/console/``, actions POSTs there."""
    return [
        web.get(PREFIX, overview.home),
        web.get(f"{PREFIX}/", overview.cluster_page),
        web.get(STYLE_PATH, asset_handler(STYLE, "text/css")),
        web.get(SCRIPT_PATH, asset_handler(SCRIPT, "text/javascript")),
        web.get(f"{PREFIX}/topics", topics.topic_list),
        web.post(f"{PREFIX}/topics", topics.create_topic),
        web.get(f"{PREFIX}/topics/{{topic}}", topics.topic_detail),
        web.post(f"{PREFIX}/topics/{{topic}}/delete", topics.delete_topic),
        web.post(f"{PREFIX}/topics/{{topic}}/partitions", topics.add_partitions),
        web.post(f"{PREFIX}/topics/{{topic}}/configs", topics.set_config),
        web.get(f"{PREFIX}/topics/{{topic}}/messages", messages.browse),
        web.get(f"{PREFIX}/topics/{{topic}}/tail", messages.tail),
        web.get(f"{PREFIX}/groups", groups.group_list),
        web.get(f"{PREFIX}/group", groups.group_detail),
        web.post(f"{PREFIX}/group/reset", groups.reset_offsets),
        web.get(f"{PREFIX}/schemas", schemas.subject_list),
        web.get(f"{PREFIX}/schemas/subject", schemas.subject_detail),
        web.get(f"{PREFIX}/pipeline", broker_metrics.metrics_page),
    ]


@web.middleware
async def browsers_at_root_to_console(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``/`` belongs to the schema registry's API (Confluent's root, ``{}``); a browser asking
    for a page there (``Accept: text/html``) is sent to the console instead."""
    if request.path == "/" and request.method == "GET" and _wants_html(request):
        raise web.HTTPFound(f"{PREFIX}/")
    return await handler(request)


def _wants_html(request: web.Request) -> bool:
    return any(part.split(";")[0].strip() == "text/html"
               for part in request.headers.get("Accept", "").split(","))  # fmt: skip


def mount(server: WebServer, state: ConsoleState) -> None:
    """Serve the console from ``server`` (before it starts); ``state`` closes with it."""
    server.app[STATE_KEY] = state
    server.app.middlewares.append(browsers_at_root_to_console)

    async def close(app: web.Application) -> None:
        if state.metrics_history is not None:
            await state.metrics_history.stop()
        await state.close()

    async def start_sampling(app: web.Application) -> None:
        if state.metrics_history is not None:
            state.metrics_history.start()

    server.app.on_startup.append(start_sampling)
    server.app.on_cleanup.append(close)
    server.add_routes(routes())


def mount_for_broker(server: WebServer, config: BrokerConfig) -> None:
    """The console on the broker's web server, reaching the broker on its own listener."""
    mount(server, broker_state(server, config, broker_settings(config)))


def broker_state(server: WebServer, config: BrokerConfig, settings: ClientSettings) -> ConsoleState:
    def registry_url() -> str | None:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(server.host, server.host)
        host = f"[{host}]" if ":" in host else host
        return f"{server.scheme}://{host}:{server.port}"

    return ConsoleState(
        clients=Clients(settings),
        registry=RegistryAccess(registry_url, _registry_tls(config)),
        partition_size=_disk_sizes(config.data_dir),
        listeners=_shard_listeners(config),
        metrics_history=metrics_history.BrokerMetricsHistory(
            broker_metrics.published_registry(config)
        ),
        pipeline_link=broker_metrics.pipeline_link_reader(config.data_dir),
    )


def _registry_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """Trust for calling the registry on this very server over HTTPS: its own certificate."""
    if not config.schema_registry_tls or config.ssl_certificate_location is None:
        return None
    context = ssl.create_default_context(cafile=str(config.ssl_certificate_location))
    if config.ssl_ca_location is not None:
        context.load_verify_locations(cafile=str(config.ssl_ca_location))
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the server's own leaf is trusted
    return context


def _disk_sizes(data_dir: Path) -> PartitionSize:
    """Bytes of a partition's segments on disk (what the wire does not tell: kayak has no
    DescribeLogDirs)."""

    def size(topic: str, partition: int) -> int | None:
        directory = data_dir / f"{topic}-{partition}"
        try:
            return sum(f.stat().st_size for f in directory.iterdir() if f.suffix == ".log")
        except OSError:
            return None

    return size


def _shard_listeners(config: BrokerConfig) -> ListenerFacts:
    from kayak.broker.shards import ShardRegistry

    registry = ShardRegistry(config.data_dir, config.shard_count)

    def listeners() -> list[tuple[int, str, str, int]]:
        return [
            (shard.node_id, name, host, port)
            for shard in registry.shards()
            for name, host, port in shard.listeners
        ]

    return listeners
