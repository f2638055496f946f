"""Options the client commands share: where to bootstrap from and ``-X prop=value``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def parse_properties(values: Sequence[str]) -> dict[str, str]:
    """``-X name=value`` options as a dict of Kafka property names (a usage error otherwise)."""
    properties: dict[str, str] = {}
    for item in values:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise click.BadParameter(f"{item!r} is not prop=value", param_hint="-X")
        properties[name.strip()] = value.strip()
    return properties
