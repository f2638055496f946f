"""``kayak partitions``: where a sharded broker's partitions live, and moving them."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kayak.broker.catalog import CATALOG_FILE, TopicCatalog
from kayak.broker.log import LogConfig
from kayak.errors import KayakError

_DATA_DIR = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("kayak-data"),
    show_default=True,
    help="The broker's data directory.",
)


@click.group()
def partitions() -> None:
    """Inspect and move partitions between the shards of a sharded broker (--shards N)."""


@partitions.command("list")
@_DATA_DIR
def list_partitions(data_dir: Path) -> None:
    """Every partition with the shard that leads it."""
    catalog = _catalog(data_dir)
    table = Table("topic", "partition", "shard", "leader epoch")
    for topic in sorted(catalog.topics(), key=lambda t: t.name):
        for index, owner in enumerate(topic.owners):
            moving = f" → {topic.handoffs[index]}" if index in topic.handoffs else ""
            table.add_row(topic.name, str(index), f"{owner}{moving}", str(topic.epochs[index]))
    Console().print(table)


@partitions.command("move")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(0))
@click.option("--to", "target", type=click.IntRange(0), required=True, help="Target shard.")
@click.option("--timeout", type=click.FloatRange(0), default=30.0, show_default=True)
@_DATA_DIR
def move(topic: str, partition: int, target: int, timeout: float, data_dir: Path) -> None:
    """Move TOPIC's PARTITION to shard --to; clients follow through metadata."""
    catalog = _catalog(data_dir)
    try:
        catalog.request_handoff(topic, partition, target)
    except KayakError as exc:
        raise click.ClickException(str(exc)) from exc
    console = Console(stderr=True)
    deadline = time.monotonic() + timeout
    with console.status(f"waiting for shard to hand {topic}-{partition} to shard {target}"):
        while time.monotonic() < deadline:
            catalog = _catalog(data_dir)
            found = catalog.get(topic)
            if found is not None and found.owners[partition] == target:
                console.print(f"{topic}-{partition} is now led by shard {target}")
                return
            time.sleep(0.1)
    raise click.ClickException(
        f"{topic}-{partition} was not handed over within {timeout:g}s (is its shard running?)"
    )


_MARKERS = (CATALOG_FILE, "meta.properties")  # what a broker writes to its data directory


def _catalog(data_dir: Path) -> TopicCatalog:
    """The data directory's cluster map; a one-line error (nothing created) if the directory
    holds no kayak data or the map cannot be read."""
    if not any((data_dir / name).exists() for name in _MARKERS):
        raise click.ClickException(
            f"{data_dir} holds no kayak data (no {CATALOG_FILE} or meta.properties): give the "
            "broker's --data-dir"
        )
    try:
        catalog = TopicCatalog(data_dir, LogConfig(), node_id=-1)
        catalog.reload()
    except (KayakError, OSError, ValueError) as exc:
        raise click.ClickException(
            f"cannot read the cluster map in {data_dir}: {' '.join(str(exc).split())}"
        ) from None
    return catalog
