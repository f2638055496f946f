"""Writing a DataFrame to Kafka: ``df.write.format("kayak")`` and ``writeStream``.

Columns, as Spark's Kafka sink takes them: ``value`` (binary or string, required), ``key``
(binary or string), ``topic`` (string; the ``topic`` option, when set, wins), ``partition``
(int; else the producer's partitioner decides by key) and ``headers``
(``array<struct<key:string,value:binary>>``). Other columns are ignored.

Each task produces its rows with kayak's producer (``acks=all``, idempotent, unless
``kafka.*`` options say otherwise), in bulk (``send_batch``, one call per topic and partition
of an Arrow batch), waits for every acknowledgement, and only then returns its commit
message: a task that returns has its rows in Kafka. A failed send fails the task. As with
Spark's Kafka sink, a retried task or micro-batch may write its rows again (at least once).

Spark's Kafka sink takes ``save()`` in the default mode (ErrorIfExists) and appends, but Spark
refuses that mode for every Python data source. :func:`accept_default_save_mode` (called when
the source is registered) makes ``format("kayak")`` writes in the default mode append, so
jobs written for ``format("kafka")`` run unchanged. A topic that does not exist is created by
the broker on first use (the producer's ``allow.auto.create.topics``, on by default), as with
Spark's sink against a broker that auto-creates topics.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from kayak.client.sync import Producer
from kayak.errors import KayakError
from kayak.spark.options import KayakSparkError, WriteOptions

__all__ = [
    "KayakCommitMessage",
    "KayakStreamWriter",
    "KayakWriter",
    "accept_default_save_mode",
    "check_write_schema",
    "write_batches",
]

log = logging.getLogger(__name__)


@dataclass
class KayakCommitMessage(WriterCommitMessage):
    """What one task wrote: records per topic."""

    records: dict[str, int] = field(default_factory=dict)


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse a DataFrame the sink cannot write, naming the column (on the driver)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise KayakSparkError(
            "the DataFrame written to Kafka needs a 'value' column (binary or string); it has "
            + ", ".join(f.name for f in schema.fields)
        )
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], BinaryType | StringType):
            raise KayakSparkError(
                f"column {name!r} must be binary or string, not {fields[name].simpleString()}"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise KayakSparkError(
            f"column 'topic' must be a string, not {fields['topic'].simpleString()}"
        )
    if options.topic is None and "topic" not in fields:
        raise KayakSparkError(
            "no topic to write to: set the option 'topic' or add a 'topic' column"
        )
    if "partition" in fields and not isinstance(
        fields["partition"], IntegerType | LongType | ShortType
    ):
        raise KayakSparkError(
            f"column 'partition' must be an int, not {fields['partition'].simpleString()}"
        )
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, BinaryType | StringType)
        )
        if not ok:
            raise KayakSparkError(
                "column 'headers' must be array<struct<key:string,value:binary>>, not "
                + headers.simpleString()
            )


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    for index, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            column: pa.Array = batch.column(index)
            return column
    return None


def _as_bytes(column: pa.Array) -> list[bytes | None]:
    """A binary or string column as a list of bytes (strings UTF-8 encoded by Arrow)."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _headers(column: pa.Array) -> list[tuple[tuple[str, bytes | None], ...] | None]:
    result: list[tuple[tuple[str, bytes | None], ...] | None] = []
    for items in column.to_pylist():
        if not items:
            result.append(None)
            continue
        pairs = []
        for item in items:
            value = item["value"]
            pairs.append((item["key"], value.encode() if isinstance(value, str) else value))
        result.append(tuple(pairs))
    return result


def _pick(items: list[Any] | None, rows: list[int] | None) -> list[Any] | None:
    if items is None or rows is None:
        return items
    return [items[i] for i in rows]


def write_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> KayakCommitMessage:
    """Produce every row of ``batches``; return once all are acknowledged (executor side)."""
    message = KayakCommitMessage()
    try:
        producer = Producer(options.producer_config())
    except KayakError as exc:
        raise KayakSparkError(
            f"cannot reach Kafka at kafka.bootstrap.servers={options.bootstrap_servers!r}: {exc}"
        ) from exc
    pending: list[tuple[str, concurrent.futures.Future[Any]]] = []
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.extend(_send_batch(producer, options, batch, message))
        producer.flush()
        for topic, future in pending:
            try:
                future.result()
            except Exception as exc:
                raise KayakSparkError(f"writing to Kafka topic {topic!r} failed: {exc}") from exc
    finally:
        producer.close()
    log.info("wrote %s", message.records)
    return message


