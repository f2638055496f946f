"""``kayak registry``: the schema registry on its own, its schemas in any Kafka cluster."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import click

from kayak.cli.options import (
    bootstrap_option,
    bootstrap_servers,
    check_reachable,
    client_properties,
    client_properties_options,
    run_event_loop,
)
from kayak.errors import KayakError

log = logging.getLogger(__name__)


@click.command()
@bootstrap_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option("--port", default=8081, show_default=True, type=click.IntRange(0, 65535),
              help="Port to serve on (0: any free port).")  # fmt: skip
@click.option("--topic", default="_schemas", show_default=True,
              help="The topic the schemas are kept in (Confluent's kafkastore.topic); kayak's "
              "broker keeps _schemas for its own registry: give another name there.")  # fmt: skip
@client_properties_options("client", "security.protocol=SASL_SSL")
def registry(
    host: str, port: int, topic: str, properties: tuple[str, ...], command_config: Path | None
) -> None:
    """Serve a Confluent-compatible schema registry until Ctrl-C or SIGTERM, keeping its
    schemas in the _schemas topic of the cluster -b names (any Kafka cluster; created if
    missing). Several registries may share one cluster."""
    bootstrap = bootstrap_servers()
    settings = {**client_properties(properties, command_config), "bootstrap.servers": bootstrap}
    check_reachable(bootstrap)
    try:
        run_event_loop(_serve(settings, host, port, topic, bootstrap))
    except (KayakError, OSError) as exc:
        raise click.ClickException(f"schema registry: {exc}") from None


async def _serve(settings: dict[str, str], host: str, port: int, topic: str,
                 bootstrap: str) -> None:  # fmt: skip
    # Imported here: `kayak --help` should not pay for the client and aiohttp.
    from kayak.registry.cluster.server import StandaloneRegistry

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = StandaloneRegistry(settings, host, port, topic)
    await server.start()
    try:
        click.echo(f"schema registry on {server.url} (schemas in {topic} on {bootstrap})",
                   err=True)  # fmt: skip
        await stop.wait()
    finally:
        await server.stop()
