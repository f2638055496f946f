"""``kayak topics``: list, create, delete, describe and alter topics of any Kafka cluster.

The helpers at the top (``cluster_options``, ``run_admin``, ``console``) are shared with
``kayak groups``. Every failure is one line on stderr and exit status 1 (2 for bad usage).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from kayak.cli.options import (
    DEFAULT_BOOTSTRAP,
    client_properties,
    client_properties_options,
)
from kayak.client.admin import (
    Admin,
    NewTopic,
    OffsetAndTimestamp,
    OffsetSpec,
    TopicDescription,
    TopicPartition,
    topic_name_problem,
)
from kayak.errors import (
    ConfigError,
    KafkaError,
    KayakError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
_PIPE_WIDTH = 200  # rich's width when stdout is not a terminal (keeps rows on one line)


# -- shared with kayak groups ------------------------------------------------------------


@dataclass(frozen=True)
class ClusterTarget:
    """Where the command's admin client connects, and how long it waits."""

    bootstrap_servers: str
    timeout: float
    properties: Mapping[str, str] = field(default_factory=dict)
    """Admin client properties from ``-X`` and ``--command-config`` (security, ...)."""

    @classmethod
    def from_options(
        cls,
        bootstrap_server: str,
        timeout: float,
        properties: tuple[str, ...] = (),
        command_config: Path | None = None,
    ) -> ClusterTarget:
        """The target as the group's options describe it."""
        return cls(bootstrap_server, timeout, client_properties(properties, command_config))


def cluster_options(group: Callable[..., None]) -> Callable[..., None]:
    """Adds ``-b/--bootstrap-server``, ``--timeout``, ``-X`` and ``--command-config`` to a
    command group."""
    group = client_properties_options("admin client", "request.timeout.ms=5000")(group)
    group = click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="Seconds to wait for the cluster before giving up.",
    )(group)
    return click.option(
        "-b",
        "--bootstrap-server",
        "bootstrap_server",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar="KAYAK_BOOTSTRAP_SERVER",
        metavar="HOST:PORT[,...]",
        help="Broker(s) to bootstrap from (env KAYAK_BOOTSTRAP_SERVER).",
    )(group)


def console() -> Console:
    """Rich console on stdout; wide when piped so table rows are not wrapped."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console()
    return Console(width=_PIPE_WIDTH)


def one_line(error: BaseException) -> str:
    """An error as the single line the CLI prints."""
    if isinstance(error, ConfigError):
        name = "--bootstrap-server" if error.name == "bootstrap.servers" else error.name
        text = f"invalid {name}: {error.message}"
    elif isinstance(error, KafkaError):
        text = f"{error.message} [{error.error_name}]"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def run_admin(target: ClusterTarget, action: Callable[[Admin], Awaitable[T]]) -> T:
    """Run ``action`` with an admin client for ``target``; kayak errors become one-line
    ``ClickException``s."""
    timeout_ms = max(int(target.timeout * 1000), 1)
    # A request (or connection attempt) gets most of the time, so that the reason it failed
    # ("connection refused") is reported before the whole command runs out of time.
    request_ms = max(timeout_ms * 4 // 5, 1)

    async def main() -> T:
        settings: dict[str, object] = {
            "client.id": "kayak-cli",
            "request.timeout.ms": request_ms,
            "default.api.timeout.ms": timeout_ms,
            "socket.connection.setup.timeout.ms": request_ms,
            "socket.connection.setup.timeout.max.ms": request_ms,
        }
        settings.update(target.properties)
        settings["bootstrap.servers"] = target.bootstrap_servers
        admin = Admin(settings)
        async with admin:
            return await action(admin)

    try:
        return asyncio.run(main())
    except KayakError as exc:
        raise click.ClickException(one_line(exc)) from exc


def check_topic_name(name: str) -> str:
    """``name`` if Kafka allows it as a topic name, else a one-line error."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise click.ClickException(f"invalid topic name: {problem}")
    return name


# -- kayak topics ------------------------------------------------------------------------


@click.group()
@cluster_options
@click.pass_context
def topics(
    ctx: click.Context,
    bootstrap_server: str,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """Create, delete, list and describe topics of a Kafka-compatible cluster."""
    ctx.obj = ClusterTarget.from_options(bootstrap_server, timeout, properties, command_config)


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
@click.pass_obj
def alter(
    target: ClusterTarget, name: str, configs: dict[str, str], deleted: tuple[str, ...]
) -> None:
    """Set (--config) or reset (--delete-config) configs of topic NAME."""
    if not configs and not deleted:
        raise click.UsageError("nothing to change: give --config or --delete-config")
    changes: dict[str, str | None] = {**dict.fromkeys(deleted), **configs}
    run_admin(target, lambda admin: admin.alter_configs(name, changes))
    console().print(f"altered topic {name}")


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
