"""Applying a micro-batch in Spark's executors: each task decodes and writes its records.

The driver only plans: per micro-batch it runs :func:`apply_partitions` over the batch's raw
records with ``mapInArrow`` (on a cluster, first spread by table and key over the executors;
one task in ``local`` mode and for a SQLite target). Each task then, in the Python worker that
runs it,

- decodes its records (:mod:`~kayak.pipeline.decode`) and keeps the latest change of every
  key, in one pass, with no text form of a row in between,
- opens the target by URL (once per worker process: workers are reused between tasks),
- makes sure each table it writes exists in the shape of the change's schema, evolving it
  for a schema change (:mod:`~kayak.pipeline.targets.evolve`; targets serialise that DDL,
  as several tasks may meet a new table at once),
- applies its TRUNCATEs (order-free: see :mod:`~kayak.pipeline.targets.base`), including the
  one that ends a table's snapshot, then every table's changes, all in *one* database
  transaction guarded by source position: a reader of the target sees the task's whole share
  of the micro-batch or none of it (so, with whole source transactions in each micro-batch,
  never part of a source transaction that reached this task), and a retried task or a
  replayed micro-batch changes nothing,
- sends undecodable records to the dead-letter topic,

and returns one small row of counts and a latency histogram, all the driver collects. Nothing
per change crosses to the driver, so its memory does not grow with the batch, and adding
executors adds writers.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kayak.cdc.change import Row, TableSchema
from kayak.errors import KayakError
from kayak.pipeline.decode import (
    DecodedChange,
    EventDecoder,
    UndecodableRecord,
    changes_by_schema,
    decode_records,
    latest_per_key,
)
from kayak.pipeline.input_formats import make_decoder
from kayak.pipeline.latency import LatencyHistogram
from kayak.pipeline.session import parent_of
from kayak.pipeline.targets import AppliedChange, Target
from kayak.pipeline.targets.base import BatchApplyError, TableChanges, Truncate
from kayak.pipeline.targets.evolve import renamed_table
from kayak.pipeline.transient import ReconnectingTarget, RetryPolicy

__all__ = [
    "APPLY_STATS_SCHEMA",
    "ApplyError",
    "ApplySettings",
    "ChangeApplier",
    "apply_partitions",
    "executor_id",
    "one_line",
    "root_cause",
]

log = logging.getLogger(__name__)

# One row per task: what it applied (in all and per table, as JSON), where (the executor's
# id, "driver" in local mode), and its latencies as histogram bucket counts (JSON).
APPLY_STATS_SCHEMA = (
    "changes long, applied long, dead_lettered long, latency string, executor string, tables string"
)
_STATS_ARROW = pa.schema(
    [("changes", pa.int64()), ("applied", pa.int64()), ("dead_lettered", pa.int64()),
     ("latency", pa.string()), ("executor", pa.string()), ("tables", pa.string())]
)  # fmt: skip


class ApplyError(KayakError):
    """The target refused changes: the message is one line naming the table, the change's
    key and source position (or the batch's range of positions) and the cause. Raised in an
    executor, it ends the streaming query; the driver finds it in the query's exception."""


@dataclass(frozen=True)
class ApplySettings:
    """What an executor needs to apply (picklable, hashable: one worker state per value)."""

    target_url: str
    registry_url: str
    bootstrap_servers: str
    dead_letter_topic: str
    client_options: tuple[tuple[str, str], ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # of transient target failures
    registry_config: tuple[tuple[str, str], ...] = ()  # the registry client's settings
    input_format: str = "kayak"  # of the change topics: kayak.pipeline.input_formats.INPUT_FORMATS


class ChangeApplier:
    """Applies decoded changes (the latest per key, and TRUNCATEs) to a target: each
    schema's table made sure of (created, or evolved to it:
    :mod:`~kayak.pipeline.targets.evolve`) once, then all of them in one transaction guarded
    by source position."""

    def __init__(self, target: Target, decoder: EventDecoder) -> None:
        self.target = target
        self.decoder = decoder
        # schema id -> (the table as written to the target, source -> target column names)
        self._written: dict[int, tuple[TableSchema, dict[str, str] | None]] = {}

    def table(self, schema_id: int, position: str = "") -> TableSchema:
        """The table a schema id describes, created or evolved in the target if needed;
        ``position`` is the source position of a change written with it."""
        return self._prepare(schema_id, position)[0]

    def _prepare(
        self, schema_id: int, position: str, *, again: bool = False
    ) -> tuple[TableSchema, dict[str, str] | None]:  # fmt: skip
        known = self._written.get(schema_id)
        if known is not None and not again:
            return known
        table = self.decoder.table(schema_id)
        connector = str(self.decoder.schema(schema_id).get("connector", ""))
        try:
            mapping = self.target.ensure_table(table, connector, position)
            written = table if mapping is None else renamed_table(table, mapping)
        except KayakError:
            raise  # already one line naming the table and what is wrong
        except Exception as exc:
            raise ApplyError(
                f"creating table {table.qualified_name} failed: {one_line(exc)}"
            ) from exc
        self._written[schema_id] = (written, mapping)
        return written, mapping

    def apply(
        self, changes: Sequence[DecodedChange], latency: LatencyHistogram | None = None,
        applied_by_table: dict[str, int] | None = None,
    ) -> int:  # fmt: skip
        """Apply ``changes`` (the latest per key, and TRUNCATEs: :func:`latest_per_key`);
        the number of changes applied, also added up per table in ``applied_by_table``."""
        truncates = sorted((c for c in changes if c.key is None), key=lambda c: c.position)
        groups = sorted(changes_by_schema(changes).items())
        for again in (False, True):
            batch_truncates: list[Truncate] = [
                (self._prepare(t.schema_id, t.position, again=again)[0], t.position)
                for t in truncates
            ]
            tables: list[TableChanges] = []
            for schema_id, group in groups:
                position = max(c.position for c in group)
                table, mapping = self._prepare(schema_id, position, again=again)
                tables.append((table, [_applied_change(table, mapping, c) for c in group]))
            try:
                done, counts = self.target.apply_batch(batch_truncates, tables)
                break
            except Exception as exc:
                if not again:
                    # Another task may have evolved a table since this worker made sure of
                    # it, even a moment ago (say, renamed a column): make sure again and
                    # retry once; the failed transaction was rolled back.
                    log.info("apply failed (%s); checking the tables' schemas again",
                             one_line(_cause(exc)))  # fmt: skip
                    continue
                raise ApplyError(_describe_batch_failure(exc)) from exc
        applied = 0
        for (table, _), truncated in zip(batch_truncates, done, strict=True):
            applied += truncated
            _count(applied_by_table, table, int(truncated))
        for (table, _), (_, group), count in zip(tables, groups, counts, strict=True):
            applied += count
            _count(applied_by_table, table, count)
            if latency is not None:
                now_ms = time.time_ns() // 1_000_000
                # Snapshot rows carry the snapshot's time, not a commit: no latency to report.
                latency.extend(now_ms - c.ts_ms for c in group if c.op != "r")
        return applied


def _cause(error: BaseException) -> BaseException:
    """The database's error behind a failed batch."""
    if isinstance(error, BatchApplyError) and error.__cause__ is not None:
        return error.__cause__
    return error


def _describe_batch_failure(error: BaseException) -> str:
    """One line for a failed batch: the table, the change or TRUNCATE, the cause."""
    if not isinstance(error, BatchApplyError):
        return f"apply failed: {one_line(error)}"
    cause = _cause(error)
    if error.truncate_position is not None:
        return (f"apply failed on table {error.table.qualified_name}, TRUNCATE at source "
                f"position {error.truncate_position}: {one_line(cause)}")  # fmt: skip
    return _describe_failure(error.table, error.changes, cause)


class _WorkerState:
    """What one Python worker keeps between tasks for one pipeline: the target connection,
    the registry's schemas, the tables already made sure of, the dead-letter producer."""

    def __init__(self, settings: ApplySettings) -> None:
        self.settings = settings
        # A target that restarts or drops this connection is reconnected to and the
        # transaction redone (safe: applying is guarded by source position).
        self.applier = ChangeApplier(
            ReconnectingTarget(settings.target_url, settings.retry),
            make_decoder(
                settings.input_format, settings.registry_url, dict(settings.registry_config)
            ),
        )
        self._producer: Any = None

    def producer(self) -> Any:
        if self._producer is None:
            from kayak.client.sync import Admin, Producer
            from kayak.pipeline.topics import ensure_topic

            config = {
                "bootstrap.servers": self.settings.bootstrap_servers,
                **dict(self.settings.client_options),
            }
            with Admin(config) as admin:
                ensure_topic(admin, self.settings.dead_letter_topic)
            self._producer = Producer(config)
        return self._producer


_states: dict[ApplySettings, _WorkerState] = {}
_states_lock = threading.Lock()


def _state(settings: ApplySettings) -> _WorkerState:
    with _states_lock:
        state = _states.get(settings)
        if state is None:
            state = _states[settings] = _WorkerState(settings)
        return state


def apply_partitions(
    batches: Iterator[pa.RecordBatch], settings: ApplySettings
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: raw records (key, value, topic, partition, offset) in,
    one row of counts out (:data:`APPLY_STATS_SCHEMA`). A key's changes must all reach the
    same task (the job plans it so), or the latest of them would not be found."""
    state = _state(settings)
    changes: list[DecodedChange] = []
    bad: list[UndecodableRecord] = []
    for batch in batches:
        decoded, undecodable = decode_records(state.applier.decoder, batch)
        changes.extend(decoded)
        bad.extend(undecodable)
    if bad:
        _dead_letter(state, bad)
    latency = LatencyHistogram()
    by_table: dict[str, int] = {}
    applied = state.applier.apply(latest_per_key(changes), latency, by_table)
    yield pa.RecordBatch.from_pylist(
        [{"changes": len(changes), "applied": applied, "dead_lettered": len(bad),
          "latency": json.dumps(latency.counts), "executor": executor_id(),
          "tables": json.dumps(by_table)}],
        schema=_STATS_ARROW,
    )  # fmt: skip


def _count(counts: dict[str, int] | None, table: TableSchema, applied: int) -> None:
    if counts is not None and applied:
        counts[table.qualified_name] = counts.get(table.qualified_name, 0) + applied


@functools.cache
def executor_id() -> str:
    """The id of the Spark executor whose Python worker this is (``"driver"`` when tasks run
    in the driver's JVM, as in ``local[N]``): read from the command line of the JVM this
    worker descends from, so a run can show which executors did the writing."""
    pid = os.getppid()
    for _ in range(4):  # worker <- daemon <- JVM, with room to spare
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return "unknown"
        if any(arg.endswith(b"CoarseGrainedExecutorBackend") for arg in argv):
            flag = argv.index(b"--executor-id") if b"--executor-id" in argv else -1
            return argv[flag + 1].decode() if 0 <= flag < len(argv) - 1 else "unknown"
        if any(arg.endswith(b"SparkSubmit") for arg in argv):
            return "driver"
        parent = parent_of(pid)
        if parent is None:
            return "unknown"
        pid = parent
    return "unknown"


def _applied_change(
    table: TableSchema, mapping: dict[str, str] | None, change: DecodedChange
) -> AppliedChange:
    """A decoded change as a change of ``table`` (the table as written: ``mapping`` renames
    the source's columns to the target's and leaves out those the target does not have)."""
    key: Row = dict(zip(table.key, change.key_values, strict=True))
    after = change.after
    if after is not None and mapping is not None:
        after = {mapping[name]: value for name, value in after.items() if name in mapping}
    return AppliedChange(change.op, key, after, change.position, change.ts_ms, change.key or "")


def _describe_failure(
    table: TableSchema, changes: Sequence[AppliedChange], exc: BaseException
) -> str:
    """One line: the table, the change (key and position) or the batch's positions, the cause."""
    where = f"table {table.qualified_name}"
    if len(changes) == 1:
        (change,) = changes
        key = ", ".join(f"{name}={value!r}" for name, value in change.key.items())
        where += f", key {key}, source position {change.position}"
    elif changes:
        positions = sorted(c.position for c in changes)
        where += (
            f", one of {len(positions)} changes at source positions "
            f"{positions[0]} … {positions[-1]}"
        )
    return f"apply failed on {where}: {one_line(exc)}"


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """An error as one terminal line: its type and the first line of its message, or, when
    its message carries Python tracebacks (Spark's exceptions do), the innermost exception
    they end with (:func:`root_cause`)."""
    text = str(error)
    cause = root_cause(text)
    if cause is not None:
        line = cause
    elif isinstance(error, BaseException):
        lines = text.strip().splitlines()
        line = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    else:
        line = next((t for t in text.strip().splitlines() if t.strip()), "unknown error")
    return line if len(line) <= limit else line[: limit - 1] + "…"


_TRACEBACK_HEAD = "Traceback (most recent call last):"
# Exceptions that only carry another across the Python/JVM boundary (py4j's proxy, pyspark's
# captured PythonException): never the cause.
_WRAPPERS = ("pyspark.", "py4j.", "org.apache.spark.", "java.")


def root_cause(text: str) -> str | None:
    """The exception line (``sqlite3.OperationalError: unable to open database file``) that
    the last Python traceback in ``text`` ends with, Spark's and py4j's wrappers skipped;
    None when ``text`` holds none.

    A function that fails in an executor, or in ``foreachBatch``, reaches the driver as a
    ``StreamingQueryException`` whose first line is Spark's wrapper; the tracebacks it
    crossed follow in its message, the one raised in the Python worker last."""
    found = None
    in_traceback = False
    for line in text.splitlines():
        if line.startswith(_TRACEBACK_HEAD):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            # A traceback's frames are indented; its first unindented line is the exception.
            in_traceback = False
            if not line.startswith(_WRAPPERS):
                found = line.strip()
    return found


def _dead_letter(state: _WorkerState, records: Sequence[UndecodableRecord]) -> None:
    producer = state.producer()
    topic = state.settings.dead_letter_topic
    futures = []
    for r in records:
        log.error(
            "undecodable record %s[%d]@%d sent to dead-letter topic %s: %s",
            r.topic, r.partition, r.offset, topic, r.error,
        )  # fmt: skip
        headers = [
            ("kayak.error", r.error.encode()),
            ("kayak.topic", r.topic.encode()),
            ("kayak.partition", str(r.partition).encode()),
            ("kayak.offset", str(r.offset).encode()),
        ]
        futures.append(producer.send(topic, r.raw_value, key=r.raw_key, headers=headers))
    for future in futures:
        future.result()
