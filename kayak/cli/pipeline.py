"""``kayak pipeline run``: replicate source tables into a target through the log and Spark."""

from __future__ import annotations

import contextlib
import functools
import logging
import resource
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from kayak.cli.options import parse_properties
from kayak.cli.status_line import STATUS_INTERVAL_OPTION, Progress, StatusLine, pipeline_progress
from kayak.errors import KayakError

if TYPE_CHECKING:
    from kayak.pipeline.runner import Pipeline
    from kayak.pipeline.source_setup import SourceSetup
    from kayak.pipeline.spec import PipelineSpec

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
        if v.not_compared:
            console.print(
                f"{v.table}: generated column(s) {', '.join(v.not_compared)} are not captured "
                "(the source computes them) and were not compared", markup=False,
                soft_wrap=True,
            )  # fmt: skip
        if not v.equal:
            failed = True
            console.print(f"[red]{v.table}: source and target differ[/red]")
            for d in v.differences:
                console.print(f"  {d.line()}", markup=False, soft_wrap=True)
    if failed:
        raise click.ClickException("source != target (first differing rows above)")
    return total


READER_OPTION = click.option(
    "--reader", type=click.Choice(["kafka", "kayak"]), default=None,
    help="What reads the change topics in Spark: kafka, Spark's own Kafka source (the "
    "spark-sql-kafka jars `make jvm` fetches into .jvm/spark-kafka, or KAYAK_SPARK_KAFKA_JARS), "
    "or kayak, kayak's Python data source. [default: kafka when its jars are found, else "
    "kayak, saying so in one line]",
)  # fmt: skip


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
@click.option("--slot", default=None,
              help="PostgreSQL: replication slot and publication name [default: slot "
              "kayak_DATABASE, publication kayak; see kayak cdc run --help].")  # fmt: skip
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("kayak-pipeline"), show_default=True,
              help="Spark checkpoint, capture state and the embedded broker's data.")  # fmt: skip
@click.option("--once", is_flag=True,
              help="Replicate what the source holds now, verify, and exit.")  # fmt: skip
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("-X", "properties", multiple=True, metavar="PROP=VALUE",
              help="Client property (Kafka name) for capture and Spark; schema.registry.* "
              "and basic.auth.* go to the schema registry client.")  # fmt: skip
@click.option("--retry-timeout", type=click.FloatRange(min=0), default=300.0, show_default=True,
              metavar="SECONDS", help="How long a source or target that went away (refused "
              "connections, restarted) is retried before the pipeline stops.")  # fmt: skip
@STATUS_INTERVAL_OPTION
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the pipeline's /metrics (Prometheus) and its page on this port "
              "[default: an ephemeral port, printed at start; 0: none].")  # fmt: skip
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address for --metrics-port (0.0.0.0: every interface).")  # fmt: skip
@click.option("--metrics-allowed-hosts", default="", metavar="HOST,...",
              help="Further host names the pipeline's page and /metrics may be reached "
              "under; others get 421 (DNS rebinding). localhost, --metrics-host and this "
              "machine's name always work; * allows any.")  # fmt: skip
@click.option("--spark-ui", is_flag=True,
              help="Turn Spark's web UI on (off by default) and print its address.")  # fmt: skip
@click.option("--from-topics", default=None, metavar="PATTERN",
              help="Capture nothing: apply the change topics matching this regex, which "
              "another capture (Debezium) writes to -b's cluster; --source and --table "
              "say what to verify against. Needs --format.")  # fmt: skip
@click.option("--format", "input_format", type=click.Choice(["debezium-json"]), default=None,
              help="With --from-topics: the topics' form; debezium-json is Kafka Connect's "
              "JsonConverter (schemas.enable true or false).")  # fmt: skip
