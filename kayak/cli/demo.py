"""``kayak demo``: the main job on the embedded defaults.

A SQLite ``orders`` table is captured (snapshot, then every insert, update and delete of a
seeded workload) into the embedded broker as Avro change events with their schemas in the
broker's registry; a Spark Structured Streaming job (``local[2]``) reads them with Spark's
Kafka source (or kayak's data source: ``--reader kayak``) and applies them to a target SQLite
database; then every row of source and target is compared. The last line says ``verified: N
rows, source == target``, or the command exits non-zero after printing the first rows that
differ.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kayak.cli.pipeline import READER_OPTION, report
from kayak.errors import KayakError


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip


@click.command()
@click.option("--rows", type=click.IntRange(0), default=2_000, show_default=True,
              help="Rows in the source table before capture starts (the snapshot).")  # fmt: skip
@click.option("--changes", type=click.IntRange(0), default=20_000, show_default=True,
              help="Inserts, updates and deletes made while replicating.")  # fmt: skip
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep everything here (default: a temporary directory).")  # fmt: skip
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@READER_OPTION
def demo(rows: int, changes: int, data_dir: Path | None, master: str, reader: str | None) -> None:
    """Replicate a SQLite table through the embedded broker and Spark, then prove it."""
    from kayak.pipeline.spark_kafka import choose_reader

    console = Console()
    try:
        reader = choose_reader(reader)
    except KayakError as e:
        raise click.ClickException(str(e)) from None
    if data_dir is None:
        with tempfile.TemporaryDirectory(prefix="kayak-demo-") as tmp:
            _run(console, Path(tmp), rows, changes, master, reader)
    else:
        # Absolute: on a cluster the executors open the target from directories of their own.
        work = data_dir.expanduser().absolute()
        work.mkdir(parents=True, exist_ok=True)
        _run(console, work, rows, changes, master, reader)


def _run(console: Console, work: Path, rows: int, changes: int, master: str, reader: str) -> None:
    from kayak.pipeline.runner import Pipeline
    from kayak.pipeline.session import local_spark
    from kayak.pipeline.source_setup import prepare_source
    from kayak.pipeline.spec import PipelineSpec
    from kayak.pipeline.workload import create_orders, run_workload

    source_path = work / "source.db"
    target_path = work / "target.db"
    for path in (source_path, target_path):
        path.unlink(missing_ok=True)
    spec = PipelineSpec(
        source=f"sqlite:{source_path}", tables=["orders"], target=f"sqlite:{target_path}",
        work_dir=work / "pipeline", reader=reader,
    )  # fmt: skip
    try:
        create_orders(str(source_path), rows)
        prepare_source(spec)
        console.print(f"source: {source_path} (orders, {rows} rows captured as the snapshot)")
        with console.status(f"starting Spark ({master}) and the embedded broker"):
            spark = local_spark(master, kafka_connector=reader == "kafka")
            running = Pipeline(spec, spark).start()
        try:
            console.print(
                f"broker {running.bootstrap_servers}, schema registry {running.registry_url}, "
                f"Spark {master} (reader: {reader}) → target {target_path}"
            )
            started = time.monotonic()
            _catch_up(console, running, rows, "initial snapshot")
            console.print(f"initial snapshot replicated in {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            with _progress(console) as progress:
                task = progress.add_task("workload", total=changes)
                counts = run_workload(
                    str(source_path), changes,
                    progress=lambda done: progress.update(task, completed=done),
                )  # fmt: skip
            _catch_up(console, running, rows + changes, "replicated (Spark)")
            elapsed = time.monotonic() - started
            assert running.job is not None
            stats = running.job.stats
            table = Table("changes", "inserts/updates/deletes", "changes/s (end to end)",
                          "latency p50", "latency p99", "Spark batches")  # fmt: skip
            table.add_row(
                f"{changes:,}",
                f"{counts['insert']:,}/{counts['update']:,}/{counts['delete']:,}",
                f"{changes / elapsed:,.0f}",
                f"{stats.percentile(50):,.0f} ms", f"{stats.percentile(99):,.0f} ms",
                str(stats.batches),
            )  # fmt: skip
            console.print(table)
            with console.status("verifying source == target"):
                total = report(console, list(running.verify()))
        finally:
            running.close()
        console.print(f"verified: {total} rows, source == target")
    except (KayakError, OSError, ValueError) as e:
        raise click.ClickException(str(e)) from None


def _catch_up(console: Console, running: object, expected: int, label: str) -> None:
    """Wait for the pipeline to apply everything, with a bar of changes seen by Spark."""
    from kayak.pipeline.runner import Pipeline

    assert isinstance(running, Pipeline) and running.job is not None
    error: list[BaseException] = []

    def wait() -> None:
        try:
            running.catch_up()
        except BaseException as e:
            error.append(e)

    waiter = threading.Thread(target=wait, name="kayak-catch-up")
    waiter.start()
    with _progress(console) as progress:
        task = progress.add_task(label, total=expected)
        while waiter.is_alive():
            progress.update(task, completed=min(expected, running.job.stats.changes))
            waiter.join(0.2)
        progress.update(task, completed=min(expected, running.job.stats.changes))
    if error:
        raise error[0]
