"""``kayak records delete``: delete a partition's records before an offset (DeleteRecords),
as ``kafka-delete-records`` does; the partition's earliest offset moves up to it."""

from __future__ import annotations

from pathlib import Path

import click

from kayak.cli.admin_common import (
    ClusterTarget,
    cluster_options,
    console,
    run_admin,
    share_bootstrap,
)
from kayak.client.admin import Admin, TopicPartition

__all__ = ["records"]


@click.group()
@cluster_options
@click.pass_context
def records(
    ctx: click.Context,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """Act on a topic's records (delete those before an offset)."""
    ctx.obj = ClusterTarget.from_options(timeout, properties, command_config)


@records.command("delete")
@click.argument("topic")
@click.option(
    "-p",
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    required=True,
    help="The partition (repeatable).",
)
@click.option(
    "--before-offset",
    type=click.IntRange(min=-1),
    required=True,
    metavar="N",
    help="Delete every record before offset N (-1: every record, up to the latest offset).",
)
@click.pass_obj
def delete(
    target: ClusterTarget, topic: str, partitions: tuple[int, ...], before_offset: int
) -> None:
    """Delete TOPIC's records before --before-offset in each --partition (DeleteRecords);
    prints each partition's new earliest offset."""
    wanted = {TopicPartition(topic, p): before_offset for p in partitions}

    async def action(admin: Admin) -> dict[TopicPartition, int]:
        return await admin.delete_records(wanted)

    out = console()
    for tp, low in sorted(run_admin(target, action).items()):
        out.print(f"{tp.topic} partition {tp.partition}: records before {low} deleted "
                  f"(earliest offset now {low})")  # fmt: skip


share_bootstrap(records)
