"""``kayak broker``: run the embedded broker in the foreground."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import click

from kayak.broker.log import FlushMode

log = logging.getLogger("kayak.broker")


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("kayak-data"),
    show_default=True,
    help="Directory holding topics, logs and offsets.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9092, show_default=True)
@click.option(
    "--flush",
    type=click.Choice([m.value for m in FlushMode]),
    default=FlushMode.GROUP.value,
    show_default=True,
    help="group: fsync before ack, shared between waiting appends; always: one fsync per "
    "request; never: page cache only (Kafka's default).",
)
@click.option(
    "--num-partitions",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="num.partitions for auto-created topics.",
)
@click.option(
    "--group-initial-rebalance-delay-ms",
    type=click.IntRange(0),
    default=3000,
    show_default=True,
    help="group.initial.rebalance.delay.ms",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Broker processes (one per core), each owning some partitions, one cluster; a shard "
    "that crashes is restarted. Shard i listens on PORT+i (or a free port when PORT is 0).",
)
@click.option(
    "--schema-registry-port",
    type=click.IntRange(0, 65535),
    default=8081,
    show_default=True,
    help="Port of the Confluent-compatible schema registry (HTTP; 0: a free port). "
    "With --shards, shard 0 serves it.",
)
@click.option(
    "--no-schema-registry",
    is_flag=True,
    default=False,
    help="Do not serve the schema registry.",
)
@click.option("--node-id", type=click.IntRange(0), default=None, hidden=True)
@click.option("--exit-with-parent", is_flag=True, default=False, hidden=True,
              help="Shut down cleanly when the process that started this one exits "
              "(for a broker embedded as a child process).")  # fmt: skip
@click.option("--shard-count", type=click.IntRange(1), default=None, hidden=True)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="max.connections: further connections are closed at once.",
)
@click.option(
    "--socket-request-max-bytes",
    type=click.IntRange(1024),
    default=100 * 1024 * 1024,
    show_default=True,
    help="socket.request.max.bytes: larger requests close the connection.",
)
@click.option(
    "--retention-check-interval-ms",
    type=click.IntRange(1),
    default=300_000,
    show_default=True,
    help="log.retention.check.interval.ms: how often old segments are deleted.",
)
def broker(
    data_dir: Path,
    host: str,
    port: int,
    flush: str,
    num_partitions: int,
    group_initial_rebalance_delay_ms: int,
    shards: int,
    schema_registry_port: int,
    no_schema_registry: bool,
    node_id: int | None,
    shard_count: int | None,
    exit_with_parent: bool,
    max_connections: int,
    socket_request_max_bytes: int,
    retention_check_interval_ms: int,
) -> None:
    """Run a durable Kafka-compatible broker until SIGTERM or Ctrl-C."""
    from kayak.broker import Broker

    logging.getLogger("kayak").setLevel(min(logging.getLogger().level, logging.INFO))
    if shards > 1 and node_id is None:
        from kayak.cli.shard_supervisor import supervise_shards

        if exit_with_parent:
            _watch_parent()
        registry_port = None if no_schema_registry else schema_registry_port
        raise SystemExit(supervise_shards(shards, host, port, registry_port))
    settings = {
        "node_id": node_id or 0,
        "shard_count": shard_count or 1,
        "host": host,
        "port": port,
        "flush": FlushMode(flush),
        "num_partitions": num_partitions,
        "group_initial_rebalance_delay_ms": group_initial_rebalance_delay_ms,
        "retention_check_interval_ms": retention_check_interval_ms,
        "max_connections": max_connections,
        "socket_request_max_bytes": socket_request_max_bytes,
        "schema_registry_port": None if no_schema_registry else schema_registry_port,
    }
    if exit_with_parent:
        _watch_parent()
    try:
        run_event_loop(_serve(Broker(data_dir, **settings)))
    except OSError as exc:
        raise click.ClickException(f"cannot start the broker: {exc}") from exc


def _watch_parent() -> None:
    """SIGTERM ourselves (a clean shutdown) once our parent is gone: an embedding program
    that was killed must not leave its broker running."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.info("parent process %d exited; shutting down", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="kayak-parent-watch", daemon=True).start()


async def _serve(server: object) -> None:
    from kayak.broker import Broker

    assert isinstance(server, Broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        log.info("shutting down")


def run_event_loop(main: object) -> None:
    """Run a coroutine on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]
    else:
        uvloop.run(main)  # type: ignore[arg-type]