@READER_OPTION
def run(
    source: str, tables: tuple[str, ...], target: str, bootstrap: str | None,
    registry_url: str | None, prefix: str, slot: str | None, work_dir: Path, once: bool,
    master: str, properties: tuple[str, ...], retry_timeout: float, status_interval: float,
    metrics_port: int | None, metrics_host: str, metrics_allowed_hosts: str, spark_ui: bool,
    from_topics: str | None, input_format: str | None, reader: str | None,
) -> None:  # fmt: skip
    """Capture TABLES of SOURCE and apply their changes to TARGET until Ctrl-C or SIGTERM (or,
    with --once, until caught up); then catch up, verify source == target row by row, stop
    Spark and exit: 0 when equal, 1 when they differ or a part of the pipeline failed (one
    line; the full trace is in WORK_DIR/pipeline.log). A second Ctrl-C or SIGTERM stops at
    once, without verifying (exit 130 or 143).

    \b
    While it runs, a terminal shows one status line; it is also logged to
    pipeline.log (and to stderr off a terminal) every --status-interval seconds:
      captured    changes read from the source, acknowledged by the broker
      applied     rows written to the target (fewer than changes read when a
                  batch held several changes of a key: only the latest)
      backlog     changes captured in this run, not yet read by Spark
                  (approximate: a primary-key update is two events)
      last batch  its changes, Spark's time for it, and the longest delay in
                  it from a change's commit in the source to its commit in
                  the target (without changes, this clock stands still)

    \b
    Its web page (tables, backlog, last verification, charts) and /metrics are
    served on --metrics-port; the address is printed at start.
    """
    from kayak.pipeline.spec import PipelineSpec

    spec = PipelineSpec(
        source=source, tables=list(tables), target=target, work_dir=work_dir,
        bootstrap_servers=bootstrap, registry_url=registry_url, prefix=prefix, slot_name=slot,
        client_options=parse_properties(properties), retry_timeout_s=retry_timeout,
        # --metrics-port: none given = ephemeral (0 to the pipeline), 0 = no server
        metrics_port=0 if metrics_port is None else (metrics_port or None),
        metrics_host=metrics_host, from_topics=from_topics, input_format=input_format or "kayak",
        reader=reader,
    )  # fmt: skip
    _check_topics_options(from_topics, input_format, bootstrap)
    if bootstrap is not None and spec.registry_url is None and from_topics is None:
        raise click.UsageError("--registry-url is required with -b/--bootstrap-server")
    log_path = work_dir / "pipeline.log"
    console = Console()
    options = _RunOptions(
        master=master, once=once, status_interval_s=status_interval, spark_ui=spark_ui,
        metrics_allowed_hosts=tuple(h.strip() for h in metrics_allowed_hosts.split(",")
                                    if h.strip()),
    )  # fmt: skip
    with _logging_to(log_path), _StopSignals() as stops:
        try:
            _run(console, spec, options, stops, log_path)
        except _Interrupted as e:
            log.warning("stopped by a second %s, without catching up", e.name)
            console.print(f"stopped by a second {e.name}: not caught up, not verified")
            raise SystemExit(128 + e.signum) from None


@dataclass(frozen=True)
class _RunOptions:
    """How ``pipeline run`` runs (beyond the :class:`PipelineSpec`)."""

    master: str
    once: bool
    status_interval_s: float
    spark_ui: bool
    metrics_allowed_hosts: tuple[str, ...] = ()


def _run(
    console: Console, spec: PipelineSpec, options: _RunOptions, stops: _StopSignals,
    log_path: Path,
) -> None:  # fmt: skip
    from kayak.console.pipeline import start_pipeline_page
    from kayak.pipeline.runner import Pipeline, PipelineFailure, one_line
    from kayak.pipeline.session import local_spark, stop_spark
    from kayak.pipeline.source_setup import prepare_source
    from kayak.pipeline.spark_kafka import choose_reader
    from kayak.pipeline.targets import check_target

    sessions: list[Any] = []  # the Spark session, once started
    setup = None
    replicating = False

    def start_spark() -> Any:
        with console.status("starting Spark"):
            sessions.append(local_spark(options.master, output=log_path, ui=options.spark_ui,
                                        kafka_connector=spec.reader == "kafka"))  # fmt: skip
        return sessions[-1]

    try:
        check_target(spec.target)  # in a second, not after Spark's start
        # Before the capture is set up: an explicit --reader kafka without the connector's
        # jars fails in a moment, and changes nothing.
        spec.reader = choose_reader(spec.reader)
        setup = prepare_source(spec) if spec.from_topics is None else None
        kind = Pipeline if spec.from_topics is None else _topics_pipeline()
        # Spark starts last, once the broker, the source and the clients are up.
        page = functools.partial(start_pipeline_page, allowed_hosts=options.metrics_allowed_hosts)
        with kind(spec, spark_factory=start_spark, page=page) as running:
            replicating = True
            console.print(
                f"replicating {', '.join(spec.tables)}: {spec.source} → "
                f"{running.bootstrap_servers} → {spec.target} (reader: {_reader(running)})"
            )
            if running.metrics_url is not None:
                console.print(f"pipeline page: {running.metrics_url} · metrics: "
                              f"{running.metrics_url}metrics", markup=False)  # fmt: skip
            if options.spark_ui and sessions:
                console.print(f"Spark UI: {sessions[-1].sparkContext.uiWebUrl}")
            sample = functools.partial(_progress, running)
            with StatusLine(console, sample, label="replicating",
                            interval_s=options.status_interval_s) as status:  # fmt: skip
                while not options.once and not stops.requested.wait(1.0):
                    running.check()
                if stops.requested.is_set():
                    console.print("stopping: catching up, then verifying")
                status.label = "catching up"
                running.catch_up()
            assert running.job is not None
            stats = running.job.stats
            table = Table("changes", "applied", "dead-lettered", "p50 ms", "p99 ms")
            table.add_row(str(stats.changes), str(stats.applied), str(stats.dead_lettered),
                          f"{stats.percentile(50):.0f}", f"{stats.percentile(99):.0f}")  # fmt: skip
            console.print(table)
            console.print(_writers_line(stats.writers), markup=False, soft_wrap=True)
            rows = report(console, list(running.verify()))
            console.print(f"verified: {rows} rows, source == target")
    except click.ClickException:
        raise
    except PipelineFailure as e:
        log.error("pipeline stopped: %s", e, exc_info=e.__cause__ or e)
        raise click.ClickException(f"{e} (details in {log_path})") from None
    except (KayakError, OSError, ValueError) as e:
        log.error("pipeline stopped: %s", e, exc_info=e)
        raise click.ClickException(" ".join(str(e).split())) from None
    except ModuleNotFoundError as e:  # an optional dependency (psycopg, pyspark) missing
        from kayak.cli.main import missing_extra_message

        raise click.ClickException(missing_extra_message(e) or one_line(e)) from None
    except Exception as e:  # a bug or Spark's own failure: one line here, the trace logged
        log.error("pipeline failed", exc_info=e)
        raise click.ClickException(f"{one_line(e)} (details in {log_path})") from None
    finally:
        for spark in sessions:
            with console.status("stopping Spark"):
                stop_spark(spark)
        if setup is not None and not replicating:
            _undo_setup(setup)


