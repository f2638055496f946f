"""``kayak`` entry point: the click group every command hangs off."""

from __future__ import annotations

import logging

import click

from kayak import __version__
from kayak.cli.acls import acls
from kayak.cli.broker import broker
from kayak.cli.cdc import cdc
from kayak.cli.consume import consume
from kayak.cli.demo import demo
from kayak.cli.groups import groups
from kayak.cli.log import log
from kayak.cli.partitions import partitions
from kayak.cli.pipeline import pipeline
from kayak.cli.produce import produce
from kayak.cli.topics import topics
from kayak.cli.users import users


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="kayak")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
def cli(verbose: int) -> None:
    """kayak: a Kafka-compatible streaming log for Python."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


cli.add_command(broker)
cli.add_command(demo)
cli.add_command(partitions)
cli.add_command(topics)
cli.add_command(groups)
cli.add_command(consume)
cli.add_command(produce)
cli.add_command(cdc)
cli.add_command(pipeline)
cli.add_command(log)
cli.add_command(users)
cli.add_command(acls)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="kayak")
