"""The cluster page: what Metadata / DescribeCluster say (cluster id, controller, brokers or
shards), whether each broker accepts connections, its listeners and the broker's uptime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from aiohttp import web

from kayak.client.admin import BrokerDescription, ClusterDescription
from kayak.console.cluster import PAGE_TIMEOUT_MS
from kayak.console.html import Html, definition_list, human_duration, render, table
from kayak.console.layout import PREFIX
from kayak.console.view import View, page_handler

CONNECT_TIMEOUT_S = 1.0


async def reachable(host: str, port: int) -> tuple[bool, float | None]:
    """Whether ``host:port`` accepts a TCP connection, and how long that took (ms)."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False, None
    writer.close()
    return True, (time.monotonic() - started) * 1000


def render_cluster(
    cluster: ClusterDescription,
    health: Mapping[int, tuple[bool, float | None]],
    listeners: Mapping[int, Sequence[str]],
    uptime_s: float | None,
    topic_count: int,
    partition_count: int,
) -> Html:
    facts: dict[str, object] = {
        "Cluster id": cluster.cluster_id or "—",
        "Controller": cluster.controller_id,
        "Brokers (shards)": len(cluster.brokers),
        "Topics": topic_count,
        "Partitions": partition_count,
    }
    if uptime_s is not None:
        facts["Broker up for"] = human_duration(uptime_s)

    def status(broker: BrokerDescription) -> Html:
        ok, ms = health.get(broker.node_id, (False, None))
        if ok:
            return render('<span class="badge ok">accepts connections</span> {:.1f} ms', ms or 0)
        return Html('<span class="badge bad">unreachable</span>')

    rows = [
        (b.node_id, f"{b.host}:{b.port}", b.rack or "—",
         "controller" if b.node_id == cluster.controller_id else "", status(b),
         ", ".join(listeners.get(b.node_id, ())) or "—")
        for b in cluster.brokers
    ]  # fmt: skip
    return render(
        "<h1>Cluster</h1>{}<h2>Brokers</h2>{}",
        definition_list(facts),
        table(["Node", "Address", "Rack", "Role", "Health", "Listeners"], rows,
              table_id="brokers", numeric=(0,)),
    )  # fmt: skip


@page_handler("cluster")
async def cluster_page(view: View) -> web.StreamResponse:
    admin = await view.state.clients.admin(view.login)
    cluster, topics = await asyncio.gather(
        admin.describe_cluster(timeout_ms=PAGE_TIMEOUT_MS),
        admin.list_topics(internal=True, timeout_ms=PAGE_TIMEOUT_MS),
    )
    checks = await asyncio.gather(*(reachable(b.host, b.port) for b in cluster.brokers))
    health = {b.node_id: check for b, check in zip(cluster.brokers, checks, strict=True)}
    listeners: dict[int, list[str]] = {}
    if view.state.listeners is not None:
        for node, name, host, port in view.state.listeners():
            listeners.setdefault(node, []).append(f"{name}://{host}:{port}")
    uptime = time.time() - view.state.started if view.state.listeners is not None else None
    body = render_cluster(
        cluster, health, listeners, uptime,
        len(topics), sum(t.partition_count for t in topics.values()),
    )  # fmt: skip
    return view.html("Cluster", body, section="cluster")


async def home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(f"{PREFIX}/")