def _check_topics_options(
    from_topics: str | None, input_format: str | None, bootstrap: str | None
) -> None:
    """--from-topics and --format go together, and read a cluster's topics (-b)."""
    if input_format is not None and from_topics is None:
        raise click.UsageError("--format reads existing change topics: give --from-topics")
    if from_topics is not None and input_format is None:
        raise click.UsageError("--from-topics needs --format (debezium-json)")
    if from_topics is not None and bootstrap is None:
        raise click.UsageError("--from-topics reads a cluster's topics: give -b HOST:PORT")


def _topics_pipeline() -> type[Pipeline]:
    from kayak.pipeline.from_topics import TopicsPipeline

    return TopicsPipeline


def _reader(running: Pipeline) -> str:
    """What reads the change topics in the running query (kafka: Spark's Kafka source)."""
    return running.job.settings.reader if running.job is not None else "none"


def _progress(running: Pipeline) -> Progress:
    """The running pipeline's counters, for its status line."""
    capture = running.capture.stats if running.capture is not None else None
    job = running.job.stats if running.job is not None else None
    return pipeline_progress(capture, job)


def _undo_setup(setup: SourceSetup) -> None:
    """A start that failed takes away the capture it installed on the source (triggers and
    change-log tables, or publication and slot): nothing was replicated from them."""
    try:
        setup.undo()
    except Exception as e:  # the start's own error is the one to report
        log.error("could not remove the capture set up by this run: %s", e, exc_info=e)


class _Interrupted(BaseException):
    """A second stop signal: stop at once (a BaseException, so no ``except Exception`` on the
    way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


class _StopSignals:
    """SIGINT (a terminal's Ctrl-C) and SIGTERM ask the pipeline to stop: the first sets
    :attr:`requested` (catch up, verify, stop), the second raises :class:`_Interrupted`
    (stop at once), later ones are ignored while that stop runs. The previous handlers come
    back on exit."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._forced = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self._forced:
            return
        if self.requested.is_set():
            self._forced = True
            raise _Interrupted(signum)
        log.info("%s received: stopping", signal.Signals(signum).name)
        self.requested.set()

    def __enter__(self) -> _StopSignals:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class _OneLineFormatter(logging.Formatter):
    """The terminal's formatter: a record without its traceback (that is in the log file)."""

    def format(self, record: logging.LogRecord) -> str:
        bare = logging.makeLogRecord(record.__dict__)
        bare.exc_info = bare.exc_text = bare.stack_info = None
        return super().format(bare)


def _file_only(record: logging.LogRecord) -> bool:
    """Records carrying a traceback are for the log file; the CLI prints one line for them."""
    return record.exc_info is None


@contextlib.contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """While the pipeline runs: everything from INFO (with tracebacks) appended to ``path``;
    the terminal keeps its level, without tracebacks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    console_level = root.level
    file_handler = logging.FileHandler(path, encoding="utf-8")
    file_handler.setLevel(min(console_level, logging.INFO))
    file_handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s")
    )
    consoles = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
    saved = [(h, h.level, h.formatter) for h in consoles]
    for handler in consoles:
        handler.setLevel(max(handler.level, console_level))
        handler.setFormatter(_OneLineFormatter(
            handler.formatter._fmt if handler.formatter else None))  # fmt: skip
        handler.addFilter(_file_only)
    root.addHandler(file_handler)
    root.setLevel(min(console_level, logging.INFO))
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.setLevel(console_level)
        root.removeHandler(file_handler)
        file_handler.close()
        for handler, level, formatter in saved:
            handler.setLevel(level)
            handler.setFormatter(formatter)
            handler.removeFilter(_file_only)


def _writers_line(writers: dict[str, int]) -> str:
    """Where the changes were applied (executor ids; "driver" in local mode), and the driver
    process's peak memory, which must not grow with the batches."""
    applied = ", ".join(f"{who} ({n:,})" for who, n in sorted(writers.items())) or "nobody"
    return f"applied by {applied}; driver peak memory {_peak_memory_kib() // 1024:,} MiB"


def _peak_memory_kib() -> int:
    """This process's peak resident memory. VmHWM, not getrusage's ru_maxrss: the latter
    survives exec, so a process started by a big parent would report the parent's size."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
