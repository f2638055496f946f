"""The replication job: change topics → Spark Structured Streaming → a target database.

Per micro-batch: Spark reads the change topics with kayak's data source, decodes the events in
its workers (:mod:`kayak.pipeline.decode`), keeps the latest change of every key by source
position (``max_by``, a shuffle by table and key), and its executors apply those to the target,
each task its share of the keys in one transaction per table guarded by position
(:mod:`kayak.pipeline.apply`). The driver only plans and adds up the counts the tasks return.
Spark's checkpoint holds the offsets, so a restarted query resumes where it stopped; a replayed
batch changes nothing in the target. Records that cannot be decoded go to a dead-letter topic
with the reason in their headers.
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
from kayak.pipeline.decode import DECODED_SCHEMA, decode_batches
from kayak.pipeline.latency import LatencyHistogram
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
            bootstrap_servers=settings.bootstrap_servers,
            dead_letter_topic=settings.dead_letter_topic,
            client_options=tuple(sorted(settings.client_options.items())),
            retry=settings.retry,
        )
        self._lock = threading.Lock()
        self.query: Any = None

    def start(self) -> Any:
        """Start the streaming query; returns it (``StreamingQuery``)."""
        s = self.settings
        reader = (
            self.spark.readStream.format("kayak")
            .option("kafka.bootstrap.servers", s.bootstrap_servers)
            .option("startingOffsets", s.starting_offsets)
        )
        if s.topic_pattern:
            reader = reader.option("subscribePattern", s.topic_pattern)
        else:
            reader = reader.option("subscribe", ",".join(s.topics))
        if s.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(s.max_offsets_per_trigger))
        for name, value in s.client_options.items():
            reader = reader.option(f"kafka.{name}", value)
        decoded = (
            reader.load()
            .select("key", "value", "topic", "partition", "offset")
            .mapInArrow(
                functools.partial(decode_batches, registry_url=s.registry_url), DECODED_SCHEMA
            )
        )
        writer = (
            decoded.writeStream.foreachBatch(self._process_batch)
            .option("checkpointLocation", s.checkpoint_dir)
            .queryName("kayak-replication")
        )
        if s.trigger_interval:
            writer = writer.trigger(processingTime=s.trigger_interval)
        self.query = writer.start()
        return self.query

    def _process_batch(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        started = time.monotonic()
        # One Spark job per micro-batch: changes grouped by key keep only the latest (by
        # source position); an undecodable record is its own group (keyed by its offset), so
        # it comes through whole, for the dead-letter topic. The groups' shuffle partitions
        # (by table and key) are applied by the executors; only counts come back.
        group_key = F.coalesce(
            F.col("key"), F.concat_ws("/", F.lit("!"), "topic", "partition", "offset")
        )
        latest = (
            batch.groupBy("topic", group_key.alias("group_key"))
            .agg(
                F.max_by(
                    F.struct("key", "op", "pos", "ts_ms", "schema_id", "row", "error",
                             "partition", "offset", "raw_key", "raw_value"),
                    F.coalesce("pos", F.lit("")),
                ).alias("c"),
                F.count("*").alias("n"),
            )
            .select("topic", "n", "c.*")
        )  # fmt: skip
        if self.settings.target_url.startswith("sqlite:"):
            # One file, one writer at a time: parallel tasks would only queue on its lock
            # (SQLite's busy handler sleeps in steps of up to 100 ms).
            latest = latest.coalesce(1)
        apply = functools.partial(apply_partitions, settings=self._apply_settings)
        counts = latest.mapInArrow(apply, APPLY_STATS_SCHEMA).collect()
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
