"""Options the client commands share: where to bootstrap from, ``-X prop=value`` and
``--command-config FILE``.

Every client command (``produce``, ``consume``, ``topics``, ``groups``) takes client
properties by Kafka name the same way, so a secured cluster is reached with the same flags
everywhere::

    kayak topics -b broker:9093 -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 \\
        -X sasl.username=alice --command-config secrets.properties list

``--command-config`` (the name Kafka's own tools use) reads a Java ``.properties`` file, which
keeps passwords out of the command line (and so out of ``ps`` and shell history); ``-X``
settings given as well override the file's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import click

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

F = TypeVar("F", bound=Callable[..., object])


def bootstrap_option(command: F) -> F:
    """``-b/--bootstrap-server``, passed to the command as ``bootstrap``."""
    decorate = click.option(
        "-b",
        "--bootstrap-server",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        help="A broker to bootstrap from (host:port[,host:port...]).",
    )
    return decorate(command)


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