def _send_batch(
    producer: Producer, options: WriteOptions, batch: pa.RecordBatch, message: KayakCommitMessage
) -> list[tuple[str, concurrent.futures.Future[Any]]]:
    value_column = _column(batch, "value")
    if value_column is None:
        raise KayakSparkError("the DataFrame written to Kafka needs a 'value' column")
    values = _as_bytes(value_column)
    key_column = _column(batch, "key")
    keys = _as_bytes(key_column) if key_column is not None else None
    header_column = _column(batch, "headers")
    headers = _headers(header_column) if header_column is not None else None
    partition_column = _column(batch, "partition")
    partitions = partition_column.to_pylist() if partition_column is not None else None
    if options.topic is not None:
        topics: list[str] | None = None
    else:
        topic_column = _column(batch, "topic")
        if topic_column is None:
            raise KayakSparkError("no topic to write to: set the option 'topic' or add a column")
        if topic_column.null_count:
            raise KayakSparkError(
                "a row has a null 'topic'; set the option 'topic' or fill the column"
            )
        topics = topic_column.to_pylist()
    # Rows by (topic, partition), in order; the common case is one group of every row.
    groups: dict[tuple[str, int | None], list[int] | None] = {}
    if topics is None and partitions is None:
        assert options.topic is not None
        groups[(options.topic, None)] = None
    else:
        by_group: dict[tuple[str, int | None], list[int]] = {}
        for row in range(batch.num_rows):
            topic = options.topic if topics is None else topics[row]
            assert topic is not None
            target = None if partitions is None else partitions[row]
            by_group.setdefault((topic, target), []).append(row)
        groups.update(by_group)
    sent = []
    for (topic, target), rows in groups.items():
        group_values = _pick(values, rows)
        assert group_values is not None
        try:
            future = producer.send_batch(
                topic,
                group_values,
                keys=_pick(keys, rows),
                headers=_pick(headers, rows),
                partition=target,
            )
        except (KayakError, ValueError) as exc:
            raise KayakSparkError(f"writing to Kafka topic {topic!r} failed: {exc}") from exc
        sent.append((topic, future))
        message.records[topic] = message.records.get(topic, 0) + len(group_values)
    return sent


class KayakWriter(DataSourceArrowWriter):
    """``df.write.format("kayak")``: every task produces its rows and waits for the acks."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KayakCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to finish: every task's rows are in Kafka when it returns."""
        log.info("write committed: %s", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Kafka cannot take records back: what the successful tasks wrote stays."""
        log.warning("write aborted; rows already produced stay in Kafka: %s", _total(messages))


class KayakStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("kayak")``: each micro-batch's tasks produce their rows."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KayakCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to finish: every task's rows are in Kafka when it returns."""
        log.info("micro-batch %d written: %s", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Kafka cannot take records back; a retried micro-batch writes its rows again."""
        log.warning("micro-batch %d aborted: %s", batchId, _total(messages))


def _total(messages: list[WriterCommitMessage | None]) -> dict[str, int]:
    total: dict[str, int] = {}
    for message in messages:
        if isinstance(message, KayakCommitMessage):
            for topic, count in message.records.items():
                total[topic] = total.get(topic, 0) + count
    return total


# -- save() in the default mode -----------------------------------------------------------

SOURCE_NAME = "kayak"
_APPENDING_MODES = frozenset({"error", "errorifexists", "default"})
_PATCHED = "_kayak_accepts_default_mode"


def accept_default_save_mode() -> None:
    """Make ``df.write.format("kayak").save()`` append in Spark's default save mode.

    Spark's own Kafka sink is a V1 source: it treats the default ErrorIfExists like Append
    (there is nothing that could "exist" in a stream of records). Spark refuses every mode
    but Append and Overwrite for Python data sources, so this turns the default (or an
    explicit ``error``/``errorifexists``) into ``append`` on the driver, for the ``kayak``
    format only, before the write reaches the JVM. Other formats, and explicit modes, are
    untouched. Safe to call more than once; classic PySpark (not Spark Connect)."""
    from pyspark.sql.readwriter import DataFrameWriter

    # Classic PySpark only: importing Spark Connect's writer without its gRPC extras ends the
    # process (pyspark.sql.connect calls sys.exit when it thinks it runs doctests).
    if not getattr(DataFrameWriter, _PATCHED, False):
        _patch_writer(DataFrameWriter)


def _patch_writer(cls: type[Any]) -> None:
    original_format: Callable[..., Any] = cls.format
    original_mode: Callable[..., Any] = cls.mode
    original_save: Callable[..., Any] = cls.save

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        self._kayak_source = source
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            self._kayak_mode = saveMode
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(self: Any, path: str | None = None, format: str | None = None,
             mode: str | None = None, partitionBy: Any = None, **options: Any) -> Any:
        source = format if format is not None else getattr(self, "_kayak_source", None)
        chosen = mode if mode is not None else getattr(self, "_kayak_mode", None)
        if _appends_by_default(source, chosen):
            mode = "append"
        return original_save(self, path, format, mode, partitionBy, **options)

    cls.format, cls.mode, cls.save = format, mode, save
    setattr(cls, _PATCHED, True)


def _appends_by_default(source: str | None, mode: str | None) -> bool:
    """Whether a write to ``source`` in ``mode`` (None: Spark's default) should append."""
    if source is None or source.strip().lower() != SOURCE_NAME:
        return False
    return mode is None or mode.strip().lower() in _APPENDING_MODES
