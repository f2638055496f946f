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
import re
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self

from kayak.cdc.capture import CaptureLoop, capture_transactional_id
from kayak.cdc.envelope import topic_name
from kayak.cdc.publisher import ChangePublisher, EventEncoder, open_capture_producer
from kayak.cdc.source import ChangeSource
from kayak.errors import KayakError
from kayak.pipeline.apply import one_line
from kayak.pipeline.embedded import EmbeddedBroker
from kayak.pipeline.job import ReplicationJob, ReplicationSettings
from kayak.pipeline.metrics import VerificationRecord
from kayak.pipeline.source_database import (
    current_table_schema,
    database_name,
    generated_columns,
    open_source,
    read_source_rows,
    source_kind,
)
from kayak.pipeline.spark_kafka import reader_for_session
from kayak.pipeline.spec import PipelineSpec, micro_batch_cap
from kayak.pipeline.targets import Target
from kayak.pipeline.topics import topic_ensurer
from kayak.pipeline.transient import ReconnectingTarget, call_with_retries
from kayak.pipeline.verify import Verification, verify_table


class ServedPage(Protocol):
    """The pipeline's web server (``/metrics`` and its page) as the pipeline sees it."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


# Starts the pipeline's page for a running pipeline; the CLI hands in the console's.
PageStarter = Callable[["Pipeline"], ServedPage]

__all__ = [
    "PageStarter",
    "Pipeline",
    "PipelineFailure",
    "ServedPage",
    "one_line",
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
        reader = reader_for_session(spec.reader, self._spark)
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
            reader=reader,
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
            self.capture.finish()  # the batch in flight: acknowledged now, not read again
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
