"""The replication job: change topics → Spark Structured Streaming → a target database.

Per micro-batch the driver plans one Spark stage: the change topics' new records, read with
Spark's own Kafka source (``format("kafka")``, the default) or kayak's data source
(``format("kayak")``: the same options and columns), go to
:func:`~kayak.pipeline.apply.apply_partitions` in the executors' Python workers, which decode
them, keep the latest change of every key by source position and apply those to the target,
each task its share of the keys in one transaction per table guarded by position. A key's
changes must meet in one task: they do within one change-topic partition (the capture keys its
records), and the job keeps partitions whole, or on a cluster spreads the records by table and
key first (a shuffle of raw bytes) so that every executor writes. The driver only adds up the
counts the tasks return. Spark's checkpoint holds the offsets, so a restarted query resumes
where it stopped; a replayed batch changes nothing in the target. Records that cannot be
decoded go to a dead-letter topic with the reason in their headers.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kayak.pipeline.apply import APPLY_STATS_SCHEMA, ApplySettings, apply_partitions
from kayak.pipeline.latency import LatencyHistogram
from kayak.pipeline.spark_kafka import READERS, java_client_options, kafka_source_options
from kayak.pipeline.transient import RetryPolicy

__all__ = ["ReplicationJob", "ReplicationSettings", "ReplicationStats"]

log = logging.getLogger(__name__)


@dataclass
class ReplicationSettings:
    """What to replicate where. ``topics`` are change topics (``PREFIX.SCHEMA.TABLE``);
    ``topic_pattern`` subscribes by regex instead. ``target_url`` (``sqlite:PATH`` or a
    PostgreSQL URL) is opened by every executor that applies changes."""

    bootstrap_servers: str
    registry_url: str
    checkpoint_dir: str
    target_url: str
    topics: Sequence[str] = ()
    topic_pattern: str | None = None
    dead_letter_topic: str = "kayak.dead-letter"
    max_offsets_per_trigger: int | None = None
    trigger_interval: str | None = None  # e.g. "1 second"; None = next batch at once
    starting_offsets: str = "earliest"
    client_options: dict[str, str] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # of transient target failures
    registry_config: dict[str, str] = field(default_factory=dict)  # credentials, CA, ...
    input_format: str = "kayak"  # kayak's Avro events, or "debezium-json" (Debezium's topics)
    # Spark's Kafka source ("kafka": the session needs its jars, see spark_kafka) or kayak's
    # data source ("kayak"); kayak.pipeline.spark_kafka.choose_reader picks one.
    reader: str = "kafka"


@dataclass
class ReplicationStats:
    """Running totals; ``latency`` = source commit → target commit per applied change, in a
    histogram (bounded memory however long the pipeline runs)."""

    batches: int = 0
    changes: int = 0
    applied: int = 0
    dead_lettered: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # Changes applied per executor id ("driver" when tasks run in the driver, as in local[N]).
    writers: dict[str, int] = field(default_factory=dict)
    # Changes applied per table (schema.table).
    applied_by_table: dict[str, int] = field(default_factory=dict)
    # The last micro-batch that held changes: how many, how long its Spark job took (read,
    # decode, keep the latest per key, apply), and the largest source commit → target commit
    # latency among its applied changes (None: only snapshot rows, which have no commit time).
    last_batch_changes: int = 0
    last_batch_s: float = 0.0
    last_batch_behind_ms: float | None = None

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile of latency in ms (0.0 before any change was applied)."""
        return self.latency.percentile(p)


