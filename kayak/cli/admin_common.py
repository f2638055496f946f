"""What the admin commands (``topics``, ``groups``, ``records``, ``metadata``) share: where
the admin client connects (``-b`` before or after the subcommand, ``KAYAK_BOOTSTRAP_SERVER``),
running an action with it, one-line errors, and a console that pipes cleanly."""

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

from kayak.cli.options import (
    add_shared_options,
    bootstrap_option,
    bootstrap_servers,
    check_reachable,
    client_properties,
    client_properties_options,
)
from kayak.client.admin import Admin, topic_name_problem
from kayak.errors import ConfigError, KafkaError, KayakError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
_PIPE_WIDTH = 200  # rich's width when stdout is not a terminal (keeps rows on one line)


# -- shared with kayak groups ------------------------------------------------------------


@dataclass(frozen=True)
class ClusterTarget:
    """Where the command's admin client connects, and how long it waits."""

    timeout: float
    properties: Mapping[str, str] = field(default_factory=dict)
    """Admin client properties from ``-X`` and ``--command-config`` (security, ...)."""
    bootstrap: str | None = None
    """Fixed bootstrap servers; None: the command line's (``-b`` at any level, env, default)."""

    @classmethod
    def from_options(
        cls,
        timeout: float,
        properties: tuple[str, ...] = (),
        command_config: Path | None = None,
    ) -> ClusterTarget:
        """The target as the group's options describe it."""
        return cls(timeout, client_properties(properties, command_config))

    @property
    def bootstrap_servers(self) -> str:
        """Where to bootstrap from."""
        return self.bootstrap if self.bootstrap is not None else bootstrap_servers()


def cluster_options(group: Callable[..., None]) -> Callable[..., None]:
    """Adds ``-b/--bootstrap-server``, ``--timeout``, ``-X`` and ``--command-config`` to a
    command group (call :func:`share_bootstrap` once its subcommands are defined)."""
    group = client_properties_options("admin client", "request.timeout.ms=5000")(group)
    group = click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="Seconds to wait for the cluster before giving up.",
    )(group)
    return bootstrap_option(group)


def share_bootstrap(group: click.Group) -> None:
    """Let every subcommand of ``group`` take ``-b`` after its name too."""
    for command in group.commands.values():
        add_shared_options(command)
        if isinstance(command, click.Group):
            share_bootstrap(command)


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
        settings["bootstrap.servers"] = bootstrap
        admin = Admin(settings)  # a bad setting is reported before the broker is tried
        check_reachable(bootstrap)
        async with admin:
            return await action(admin)

    bootstrap = target.bootstrap_servers
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


