"""CLI test fixtures: the client tests' brokers, and how to run ``kayak`` as a process."""

from __future__ import annotations

import sys

from tests.client.conftest import any_broker, kayak_broker, tansu  # noqa: F401 - fixtures


def kayak_command() -> list[str]:
    """argv prefix running the ``kayak`` command line in a child process.

    ``python -m kayak`` once ``kayak/cli/main.py`` registers ``topics`` and ``groups``;
    until then the same root group with them added, so the process test runs either way.
    """
    from kayak.cli.main import cli

    if {"topics", "groups"} <= set(cli.commands):
        return [sys.executable, "-m", "kayak"]
    register = (
        "from kayak.cli.main import cli; from kayak.cli.topics import topics; "
        "from kayak.cli.groups import groups; cli.add_command(topics); cli.add_command(groups); "
        "cli(prog_name='kayak')"
    )
    return [sys.executable, "-c", register]


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the rich tables in ``output``, as lists of stripped cells."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]