class ReplicationJob:
    """One streaming query replicating change topics into ``target``."""

    def __init__(self, spark: Any, settings: ReplicationSettings) -> None:
        if bool(settings.topics) == bool(settings.topic_pattern):
            raise ValueError("give either change topics or a topic pattern, not both or none")
        self.spark = spark
        self.settings = settings
        self.stats = ReplicationStats()
        self._apply_settings = ApplySettings(
            target_url=settings.target_url,
            registry_url=settings.registry_url,
            registry_config=tuple(sorted(settings.registry_config.items())),
            bootstrap_servers=settings.bootstrap_servers,
            dead_letter_topic=settings.dead_letter_topic,
            client_options=tuple(sorted(settings.client_options.items())),
            retry=settings.retry,
            input_format=settings.input_format,
        )
        self._lock = threading.Lock()
        self.query: Any = None
        context = spark.sparkContext
        self._local = str(context.master).startswith("local")
        self._spread_partitions = max(2, int(context.defaultParallelism))

    def start(self) -> Any:
        """Start the streaming query; returns it (``StreamingQuery``)."""
        s = self.settings
        if s.reader not in READERS:
            raise ValueError(f"unknown reader {s.reader!r}: use one of {', '.join(READERS)}")
        reader = (
            self.spark.readStream.format(s.reader)
            .option("kafka.bootstrap.servers", s.bootstrap_servers)
            .option("startingOffsets", s.starting_offsets)
        )
        if s.topic_pattern:
            reader = reader.option("subscribePattern", s.topic_pattern)
        else:
            reader = reader.option("subscribe", ",".join(s.topics))
        if s.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(s.max_offsets_per_trigger))
        # read_committed: a micro-batch ends at the last stable offset and skips aborted
        # records, so it holds whole Kafka transactions (the capture publishes one per batch
        # of whole source transactions). On kayak's broker one ListOffsets answers every
        # partition in one step, and a transaction's markers land on all its partitions in
        # one step, so no transaction straddles two micro-batches.
        client = {"isolation.level": "read_committed", **s.client_options}
        if s.reader == "kafka":
            # The Java consumer: Kafka's names only (kayak's client takes librdkafka's too).
            client = java_client_options(kafka_source_options(client))
        for name, value in client.items():
            reader = reader.option(f"kafka.{name}", value)
        records = reader.load().select("key", "value", "topic", "partition", "offset")
        writer = (
            records.writeStream.foreachBatch(self._process_batch)
            .option("checkpointLocation", s.checkpoint_dir)
            .queryName("kayak-replication")
        )
        if s.trigger_interval:
            writer = writer.trigger(processingTime=s.trigger_interval)
        self.query = writer.start()
        source = "Spark's Kafka source" if s.reader == "kafka" else "kayak's data source"
        log.info("reading %s with %s", s.topic_pattern or ", ".join(s.topics), source)
        return self.query

    def _process_batch(self, batch: Any, batch_id: int) -> None:
        started = time.monotonic()
        if self.settings.target_url.startswith("sqlite:") or self._local:
            # One task: a SQLite file takes one writer at a time (parallel tasks would only
            # queue on its lock), and in local mode the machine's cores are busy with the
            # source and its capture; one task also keeps every key's changes together.
            batch = batch.coalesce(1)
        else:
            # On a cluster: spread the records by table and key, so that each executor
            # writes its share and a key's changes meet in one task.
            batch = batch.repartition(self._spread_partitions, "topic", "key")
        apply = functools.partial(apply_partitions, settings=self._apply_settings)
        counts = batch.mapInArrow(apply, APPLY_STATS_SCHEMA).collect()
        took_s = time.monotonic() - started
        batch_latency = LatencyHistogram()
        with self._lock:
            stats = self.stats
            stats.batches += 1
            for row in counts:
                stats.changes += row["changes"]
                stats.applied += row["applied"]
                stats.dead_lettered += row["dead_lettered"]
                batch_latency.merge({int(k): v for k, v in json.loads(row["latency"]).items()})
                if row["applied"]:
                    executor = row["executor"]
                    stats.writers[executor] = stats.writers.get(executor, 0) + row["applied"]
                for table, applied in json.loads(row["tables"]).items():
                    stats.applied_by_table[table] = stats.applied_by_table.get(table, 0) + applied
            stats.latency.merge(batch_latency)
            in_batch = sum(row["changes"] + row["dead_lettered"] for row in counts)
            if in_batch:
                stats.last_batch_changes = in_batch
                stats.last_batch_s = took_s
                stats.last_batch_behind_ms = (
                    batch_latency.percentile(100) if batch_latency.total else None
                )
        log.debug("batch %d: %d tasks applied", batch_id, len(counts))

    def wait_caught_up(self) -> None:
        """Block until every record available now has been applied."""
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
