"""``kayak groups``: list consumer groups, describe them with members, offsets and lag."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kayak.cli.admin_common import (
    ClusterTarget,
    cluster_options,
    console,
    run_admin,
    share_bootstrap,
)
from kayak.client.admin import (
    Admin,
    GroupDescription,
    MemberDescription,
    OffsetAndMetadata,
    OffsetSpec,
    TopicPartition,
)
from kayak.errors import GroupIdNotFoundError, KayakError

DEAD = "Dead"  # DescribeGroups' state for a group that does not exist


@click.group()
@cluster_options
@click.pass_context
def groups(
    ctx: click.Context,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """List, describe and delete consumer groups (members, assignments, committed offsets,
    lag), and reset their offsets."""
    ctx.obj = ClusterTarget.from_options(timeout, properties, command_config)


@groups.command("list")
@click.pass_obj
def list_groups(target: ClusterTarget) -> None:
    """Every group of every broker."""
    found = run_admin(target, lambda admin: admin.list_groups())
    out = console()
    if not found:
        out.print("no groups")
        return
    table = Table("group", "state", "protocol type", "coordinator")
    for g in found:
        table.add_row(g.group_id, g.state or "-", g.protocol_type or "-", str(g.coordinator))
    out.print(table)


@groups.command("describe")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@click.pass_obj
def describe(target: ClusterTarget, group_ids: tuple[str, ...]) -> None:
    """Members with their assignments, and committed offset, latest offset and lag of
    every partition the group has committed or is assigned."""

    async def action(admin: Admin) -> list[GroupReport]:
        described = await admin.describe_groups(group_ids)
        return [await group_report(admin, group) for group in described.values()]

    reports = run_admin(target, action)
    out = console()
    for report in reports:
        if not report.exists:
            continue
        report.print(out)
    missing = [r.group.group_id for r in reports if not r.exists]
    if missing:
        raise click.ClickException(f"group {', '.join(map(repr, missing))} does not exist")


@groups.command("delete")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@click.pass_obj
def delete(target: ClusterTarget, group_ids: tuple[str, ...]) -> None:
    """Delete groups without members, with their committed offsets."""
    for group in run_admin(target, lambda admin: admin.delete_groups(group_ids)):
        console().print(f"deleted group {group}")


# -- the report --------------------------------------------------------------------------


@dataclass
class PartitionRow:
    """One partition of a group: committed and latest offset, lag, and who reads it."""

    tp: TopicPartition
    committed: int | None
    latest: int | None
    member: MemberDescription | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.latest is None:
            return None
        return max(self.latest - self.committed, 0)


@dataclass
class GroupReport:
    group: GroupDescription
    rows: list[PartitionRow] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.group.state != DEAD or bool(self.rows)

    @property
    def total_lag(self) -> int:
        return sum(row.lag or 0 for row in self.rows)

    def print(self, out: Console) -> None:
        g = self.group
        out.print(
            f"[bold]{g.group_id}[/bold]  state {g.state}  protocol "
            f"{g.protocol or '-'} ({g.protocol_type or '-'})  coordinator {g.coordinator}  "
            f"members {len(g.members)}  total lag {self.total_lag}"
        )
        if g.members:
            out.print(_members_table(g.members))
        if self.rows:
            out.print(self._offsets_table())

    def _offsets_table(self) -> Table:
        table = Table("topic", "partition", "committed", "latest", "lag", "member", "host")
        for row in self.rows:
            table.add_row(
                row.tp.topic,
                str(row.tp.partition),
                _or_dash(row.committed),
                _or_dash(row.latest),
                _or_dash(row.lag),
                row.member.client_id if row.member else "-",
                row.member.host if row.member else "-",
            )
        return table


def _members_table(members: tuple[MemberDescription, ...]) -> Table:
    table = Table("member id", "client id", "host", "assignment")
    for m in members:
        table.add_row(m.member_id, m.client_id, m.host, _assignment_text(m.assignment))
    return table


def _assignment_text(assignment: tuple[TopicPartition, ...]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items()) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


async def group_report(admin: Admin, group: GroupDescription) -> GroupReport:
    """The group with a row per partition it committed or is assigned, sorted."""
    try:
        committed: dict[TopicPartition, OffsetAndMetadata] = await admin.list_group_offsets(
            group.group_id
        )
    except GroupIdNotFoundError:
        committed = {}
    owners = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owners))
    ignored: dict[TopicPartition, KayakError] = {}
    latest = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST), errors=ignored)
    rows = [
        PartitionRow(
            tp,
            committed[tp].offset if tp in committed else None,
            latest[tp].offset if tp in latest else None,
            owners.get(tp),
        )
        for tp in partitions
    ]
    return GroupReport(group, rows)


def _register_reset_offsets() -> None:
    from kayak.cli.groups_reset import reset_offsets

    groups.add_command(reset_offsets)


_register_reset_offsets()
share_bootstrap(groups)
