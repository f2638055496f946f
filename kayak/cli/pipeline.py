"""``kayak pipeline run``: replicate source tables into a target through the log and Spark."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kayak.cli.options import parse_properties
from kayak.errors import KayakError

log = logging.getLogger("kayak.pipeline")


def report(console: Console, verifications: list[object]) -> int:
    """Print each table's verification; the total row count when all are equal, else exit 1
    after printing the first differing rows."""
    from kayak.pipeline.verify import Verification

    total = 0
    failed = False
    for v in verifications:
        assert isinstance(v, Verification)
        total += v.rows
        if not v.equal:
            failed = True
            console.print(f"[red]{v.table}: source and target differ[/red]")
            for d in v.differences:
                console.print(f"  key {d.key}\n    source: {d.source}\n    target: {d.target}")
    if failed:
        raise click.ClickException("source != target (first differing rows above)")
    return total


@click.group()
def pipeline() -> None:
    """The CDC → log → Spark replication pipeline."""


@pipeline.command()
@click.option("--source", required=True, help="sqlite:PATH or postgresql://… to capture.")
@click.option("--table", "tables", multiple=True, required=True,
              help="A table to replicate (repeatable; SCHEMA.TABLE for PostgreSQL).")  # fmt: skip
@click.option("--target", required=True, help="sqlite:PATH or postgresql://… to write to.")
@click.option("-b", "--bootstrap-server", "bootstrap", default=None,
              help="Kafka cluster (host:port,…); default: the embedded broker.")  # fmt: skip
@click.option("--registry-url", default=None,
              help="Schema registry (default: the embedded one; needed with -b).")  # fmt: skip
@click.option("--prefix", default="kayak", show_default=True, help="Change-topic prefix.")
@click.option("--slot", default="kayak", show_default=True,
              help="PostgreSQL: replication slot and publication name.")  # fmt: skip
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("kayak-pipeline"), show_default=True,
              help="Spark checkpoint, capture state and the embedded broker's data.")  # fmt: skip
@click.option("--once", is_flag=True,
              help="Replicate what the source holds now, verify, and exit.")  # fmt: skip
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("-X", "properties", multiple=True, metavar="PROP=VALUE",
              help="Client property (Kafka name) for capture and Spark.")  # fmt: skip
def run(
    source: str, tables: tuple[str, ...], target: str, bootstrap: str | None,
    registry_url: str | None, prefix: str, slot: str, work_dir: Path, once: bool, master: str,
    properties: tuple[str, ...],
) -> None:  # fmt: skip
    """Capture TABLES of SOURCE and apply their changes to TARGET until Ctrl-C (or, with
    --once, until caught up); then verify source == target row by row."""
    from kayak.pipeline.runner import Pipeline, PipelineSpec, prepare_source
    from kayak.pipeline.session import local_spark

    console = Console()
    if bootstrap is not None and registry_url is None:
        raise click.UsageError("--registry-url is required with -b/--bootstrap-server")
    spec = PipelineSpec(
        source=source, tables=list(tables), target=target, work_dir=work_dir,
        bootstrap_servers=bootstrap, registry_url=registry_url, prefix=prefix, slot_name=slot,
        client_options=parse_properties(properties),
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        prepare_source(spec)
        with console.status("starting Spark"):
            spark = local_spark(master)
        with Pipeline(spec, spark) as running:
            console.print(
                f"replicating {', '.join(tables)}: {source} → {running.bootstrap_servers} → "
                f"{target}"
            )
            try:
                while not once and not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                console.print("stopping: catching up first")
            with console.status("catching up"):
                running.catch_up()
            assert running.job is not None
            stats = running.job.stats
            table = Table("changes", "applied", "dead-lettered", "p50 ms", "p99 ms")
            table.add_row(str(stats.changes), str(stats.applied), str(stats.dead_lettered),
                          f"{stats.percentile(50):.0f}", f"{stats.percentile(99):.0f}")  # fmt: skip
            console.print(table)
            rows = report(console, list(running.verify()))
        console.print(f"verified: {rows} rows, source == target")
    except (KayakError, OSError, ValueError) as e:
        raise click.ClickException(str(e)) from None
