"""One replication pipeline end to end: capture → log → Spark → target, and its proof.

:class:`Pipeline` wires the parts for a source and a target named by URL (``sqlite:PATH``,
``postgresql://…``): the embedded broker when no bootstrap servers are given, the capture loop
in a thread, the Spark replication job, and :meth:`Pipeline.verify` comparing every captured
table's rows in the source with the target's.

:meth:`Pipeline.check` is the supervision: it raises :class:`PipelineFailure`, whose message is
one line naming the table, the change's source position and the cause, once the streaming
query or the capture thread has died (their full traces are logged).

Failures that pass (a source or target database refusing connections, restarting, its backend
terminated; SQLite locked) do not stop it: the capture reconnects and resumes at its slot
(:mod:`kayak.cdc.reconnect`), the apply reconnects and redoes its transaction, and the driver's
verification retries its reads (:mod:`kayak.pipeline.transient`), each for up to
``PipelineSpec.retry_timeout_s``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self

from kayak.cdc.capture import CaptureLoop, capture_transactional_id
from kayak.cdc.change import Row, TableSchema
from kayak.cdc.envelope import topic_name
from kayak.cdc.publisher import ChangePublisher, EventEncoder, open_capture_producer
from kayak.cdc.source import ChangeSource
from kayak.errors import KayakError
from kayak.pipeline.apply import one_line
from kayak.pipeline.embedded import EmbeddedBroker
from kayak.pipeline.job import ReplicationJob, ReplicationSettings
from kayak.pipeline.metrics import VerificationRecord
from kayak.pipeline.targets import Target
from kayak.pipeline.topics import topic_ensurer
from kayak.pipeline.transient import (
    DEFAULT_GIVE_UP_AFTER_S,
    ReconnectingTarget,
    RetryPolicy,
    call_with_retries,
)
from kayak.pipeline.verify import Verification, verify_table


class ServedPage(Protocol):
    """The pipeline's web server (``/metrics`` and its page) as the pipeline sees it."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


# Starts the pipeline's page for a running pipeline; the CLI hands in the console's.
PageStarter = Callable[["Pipeline"], ServedPage]

__all__ = [
    "Pipeline",
    "PipelineFailure",
    "PipelineSpec",
    "SourceSetup",
    "absolute_sqlite_url",
    "current_table_schema",
    "database_name",
    "one_line",
    "open_source",
    "prepare_source",
    "read_source_rows",
    "source_kind",
]

log = logging.getLogger(__name__)


# The last line of a Python traceback raised by kayak's apply in an executor.
_KAYAK_ERROR_LINE = re.compile(
    r"^kayak\.pipeline\.[\w.]+\.(?:ApplyError|TargetSchemaError|RefusedRecord): (.+)$",
    re.MULTILINE,
)


class PipelineFailure(KayakError):
    """A part of a running pipeline died (the streaming query, the capture); the message is
    one line for the terminal."""


def source_kind(url: str) -> Literal["sqlite", "postgresql"]:
    """``sqlite`` for ``sqlite:PATH`` (or a bare path), ``postgresql`` for a libpq URL;
    ValueError for any other URL (``mysql://…`` is not a file name)."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    if "://" in url and not url.startswith("sqlite:"):
        scheme = url.split("://", 1)[0]
        raise ValueError(
            f"unsupported source {scheme}://…: sources are SQLite (PATH or sqlite:PATH) and "
            "PostgreSQL (postgresql://…)"
        )
    return "sqlite"


def database_name(url: str) -> str:
    """The ``source.db`` of events: a SQLite file's stem or a PostgreSQL database's name."""
    if source_kind(url) == "sqlite":
        return Path(sqlite_path(url)).stem
    return url.rsplit("/", 1)[-1].split("?")[0]


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:").removeprefix("//")


def absolute_sqlite_url(url: str) -> str:
    """A SQLite URL (``sqlite:PATH``, or a bare path) as ``sqlite:`` + an absolute path, ``~``
    expanded; any other URL unchanged. Spark's executors open the target by URL in working
    directories of their own, where a relative path names another file or none."""
    if "://" in url and not url.startswith("sqlite:"):
        return url
    path = sqlite_path(url)
    if path in ("", ":memory:"):
        return url
    return f"sqlite:{os.path.abspath(os.path.expanduser(path))}"


def open_source(
    url: str, tables: Sequence[str], *, slot_name: str | None = None,
    stopping: threading.Event | None = None, give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S,
) -> ChangeSource:  # fmt: skip
    """A capture source for ``url``; its tables must have been enabled (``kayak cdc enable``
    or :func:`prepare_source`). A PostgreSQL source uses the replication slot and the
    publication named ``slot_name`` (None: the database's own slot and publication
    ``kayak``, see :mod:`kayak.cdc.postgres.slot`), and reconnects (resuming at the slot's confirmed
    position) when its server goes away, for up to ``give_up_after_s``; ``stopping`` ends
    those attempts."""
    if source_kind(url) == "sqlite":
        from kayak.cdc.sqlite import SqliteSource

        return SqliteSource(sqlite_path(url), tables)
    from kayak.cdc.postgres import PostgresSource
    from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION
    from kayak.cdc.reconnect import ReconnectingSource

    publication = slot_name or DEFAULT_PUBLICATION
    return ReconnectingSource(
        lambda: PostgresSource(url, tables, slot_name=slot_name, publication=publication),
        stopping=stopping,
        give_up_after_s=give_up_after_s,
    )


def current_table_schema(url: str, table: str) -> TableSchema:
    """A source table's columns and key as its database describes them now."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.cdc.sqlite import read_table_schema

        conn = sqlite3.connect(sqlite_path(url))
        try:
            return read_table_schema(conn, table)
        finally:
            conn.close()
    from kayak.cdc.postgres.catalog import load_table, parse_table_name
    from kayak.pipeline.targets.postgres import connect

    with connect(url) as pg:
        return load_table(pg, *parse_table_name(table)).schema


