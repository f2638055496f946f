"""Options the client commands share: where to bootstrap from, ``-X prop=value`` and
``--command-config FILE``.

Every client command (``produce``, ``consume``, ``topics``, ``groups``) takes client
properties by Kafka name the same way, so a secured cluster is reached with the same flags
everywhere::

    kayak topics -b broker:9093 -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 \\
        -X sasl.username=alice --command-config secrets.properties list

``-b`` works the same way everywhere: before or after the subcommand (``kayak -b H:P topics
list``, ``kayak topics -b H:P list``, ``kayak topics list -b H:P``), the innermost one given
winning; without one, ``KAYAK_BOOTSTRAP_SERVER``; else ``127.0.0.1:9092``. ``-X`` settings
are given on the command that takes them.

``--command-config`` (the name Kafka's own tools use) reads a Java ``.properties`` file, which
keeps passwords out of the command line (and so out of ``ps`` and shell history); ``-X``
settings given as well override the file's.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import click

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "KAYAK_BOOTSTRAP_SERVER"

F = TypeVar("F", bound=Callable[..., object])

_BOOTSTRAP_KEY = "kayak.bootstrap"
_BOOTSTRAP_HELP = (
    f"Broker(s) to bootstrap from, HOST:PORT[,...]; also before the subcommand "
    f"[env {BOOTSTRAP_ENV}; default {DEFAULT_BOOTSTRAP}]."
)


def _remember_bootstrap(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    # Contexts parse outer to inner, and ctx.meta is shared by all of them: the last
    # (innermost) -b given wins.
    if value is not None:
        ctx.meta[_BOOTSTRAP_KEY] = value


_BOOTSTRAP_ATTRS: dict[str, object] = {
    "default": None,
    "expose_value": False,
    "callback": _remember_bootstrap,
    "metavar": "HOST:PORT[,...]",
    "help": _BOOTSTRAP_HELP,
}


def shared_bootstrap_option() -> click.Option:
    """``-b/--bootstrap-server`` as a parameter that only records its value (read it with
    :func:`bootstrap_servers`), so it can sit on a group and on its subcommands at once."""
    return click.Option(["-b", "--bootstrap-server"], **_BOOTSTRAP_ATTRS)  # type: ignore[arg-type]


def bootstrap_option(command: F) -> F:
    """``-b/--bootstrap-server`` on a command; read it with :func:`bootstrap_servers`."""
    return click.option("-b", "--bootstrap-server", **_BOOTSTRAP_ATTRS)(command)  # type: ignore[arg-type]


def add_shared_options(command: click.Command) -> None:
    """Give an existing command (a subcommand of ``topics``, ``groups``, ...) ``-b``, unless it
    has one already."""
    if not any("-b" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(shared_bootstrap_option())


def bootstrap_servers(ctx: click.Context | None = None) -> str:
    """The bootstrap servers for this command line: the innermost ``-b``, else
    ``KAYAK_BOOTSTRAP_SERVER``, else the default."""
    ctx = ctx or click.get_current_context()
    given = ctx.meta.get(_BOOTSTRAP_KEY)
    if given:
        return str(given)
    return os.environ.get(BOOTSTRAP_ENV, "").strip() or DEFAULT_BOOTSTRAP


def check_reachable(bootstrap: str, timeout: float = 1.5) -> None:
    """Fail with one line at once when every bootstrap address refuses connections.

    The client keeps retrying a refused bootstrap for its whole timeout (a broker may be
    restarting); at the command line "nothing listens there" is the answer people need, so
    it is given within a second or two. Addresses that time out or fail otherwise are left to
    the client, which reports them with its own error."""
    refused: list[str] = []
    deadline = time.monotonic() + timeout
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    for address in addresses:
        host, port = _split_address(address)
        if port is None:
            return  # malformed: the client's configuration check names the problem
        try:
            with socket.create_connection(
                (host, port), timeout=max(deadline - time.monotonic(), 0.1)
            ):
                return
        except ConnectionRefusedError:
            refused.append(address)
        except OSError:
            return
    if refused and len(refused) == len(addresses):
        raise click.ClickException(
            f"cannot connect to bootstrap server {', '.join(refused)}: connection refused "
            f"(is a broker running there? start one with `kayak broker`, or give -b "
            f"HOST:PORT or {BOOTSTRAP_ENV})"
        )


def _split_address(address: str) -> tuple[str, int | None]:
    address = address.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        return host, int(port)
    except ValueError:
        return host, None


def client_properties_options(kind: str, example: str) -> Callable[[F], F]:
    """``-X PROP=VALUE`` (repeatable, passed as ``properties``) and ``--command-config FILE``
    (passed as ``command_config``); merge them with :func:`client_properties`."""

    def decorate(command: F) -> F:
        command = click.option(
            "--command-config",
            "command_config",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            metavar="FILE",
            help=f"A .properties file of {kind} properties (e.g. security.protocol, "
            "sasl.*, ssl.*); -X overrides it.",
        )(command)
        return click.option(
            "-X",
            "properties",
            multiple=True,
            metavar="PROP=VALUE",
            help=f"A {kind} property (Kafka names), e.g. -X {example}; repeatable. "
            "-X security.protocol=SASL_SSL -X sasl.mechanism=PLAIN -X sasl.username=U ... "
            "for a secured cluster.",
        )(command)

    return decorate


def client_properties(values: Sequence[str], command_config: Path | None) -> dict[str, str]:
    """The properties of ``--command-config`` (if given), updated with ``-X``'s."""
    properties = read_properties_file(command_config) if command_config is not None else {}
    properties.update(parse_properties(values))
    return properties


def admin_properties(client: dict[str, str]) -> dict[str, str]:
    """The admin client's share of a producer's or consumer's properties (see
    :func:`kayak.client.config.admin_share`)."""
    from kayak.client.config import admin_share

    return admin_share(client)


def parse_properties(values: Sequence[str]) -> dict[str, str]:
    """``-X name=value`` options as a dict of Kafka property names (a usage error otherwise)."""
    properties: dict[str, str] = {}
    for item in values:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise click.BadParameter(f"{item!r} is not prop=value", param_hint="-X")
        properties[name.strip()] = value.strip()
    return properties


def read_properties_file(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value`` or ``key: value`` lines, ``#``/``!``
    comments, a trailing backslash continuing a line (JAAS strings are often split so)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--command-config"
        ) from None
    properties: dict[str, str] = {}
    for number, line in _logical_lines(text):
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise click.BadParameter(
                f"{path}:{number}: expected name=value", param_hint="--command-config"
            )
        properties[line[:cut].strip()] = line[cut + 1 :].strip()
    return properties


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip() if not pending else raw.lstrip()
        if not pending:
            start = number
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        lines.append((start, (pending + stripped).strip()))
        pending = ""
    if pending:
        lines.append((start, pending.strip()))
    return lines


def run_event_loop(main: object) -> None:
    """Run a coroutine on uvloop when it is installed, else on asyncio's own loop (without
    importing the broker, so client commands start fast)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]
    else:
        uvloop.run(main)  # type: ignore[arg-type]
