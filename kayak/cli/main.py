"""``kayak`` entry point: the click group every command hangs off."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from kayak import __version__
from kayak.cli.options import bootstrap_option

# Each command's module, imported only when the command runs (or for --help): the broker's
# and Spark's imports cost seconds, which a `kayak produce` or a mistyped option should not
# pay. The order is the order of `kayak --help`.
_COMMANDS = {
    "broker": "kayak.cli.broker:broker",
    "demo": "kayak.cli.demo:demo",
    "produce": "kayak.cli.produce:produce",
    "consume": "kayak.cli.consume:consume",
    "metadata": "kayak.cli.metadata:metadata",
    "topics": "kayak.cli.topics:topics",
    "groups": "kayak.cli.groups:groups",
    "records": "kayak.cli.records:records",
    "schemas": "kayak.cli.schemas:schemas",
    "registry": "kayak.cli.registry:registry",
    "partitions": "kayak.cli.partitions:partitions",
    "cdc": "kayak.cli.cdc:cdc",
    "pipeline": "kayak.cli.pipeline:pipeline",
    "log": "kayak.cli.log:log",
    "users": "kayak.cli.users:users",
    "acls": "kayak.cli.acls:acls",
}


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in _COMMANDS if self.get_command(ctx, name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        known = self.commands.get(cmd_name)
        if known is not None:
            return known
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # a command not written yet
                return None
            raise
        command: click.Command = getattr(module, attr)
        self.commands[cmd_name] = command
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="kayak")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
@bootstrap_option
def cli(verbose: int) -> None:
    """kayak: a Kafka-compatible streaming log for Python."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Optional dependencies by the module a command fails to import, and the extra that has it.
_EXTRAS = {
    "psycopg": ("PostgreSQL support", "postgres"),
    "psycopg_binary": ("PostgreSQL support", "postgres"),
    "pyspark": ("Spark (pipeline run, demo)", "spark"),
    "pyarrow": ("Spark (pipeline run, demo)", "spark"),
}


def missing_extra_message(error: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install when ``error`` is an optional dependency of
    kayak's that is not installed; None for anything else."""
    root = (error.name or "").partition(".")[0]
    known = _EXTRAS.get(root)
    if known is None:
        return None
    feature, extra = known
    return (
        f"{feature} needs {root}, which is not installed: pip install 'kayak[{extra}]' "
        f"(in a clone: .venv/bin/pip install -e '.[{extra}]')"
    )


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="kayak")
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        click.echo(f"Error: {message}", err=True)
        sys.exit(1)
