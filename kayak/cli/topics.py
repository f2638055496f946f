"""``kayak topics``: list, create, delete, describe, alter topics of any Kafka cluster, and
show their configs (``kafka-topics`` / ``kafka-configs`` abilities).

``-b`` is taken before or after the subcommand (shared helpers: :mod:`kayak.cli.admin_common`).
Every failure is one line on stderr and exit status 1 (2 for bad usage).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kayak.cli.admin_common import (
    ClusterTarget,
    check_topic_name,
    cluster_options,
    console,
    run_admin,
    share_bootstrap,
)
from kayak.client.admin import (
    Admin,
    ConfigEntry,
    NewTopic,
    OffsetAndTimestamp,
    OffsetSpec,
    TopicDescription,
    TopicPartition,
)
from kayak.errors import (
    KayakError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

# Re-exported for code written against the module before the helpers moved.
__all__ = ["ClusterTarget", "cluster_options", "console", "run_admin", "topics"]


@click.group()
@cluster_options
@click.pass_context
def topics(
    ctx: click.Context,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """Create, delete, list, describe and alter topics of a Kafka-compatible cluster."""
    ctx.obj = ClusterTarget.from_options(timeout, properties, command_config)


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@click.pass_obj
def list_topics(target: ClusterTarget, internal: bool) -> None:
    """Every topic with its partition count and replication factor."""
    found = run_admin(target, lambda admin: admin.list_topics(internal=internal))
    out = console()
    if not found:
        out.print("no topics")
        return
    table = Table("topic", "partitions", "replication", "topic id")
    for name, topic in found.items():
        table.add_row(
            name, str(topic.partition_count), str(topic.replication_factor), str(topic.topic_id)
        )
    out.print(table)


def _parse_configs(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", ctx, param)
        configs[name.strip()] = value.strip()
    return configs


_CONFIG = click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_parse_configs,
    help="A topic config, e.g. retention.ms=86400000 (repeatable).",
)


@topics.command("create")
@click.argument("name")
@click.option(
    "-p", "--partitions", type=click.IntRange(min=1), help="Partition count [broker default]."
)
@click.option(
    "-r", "--replication-factor", type=click.IntRange(min=1), help="Replicas [broker default]."
)
@_CONFIG
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic exists already.")
@click.pass_obj
def create(
    target: ClusterTarget,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: dict[str, str],
    if_not_exists: bool,
) -> None:
    """Create topic NAME."""
    check_topic_name(name)
    new = NewTopic(name, partitions or -1, replication_factor or -1, configs)

    async def action(admin: Admin) -> str:
        errors: dict[str, KayakError] = {}
        created = await admin.create_topics([new], errors=errors)
        error = errors.get(name)
        if error is not None:
            if if_not_exists and isinstance(error, TopicExistsError):
                return f"topic {name} exists already"
            raise error
        count = created[name].num_partitions
        return f"created topic {name}" + (f" ({count} partitions)" if count > 0 else "")

    console().print(run_admin(target, action))


@topics.command("delete")
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed for topics that do not exist.")
@click.pass_obj
def delete(target: ClusterTarget, names: tuple[str, ...], if_exists: bool) -> None:
    """Delete topics (with all their records)."""

    async def action(admin: Admin) -> list[str]:
        errors: dict[str, KayakError] = {}
        deleted = await admin.delete_topics(names, errors=errors)
        failed = {
            n: e
            for n, e in errors.items()
            if not (if_exists and isinstance(e, UnknownTopicOrPartitionError))
        }
        for name in deleted:
            console().print(f"deleted topic {name}")
        for name in errors.keys() - failed.keys():
            console().print(f"topic {name} does not exist")
        if failed:
            raise next(iter(failed.values()))
        return deleted

    run_admin(target, action)


@topics.command("describe")
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
@click.pass_obj
def describe(target: ClusterTarget, names: tuple[str, ...]) -> None:
    """Partitions (leader, replicas, in-sync replicas, offsets) and config overrides."""

    async def action(admin: Admin) -> list[_TopicReport]:
        described = await admin.describe_topics(names)
        return [await _report(admin, topic) for topic in described.values()]

    out = console()
    for report in run_admin(target, action):
        report.print(out)


@topics.command("alter")
@click.argument("name")
@_CONFIG
@click.option(
    "--delete-config", "deleted", multiple=True, metavar="NAME", help="Restore a default."
)
@click.option(
    "-p",
    "--partitions",
    type=click.IntRange(min=1),
    help="Grow the topic to this many partitions (kafka-topics --alter --partitions); "
    "partitions are never removed.",
)
@click.pass_obj
def alter(
    target: ClusterTarget,
    name: str,
    configs: dict[str, str],
    deleted: tuple[str, ...],
    partitions: int | None,
) -> None:
    """Add partitions (--partitions N), set (--config) or reset (--delete-config) configs of
    topic NAME."""
    if not configs and not deleted and partitions is None:
        raise click.UsageError("nothing to change: give --partitions, --config or --delete-config")
    changes: dict[str, str | None] = {**dict.fromkeys(deleted), **configs}

    async def action(admin: Admin) -> list[str]:
        done: list[str] = []
        if partitions is not None:
            now = (await admin.describe_topics([name]))[name].partition_count
            if partitions < now:
                raise click.ClickException(
                    f"topic {name} has {now} partitions; partitions cannot be removed"
                )
            if partitions > now:
                await admin.create_partitions({name: partitions})
                done.append(f"partitions {now} -> {partitions}")
            else:
                done.append(f"already {now} partitions")
        if changes:
            await admin.alter_configs(name, changes)
            done.append("configs " + ", ".join(changes))
        return done

    done = run_admin(target, action)
    console().print(f"altered topic {name}: {'; '.join(done)}")


@topics.command("configs")
@click.argument("name")
@click.option("--describe", is_flag=True, hidden=True, help="Accepted as kafka-configs spells it.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every config with its value and source (defaults too); else only overrides.",
)
@click.pass_obj
def configs_command(target: ClusterTarget, name: str, describe: bool, show_all: bool) -> None:
    """Describe topic NAME's configs (kafka-configs --describe [--all]): name, value, source,
    read-only and sensitive flags. Sensitive values are not shown."""
    found = run_admin(target, lambda admin: admin.describe_configs(name))
    entries = [e for e in found.values() if show_all or e.is_override]
    out = console()
    if not entries:
        out.print(f"topic {name} has no config overrides (--all shows every config)")
        return
    table = Table("config", "value", "source", "read-only", "sensitive")
    for entry in sorted(entries, key=lambda e: e.name):
        table.add_row(entry.name, _config_value(entry), _source_name(entry), _yes(entry.read_only),
                      _yes(entry.is_sensitive))  # fmt: skip
    out.print(table)


def _config_value(entry: ConfigEntry) -> str:
    if entry.is_sensitive:
        return "(sensitive)"
    return "(null)" if entry.value is None else entry.value


def _source_name(entry: ConfigEntry) -> str:
    return str(getattr(entry.source, "name", entry.source))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@dataclass
class _TopicReport:
    topic: TopicDescription
    offsets: dict[TopicPartition, tuple[int | None, int | None]]
    overrides: dict[str, str | None]

    def print(self, out: Console) -> None:
        t = self.topic
        out.print(
            f"[bold]{t.name}[/bold]  id {t.topic_id}  partitions {t.partition_count}  "
            f"replication {t.replication_factor}" + ("  (internal)" if t.internal else "")
        )
        if self.overrides:
            out.print("configs: " + ", ".join(f"{k}={v}" for k, v in self.overrides.items()))
        table = Table("partition", "leader", "replicas", "isr", "earliest", "latest")
        for p in t.partitions:
            earliest, latest = self.offsets.get(TopicPartition(t.name, p.partition), (None, None))
            table.add_row(
                str(p.partition),
                str(p.leader) if p.leader >= 0 else "none",
                ",".join(map(str, p.replicas)),
                ",".join(map(str, p.isr)),
                _or_dash(earliest),
                _or_dash(latest),
            )
        out.print(table)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


async def _report(admin: Admin, topic: TopicDescription) -> _TopicReport:
    """A topic with its offsets and overrides; what cannot be had is left blank."""
    tps = topic.topic_partitions()
    ignored: dict[TopicPartition, KayakError] = {}
    earliest = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.EARLIEST), errors=ignored)
    latest = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.LATEST), errors=ignored)
    offsets = {tp: (_offset(earliest.get(tp)), _offset(latest.get(tp))) for tp in tps}
    try:
        configs = await admin.describe_configs(topic.name)
    except KayakError:
        configs = {}
    overrides = {name: e.value for name, e in configs.items() if e.is_override}
    return _TopicReport(topic, offsets, overrides)


def _offset(found: OffsetAndTimestamp | None) -> int | None:
    return None if found is None or found.offset < 0 else found.offset


share_bootstrap(topics)