def generated_columns(url: str, table: TableSchema) -> tuple[str, ...]:
    """The source table's generated columns, which capture leaves out (so verification
    names them as not compared rather than calling the table equal in silence)."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.cdc.sqlite.schema import quote_identifier

        conn = sqlite3.connect(sqlite_path(url))
        try:
            rows = conn.execute(f"PRAGMA table_xinfo({quote_identifier(table.name)})").fetchall()
        finally:
            conn.close()
        return tuple(row[1] for row in rows if row[6] in (2, 3))  # hidden: virtual, stored
    from kayak.pipeline.targets.postgres import connect

    with connect(url) as pg:
        found = pg.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relname = %s AND a.attgenerated <> '' AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (table.schema, table.name),
        ).fetchall()
    return tuple(str(name) for (name,) in found)


def read_source_rows(url: str, table: TableSchema) -> list[Row]:
    """Every row of a source table, in its column types' representation."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.pipeline.targets.sqlite import read_sqlite_rows

        conn = sqlite3.connect(sqlite_path(url))
        try:
            return read_sqlite_rows(conn, table)
        finally:
            conn.close()
    from psycopg import sql

    from kayak.pipeline.targets.postgres import connect, read_postgres_rows

    with connect(url) as pg:
        name = sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.name))
        return read_postgres_rows(pg, table, name)


# The micro-batch cap of a pipeline from a SQLite source (see PipelineSpec).
SQLITE_MAX_OFFSETS = 50_000


