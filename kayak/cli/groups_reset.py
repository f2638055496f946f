"""``kayak groups reset-offsets``: move a consumer group's committed offsets, as
``kafka-consumer-groups --reset-offsets`` does.

::

    kayak groups reset-offsets billing --topic orders --to-earliest            # plan only
    kayak groups reset-offsets billing --topic orders:0,2 --shift-by -100 --execute
    kayak groups reset-offsets billing --all-topics --to-datetime 2026-11-25T08:00:00 --execute

Without ``--execute`` nothing changes (``--dry-run`` says so explicitly): the plan is printed.
A group with active members is refused, as Kafka's tool refuses it: the members would
overwrite the new offsets with their next commit. New offsets are kept between each
partition's earliest and latest offset. The commit goes through the admin client
(OffsetCommit without a member id, to the group's coordinator).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import click
from rich.table import Table

from kayak.cli.admin_common import ClusterTarget, console, run_admin
from kayak.client.admin import Admin, OffsetAndTimestamp, OffsetSpec, TopicPartition

__all__ = ["reset_offsets"]


@dataclass(frozen=True)
class _Strategy:
    kind: str  # earliest, latest, datetime, offset, shift
    value: int = 0


@dataclass
class _Row:
    tp: TopicPartition
    current: int | None
    new: int


def _topic_partitions(values: tuple[str, ...]) -> list[tuple[str, list[int] | None]]:
    chosen: list[tuple[str, list[int] | None]] = []
    for value in values:
        name, colon, numbers = value.partition(":")
        if not colon:
            chosen.append((name, None))
            continue
        try:
            chosen.append((name, [int(n) for n in numbers.split(",") if n.strip()]))
        except ValueError:
            raise click.BadParameter(
                f"{value!r} is not TOPIC or TOPIC:P,P,...", param_hint="--topic"
            ) from None
    return chosen


def _strategy(
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
) -> _Strategy:
    given = [
        s
        for s in (
            _Strategy("earliest") if to_earliest else None,
            _Strategy("latest") if to_latest else None,
            _Strategy("datetime", _timestamp_ms(to_datetime)) if to_datetime else None,
            _Strategy("offset", to_offset) if to_offset is not None else None,
            _Strategy("shift", shift_by) if shift_by is not None else None,
        )
        if s is not None
    ]
    if len(given) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, "
            "--shift-by"
        )
    return given[0]


def _timestamp_ms(text: str) -> int:
    """ISO 8601 (``2026-11-25T08:00:00``, with an optional offset such as ``+01:00`` or ``Z``;
    without one, local time as Kafka's tool takes it) as ms since the epoch."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO date-time such as 2026-11-25T08:00:00",
            param_hint="--to-datetime",
        ) from None
    return int(moment.timestamp() * 1000)


@click.command("reset-offsets")
@click.argument("group")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,P...]",
    help="A topic (all its partitions, or those listed) to reset; repeatable.",
)
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed.")
@click.option("--to-earliest", is_flag=True, help="To each partition's earliest offset.")
@click.option("--to-latest", is_flag=True, help="To each partition's latest offset.")
@click.option(
    "--to-datetime",
    metavar="YYYY-MM-DDTHH:MM:SS[+HH:MM]",
    help="To the first offset at or after this time (local time without an offset).",
)
@click.option("--to-offset", type=click.IntRange(min=0), help="To this offset.")
@click.option(
    "--shift-by", type=int, metavar="N", help="Move the committed offsets by N (may be negative)."
)
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.pass_obj
def reset_offsets(
    target: ClusterTarget,
    group: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
    dry_run: bool,
    execute: bool,
) -> None:
    """Reset GROUP's committed offsets (kafka-consumer-groups --reset-offsets); prints the
    plan, and commits it with --execute. The group must have no active members."""
    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic TOPIC[:P,...] (repeatable) or --all-topics")
    strategy = _strategy(to_earliest, to_latest, to_datetime, to_offset, shift_by)
    chosen = _topic_partitions(topics)

    async def action(admin: Admin) -> list[_Row]:
        described = (await admin.describe_groups([group]))[group]
        if described.members:
            raise click.ClickException(
                f"group {group} has {len(described.members)} active members (state "
                f"{described.state}): offsets can only be reset while it is inactive; stop "
                "its consumers first"
            )
        committed = await admin.list_group_offsets(group)
        partitions = await _partitions(admin, chosen) if chosen else sorted(committed)
        if not partitions:
            raise click.ClickException(f"group {group} has no committed offsets to reset")
        current = {tp: c.offset for tp, c in committed.items()}
        rows = await _plan(admin, strategy, partitions, current)
        if execute:
            await admin.alter_group_offsets(group, {row.tp: row.new for row in rows})
        return rows

    rows = run_admin(target, action)
    table = Table("topic", "partition", "current offset", "new offset")
    for row in rows:
        current = "-" if row.current is None else str(row.current)
        table.add_row(row.tp.topic, str(row.tp.partition), current, str(row.new))
    out = console()
    out.print(table)
    if execute:
        out.print(f"reset {len(rows)} partitions of group {group}")
    else:
        out.print("dry run: nothing was changed (add --execute to commit these offsets)")


async def _partitions(
    admin: Admin, chosen: list[tuple[str, list[int] | None]]
) -> list[TopicPartition]:
    described = await admin.describe_topics([name for name, _ in chosen])
    partitions: list[TopicPartition] = []
    for name, numbers in chosen:
        count = described[name].partition_count
        for number in numbers if numbers is not None else range(count):
            if not 0 <= number < count:
                raise click.ClickException(f"topic {name} has no partition {number}")
            partitions.append(TopicPartition(name, number))
    return partitions


async def _plan(
    admin: Admin,
    strategy: _Strategy,
    partitions: list[TopicPartition],
    current: dict[TopicPartition, int],
) -> list[_Row]:
    earliest = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.EARLIEST))
    latest = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST))
    found: dict[TopicPartition, OffsetAndTimestamp] = {}
    if strategy.kind == "datetime":
        found = await admin.list_offsets(dict.fromkeys(partitions, strategy.value))
    rows: list[_Row] = []
    for tp in partitions:
        low, high = earliest[tp].offset, latest[tp].offset
        now = current.get(tp)
        if strategy.kind == "earliest":
            wanted = low
        elif strategy.kind == "latest":
            wanted = high
        elif strategy.kind == "datetime":
            wanted = found[tp].offset if found[tp].offset >= 0 else high
        elif strategy.kind == "offset":
            wanted = strategy.value
        else:  # shift: from the committed offset, or the latest where there is none
            wanted = (now if now is not None else high) + strategy.value
        rows.append(_Row(tp, now, min(max(wanted, low), high)))
    return rows
