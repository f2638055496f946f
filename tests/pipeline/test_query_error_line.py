"""A stopped replication query's one line names the root cause, not Spark's wrapper.

A function that fails in a Python worker reaches the driver as a ``StreamingQueryException``
whose first line is ``[STREAM_FAILED] … [FOREACH_BATCH_USER_FUNCTION_ERROR] …``; the original
exception is at the end of the tracebacks in its message. The exception here is produced for
real, the way the apply fails when an executor cannot open a SQLite target: a ``foreachBatch``
function runs a ``mapInArrow`` task that opens a database in a directory that does not exist.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kayak.pipeline.apply import one_line, root_cause
from kayak.pipeline.runner import Pipeline, PipelineFailure
from kayak.pipeline.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_CAUSE = "sqlite3.OperationalError: unable to open database file"


def _open_missing_database(missing: str) -> Any:
    def in_the_worker(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            sqlite3.connect(missing)  # raises: its directory does not exist
            yield batch

    return in_the_worker


@pytest.fixture(scope="module")
def stopped_query_error(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The StreamingQueryException of a query whose foreachBatch failed in a Python worker."""
    from pyspark.errors import StreamingQueryException

    work = tmp_path_factory.mktemp("failing-query")
    missing = str(work / "no-such-dir" / "target.db")
    apply = _open_missing_database(missing)

    def process(batch: Any, batch_id: int) -> None:
        batch.mapInArrow(apply, batch.schema).collect()

    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )  # fmt: skip
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(300)
    finally:
        query.stop()
    return caught.value


def test_the_line_is_the_python_exception_inside_sparks(stopped_query_error: Any) -> None:
    text = str(stopped_query_error)
    # What the user was shown before: Spark's wrapper, cut before the cause.
    assert text.startswith("[STREAM_FAILED]"), text[:200]
    assert root_cause(text) == _CAUSE
    assert one_line(stopped_query_error) == _CAUSE


def test_the_pipeline_stops_with_the_cause(stopped_query_error: Any, tmp_path: Path) -> None:
    pipeline = Pipeline(PipelineSpec(
        source="sqlite:s.db", tables=["t"], target="sqlite:t.db", work_dir=tmp_path))  # fmt: skip
    with pytest.raises(PipelineFailure) as stopped:
        pipeline._query_failed(stopped_query_error)
    assert str(stopped.value) == f"the replication query stopped: {_CAUSE}"


def test_text_without_a_traceback_keeps_its_first_line() -> None:
    assert root_cause("no traceback here\nsecond line") is None
    assert one_line(ValueError("bad value\nmore")) == "ValueError: bad value"
    assert one_line("first\nsecond") == "first"
    # The last traceback's exception, Spark's and py4j's wrappers skipped.
    chained = (
        'Traceback (most recent call last):\n  File "a.py", line 1, in f\n'
        "    g()\nKeyError: 'k'\n\nThe above exception was the direct cause of the "
        'following exception:\n\nTraceback (most recent call last):\n  File "b.py", '
        "line 2, in h\nkayak.errors.KayakError: worded\n"
    )
    assert root_cause(chained) == "kayak.errors.KayakError: worded"
    wrapped = chained + (
        '\nTraceback (most recent call last):\n  File "c.py", line 3, in call\n'
        "pyspark.errors.exceptions.captured.PythonException: An exception was thrown\n"
    )
    assert root_cause(wrapped) == "kayak.errors.KayakError: worded"