@dataclass
class PipelineSpec:
    """A pipeline's endpoints and settings (see ``kayak pipeline run``)."""

    source: str
    tables: Sequence[str]
    target: str
    work_dir: Path
    bootstrap_servers: str | None = None
    registry_url: str | None = None
    prefix: str = "kayak"
    slot_name: str | None = None  # PostgreSQL: None = the database's own (see open_source)
    # Caps a micro-batch (records). None: everything committed, for a PostgreSQL source (a
    # capped micro-batch could end inside a source transaction) and SQLITE_MAX_OFFSETS for a
    # SQLite source, whose changes carry no transactions.
    max_offsets_per_trigger: int | None = None
    capture_batch: int = 5_000
    client_options: dict[str, str] = field(default_factory=dict)
    # How long a transient source or target failure is retried before the pipeline stops.
    retry_timeout_s: float = DEFAULT_GIVE_UP_AFTER_S
    # The pipeline's own web server (/metrics and its console page): None = none; 0 = an
    # ephemeral port (see Pipeline.metrics_url).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # The schema registry client's settings (basic.auth.user.info, ssl.ca.location, ...);
    # schema.registry.* and basic.auth.* in client_options are moved here.
    registry_config: dict[str, str] = field(default_factory=dict)
    # Read existing change topics (a regex) instead of capturing: kayak.pipeline.from_topics.
    from_topics: str | None = None
    input_format: str = "kayak"  # of the change topics (kayak.pipeline.input_formats)

    def __post_init__(self) -> None:
        from kayak.serde.registry import split_registry_properties

        registry, self.client_options = split_registry_properties(self.client_options)
        self.registry_config = {**registry, **self.registry_config}
        url = self.registry_config.pop("url", None)
        self.registry_url = self.registry_url or url
        # Paths are resolved here, against this process's directory: the capture, Spark's
        # checkpoint and the executors' apply (each in a directory of its own on a cluster)
        # must all name the same files.
        self.source = absolute_sqlite_url(self.source)
        if self.target.startswith("sqlite:"):
            self.target = absolute_sqlite_url(self.target)
        self.work_dir = Path(os.path.abspath(os.path.expanduser(self.work_dir)))

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry policy of the target side (apply and verification)."""
        return RetryPolicy(give_up_after_s=self.retry_timeout_s)


def micro_batch_cap(spec: PipelineSpec) -> int | None:
    """``maxOffsetsPerTrigger`` of the replication query. Micro-batches are read with
    read_committed and end at the last stable offset, so each holds whole capture batches
    (Kafka transactions) and with them whole source transactions; a cap in records would end
    one inside a transaction, so there is none unless asked for (then a warning says what it
    costs). A SQLite source has no transactions to keep whole: capped at SQLITE_MAX_OFFSETS."""
    cap = spec.max_offsets_per_trigger
    if spec.from_topics is None and source_kind(spec.source) == "sqlite":
        return cap or SQLITE_MAX_OFFSETS
    if cap is not None:
        log.warning("max_offsets_per_trigger=%d: a micro-batch may end inside a source "
                    "transaction, which the target then shows half applied until the next "
                    "one", cap)  # fmt: skip
    return cap


@dataclass
class SourceSetup:
    """What :func:`prepare_source` installed on the source, so that a pipeline whose start
    fails can take it away again; what existed before is left alone."""

    url: str
    sqlite_tables: list[str] = field(default_factory=list)  # capture enabled by this call
    publication: str | None = None  # PostgreSQL: created by this call
    slot: str | None = None  # PostgreSQL: did not exist before (the source creates it)

    def undo(self) -> None:
        """Remove the triggers and change-log tables, or the slot and publication, that
        this call installed."""
        if self.sqlite_tables:
            from kayak.cdc.sqlite import disable

            for table in self.sqlite_tables:
                disable(sqlite_path(self.url), table, drop_log=True)
            log.info("removed the capture of %s set up by this run",
                     ", ".join(self.sqlite_tables))  # fmt: skip
        if self.publication is not None or self.slot is not None:
            from kayak.cdc.postgres import disable as disable_postgres

            disable_postgres(self.url, publication=self.publication, slot=self.slot)
            log.info("removed the publication/slot set up by this run")


def prepare_source(spec: PipelineSpec) -> SourceSetup:
    """Enable capture on the tables not captured yet: SQLite triggers, or the PostgreSQL
    publication (the source makes its slot and snapshot when opened). Returns what it
    installed (:meth:`SourceSetup.undo` takes it away)."""
    setup = SourceSetup(spec.source)
    if source_kind(spec.source) != "sqlite":
        from kayak.cdc.postgres import enable as enable_postgres
        from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION, resolve_slot, slot_exists

        slot_name = resolve_slot(spec.source, spec.slot_name)
        publication = spec.slot_name or DEFAULT_PUBLICATION
        slot_was_there = slot_exists(spec.source, slot_name)
        created = enable_postgres(spec.source, spec.tables, publication=publication, slot=slot_name)
        setup.publication = publication if created else None
        setup.slot = None if slot_was_there else slot_name
        return setup
    import sqlite3

    from kayak.cdc.sqlite import enable, log_table_name

    path = sqlite_path(spec.source)
    if not Path(path).exists():
        raise KayakError(f"SQLite source {path} does not exist")
    conn = sqlite3.connect(path)
    try:
        captured = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        conn.close()
    for table in spec.tables:
        if log_table_name(table) not in captured:
            rows = enable(path, table)
            setup.sqlite_tables.append(table)
            log.info("capture enabled on %s (snapshot of %d rows)", table, rows)
    return setup


class Pipeline:
    """Runs a :class:`PipelineSpec`; use as a context manager (``start``/``close``)."""

    def __init__(
        self,
        spec: PipelineSpec,
        spark: Any = None,
        *,
        spark_factory: Callable[[], Any] | None = None,
        page: PageStarter | None = None,
    ) -> None:
        """``spark``: the session to run on; or ``spark_factory``, called once the broker,
        the source and the clients are up (so a start that fails there fails fast); neither:
        :func:`~kayak.pipeline.session.local_spark`. ``page`` starts the pipeline's web
        server when ``spec.metrics_port`` asks for one (the CLI passes the console's)."""
        self.spec = spec
        self._spark = spark
        self._spark_factory = spark_factory
        self._page = page
        self.broker: EmbeddedBroker | None = None
        self.source: ChangeSource | None = None
        self.capture: CaptureLoop | None = None
        self.job: ReplicationJob | None = None
        self.target: Target | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._capture_error: BaseException | None = None
        self._idle_rounds = 0
        self._idle = threading.Condition()
        self._producer: Any = None
        self._admin: Any = None
        # -- metrics: what the pipeline's web server reads (kayak.pipeline.metrics) --
        self.console: ServedPage | None = None
        self.last_verification: VerificationRecord | None = VerificationRecord.load(spec.work_dir)

    @property
    def bootstrap_servers(self) -> str:
        return self.spec.bootstrap_servers or (self.broker.bootstrap_servers if self.broker else "")

    @property
    def registry_url(self) -> str:
        return self.spec.registry_url or (self.broker.registry_url if self.broker else "")

    def start(self) -> Self:
        """Start every part; on any failure, stop what was started (the embedded broker is
        a child process and must not outlive a failed start) and re-raise."""
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> Self:
        from kayak.client.config import admin_share
        from kayak.client.sync import Admin
        from kayak.serde import SchemaRegistryClient

        spec = self.spec
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        if spec.bootstrap_servers is None:
            self.broker = EmbeddedBroker(spec.work_dir / "broker").start()
        if not self.registry_url:
            raise KayakError("a schema registry URL is needed with external bootstrap servers")
        self.source = open_source(
            spec.source, spec.tables, slot_name=spec.slot_name, stopping=self._stop,
            give_up_after_s=spec.retry_timeout_s,
        )  # fmt: skip
        client = {"bootstrap.servers": self.bootstrap_servers, **spec.client_options}
        db = database_name(spec.source)
        # One Kafka transaction per capture batch (see kayak.cdc.capture).
        self._producer, transactional = open_capture_producer(
            {**client, "acks": "all", "linger.ms": 5},
            capture_transactional_id(spec.prefix, db, spec.slot_name),
        )
        admin = self._admin = Admin(admin_share(client))  # -X may hold producer-only names
        encoder = EventEncoder(
            prefix=spec.prefix, connector=source_kind(spec.source),
            registry=SchemaRegistryClient(self.registry_url, config=spec.registry_config),
        )  # fmt: skip

        ensure_topic = topic_ensurer(admin)
        publisher = ChangePublisher(
            self._producer, encoder, db=db, ensure_topic=ensure_topic,
            transactional=transactional,
        )  # fmt: skip
        self.capture = CaptureLoop(self.source, publisher, max_batch=spec.capture_batch)
        topics = [topic_name(spec.prefix, t) for t in self.source.tables()]
        for topic in topics:
            ensure_topic(topic)
        self._thread = threading.Thread(target=self._capture_forever, name="kayak-capture")
        self._thread.start()
        self._start_console()  # before Spark's start, so its page shows the capture meanwhile
        self._replicate(topics=topics)
        return self

    def _replicate(self, **read: Any) -> None:
        """Start Spark (unless handed a session), the driver's target and the replication
        query; ``read`` says what it reads: ``topics=[…]`` or ``topic_pattern=…``."""
        spec = self.spec
        if self._spark is None:
            if self._spark_factory is None:
                from kayak.pipeline.session import local_spark

                self._spark_factory = local_spark
            self._spark = self._spark_factory()
        # The driver's, for verification: it outlives target restarts as the executors' do.
        self.target = ReconnectingTarget(spec.target, spec.retry_policy)
        settings = ReplicationSettings(
            bootstrap_servers=self.bootstrap_servers,
            registry_url=self.registry_url,
            registry_config=spec.registry_config,
            checkpoint_dir=str(spec.work_dir / "checkpoint"),
            target_url=spec.target,
            max_offsets_per_trigger=micro_batch_cap(spec),
            dead_letter_topic=f"{spec.prefix}.dead-letter",
            client_options=spec.client_options,
            retry=spec.retry_policy,
            input_format=spec.input_format,
            **read,
        )
        self.job = ReplicationJob(self._spark, settings)
        self.job.start()

    # -- the pipeline's web server (/metrics and its page) ----------------------------------

    @property
    def metrics_url(self) -> str | None:
        """The address of the pipeline's page (``/metrics`` below it) while it serves one."""
        return self.console.url if self.console is not None else None

    def _start_console(self) -> None:
        if self.spec.metrics_port is None:
            return
        if self._page is None:
            log.warning("metrics_port is set but no page was handed to the pipeline: none served")
            return
        self.console = self._page(self)

    # -- capture ---------------------------------------------------------------------------

    def _capture_forever(self) -> None:
        assert self.capture is not None
        try:
            while not self._stop.is_set():
                n = self.capture.run_once()
                if n == 0:
                    with self._idle:
                        self._idle_rounds += 1
                        self._idle.notify_all()
        except BaseException as e:  # reported by catch_up and close
            log.exception("capture stopped")
            self._capture_error = e
            with self._idle:
                self._idle.notify_all()

    def _check_capture(self) -> None:
        if self._capture_error is not None:
            raise PipelineFailure(
                f"capture stopped: {one_line(self._capture_error)}"
            ) from self._capture_error

    def check(self) -> None:
        """Raise :class:`PipelineFailure` if the capture thread, the embedded broker or the
        streaming query has died; its message is one line naming the table, the source
        position (when the target refused a change) and the cause."""
        self._check_capture()
        self._check_broker()
        query = self.job.query if self.job is not None else None
        if query is not None and not query.isActive:
            self._query_failed(query.exception())

    def _check_broker(self) -> None:
        """The embedded broker is a child process on ephemeral ports: if it is gone, the
        clients would only retry until their timeouts, against ports nothing will listen on
        again. Stop at once instead."""
        from kayak.pipeline.session import is_alive

        broker = self.broker
        if broker is not None and broker.pid is not None and not is_alive(broker.pid):
            raise PipelineFailure(f"the embedded broker exited; its log is {broker.log_path}")

    def _query_failed(self, error: BaseException | None) -> None:
        if error is None:
            raise PipelineFailure("the replication query stopped")
        log.error("the replication query stopped", exc_info=error)
        # The apply runs in the executors; the one line its ApplyError (or a refused
        # schema's TargetSchemaError) carries comes back inside the query's exception text.
        said = _KAYAK_ERROR_LINE.findall(str(error))
        if said:
            raise PipelineFailure(said[-1]) from error
        raise PipelineFailure(f"the replication query stopped: {one_line(error)}") from error

    def catch_up(self, timeout_s: float = 600.0) -> None:
        """Return once every change committed in the source before this call is applied;
        :class:`PipelineFailure` if a part died meanwhile."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            seen = self._idle_rounds
            # Two idle rounds: the first may have started before the call.
            while self._idle_rounds < seen + 2 and self._capture_error is None:
                if not self._idle.wait(max(0.0, deadline - time.monotonic())):
                    raise KayakError("capture did not catch up in time")
        self._check_capture()
        self._wait_applied()

    def _wait_applied(self) -> None:
        """Return once the replication query has applied every record in its topics now."""
        assert self.job is not None
        try:
            self.job.wait_caught_up()
        except Exception as e:
            query = self.job.query
            if query is not None and not query.isActive:
                self._query_failed(e)
            raise

    def verify(self) -> list[Verification]:
        """Compare every captured table, as the source database describes it now, source
        against target."""
        assert self.target is not None
        source, policy = self.spec.source, self.spec.retry_policy
        verifications = []
        for name in self.spec.tables:
            table = call_with_retries(
                functools.partial(current_table_schema, source, name),
                what=f"reading the schema of {name} from the source", policy=policy,
            )  # fmt: skip
            rows = call_with_retries(
                functools.partial(read_source_rows, source, table),
                what=f"reading {name} from the source", policy=policy,
            )  # fmt: skip
            verification = verify_table(table, rows, self.target)
            verification.not_compared = call_with_retries(
                functools.partial(generated_columns, source, table),
                what=f"reading the generated columns of {name}", policy=policy,
            )  # fmt: skip
            verifications.append(verification)
        self._record_verification(verifications)
        return verifications

    def _record_verification(self, verifications: list[Verification]) -> None:
        """For the metrics and the page, of this run and (kept in the work directory) the
        next one's."""
        self.last_verification = VerificationRecord.of(verifications)
        try:
            self.last_verification.save(self.spec.work_dir)
        except OSError as e:
            log.warning("could not keep the verification in %s: %s", self.spec.work_dir, e)

    def close(self) -> None:
        """Stop everything started, in order; a part that fails to stop is logged and the
        rest are still stopped (above all the embedded broker process)."""
        self._stop.set()
        if self.console is not None:
            self.console.stop()
        if self._thread is not None:
            self._thread.join(30)
        closers: list[Callable[[], None]] = []
        if self.job is not None:
            closers.append(self.job.stop)
        closers += [p.close for p in (self.source, self._producer, self._admin, self.target) if p]
        if self.broker is not None:
            closers.append(self.broker.stop)
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("while stopping the pipeline")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
