"""The replication job: change topics → Spark Structured Streaming → a target database.

Per micro-batch: Spark reads the change topics with kayak's data source, decodes the events in
its workers (:mod:`kayak.pipeline.decode`), keeps the latest change of every key by source
position (``max_by``), and the driver applies those to the target in one transaction per table,
guarded by position (:mod:`kayak.pipeline.targets`). Spark's checkpoint holds the offsets, so a
restarted query resumes where it stopped; a replayed batch changes nothing in the target.
Records that cannot be decoded go to a dead-letter topic with the reason in their headers.
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

from kayak.cdc.change import Row, TableSchema
from kayak.pipeline.decode import DECODED_SCHEMA, ChangeDecoder, decode_batches, row_from_json
from kayak.pipeline.targets import AppliedChange, Target

__all__ = ["ReplicationJob", "ReplicationSettings", "ReplicationStats"]

log = logging.getLogger(__name__)


@dataclass
class ReplicationSettings:
    """What to replicate where. ``topics`` are change topics (``PREFIX.SCHEMA.TABLE``);
    ``topic_pattern`` subscribes by regex instead."""

    bootstrap_servers: str
    registry_url: str
    checkpoint_dir: str
    topics: Sequence[str] = ()
    topic_pattern: str | None = None
    dead_letter_topic: str = "kayak.dead-letter"
    max_offsets_per_trigger: int | None = None
    trigger_interval: str | None = None  # e.g. "1 second"; None = next batch at once
    starting_offsets: str = "earliest"
    client_options: dict[str, str] = field(default_factory=dict)


@dataclass
class ReplicationStats:
    """Running totals; ``latencies_ms`` = source commit → target commit per applied change."""

    batches: int = 0
    changes: int = 0
    applied: int = 0
    dead_lettered: int = 0
    latencies_ms: list[int] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return float(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))])


class ReplicationJob:
    """One streaming query replicating change topics into ``target``."""

    def __init__(self, spark: Any, settings: ReplicationSettings, target: Target) -> None:
        if bool(settings.topics) == bool(settings.topic_pattern):
            raise ValueError("give either change topics or a topic pattern, not both or none")
        self.spark = spark
        self.settings = settings
        self.target = target
        self.stats = ReplicationStats()
        self._decoder = ChangeDecoder(settings.registry_url)
        self._ensured: set[int] = set()
        self._producer: Any = None
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

        # One Spark job per micro-batch: changes grouped by key keep only the latest (by
        # source position); an undecodable record is its own group (keyed by its offset), so
        # it comes through whole, for the dead-letter topic.
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
            .toArrow()
        )  # fmt: skip
        rows = latest.to_pylist()
        bad = [r for r in rows if r["error"] is not None]
        if bad:
            self._dead_letter(bad)
        applied = self._apply([r for r in rows if r["error"] is None])
        with self._lock:
            self.stats.batches += 1
            self.stats.changes += sum(r["n"] for r in rows) - len(bad)
            self.stats.applied += applied
        log.debug("batch %d: %d keys, %d applied", batch_id, len(rows), applied)

    def _apply(self, rows: list[dict[str, Any]]) -> int:
        by_schema: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            by_schema.setdefault(row["schema_id"], []).append(row)
        applied = 0
        for schema_id, group in sorted(by_schema.items()):
            table = self._decoder.table(schema_id)
            if schema_id not in self._ensured:
                connector = str(self._decoder.schema(schema_id).get("connector", ""))
                self.target.ensure_table(table, connector)
                self._ensured.add(schema_id)
            changes = [self._applied_change(table, r) for r in group]
            applied += self.target.apply(table, changes)
            now_ms = time.time_ns() // 1_000_000
            with self._lock:
                # Snapshot rows carry the snapshot's time, not a commit: no latency to report.
                self.stats.latencies_ms.extend(now_ms - c.ts_ms for c in changes if c.op != "r")
        return applied

    @staticmethod
    def _applied_change(table: TableSchema, row: dict[str, Any]) -> AppliedChange:
        key_values = json.loads(row["key"], object_hook=_untag_key)
        key: Row = dict(zip(table.key, key_values, strict=True))
        after = row_from_json(row["row"]) if row["row"] is not None else None
        return AppliedChange(row["op"], key, after, row["pos"], row["ts_ms"])

    def _dead_letter(self, rows: Sequence[Any]) -> None:
        from kayak.client.sync import Producer

        if self._producer is None:
            from kayak.client.sync import Admin
            from kayak.pipeline.topics import ensure_topic

            config = {"bootstrap.servers": self.settings.bootstrap_servers}
            with Admin(config) as admin:
                ensure_topic(admin, self.settings.dead_letter_topic)
            self._producer = Producer(config)
        futures = []
        for r in rows:
            log.error(
                "undecodable record %s[%d]@%d sent to dead-letter topic %s: %s",
                r["topic"], r["partition"], r["offset"], self.settings.dead_letter_topic,
                r["error"],
            )  # fmt: skip
            headers = [
                ("kayak.error", r["error"].encode()),
                ("kayak.topic", r["topic"].encode()),
                ("kayak.partition", str(r["partition"]).encode()),
                ("kayak.offset", str(r["offset"]).encode()),
            ]
            send = self._producer.send
            topic = self.settings.dead_letter_topic
            futures.append(send(topic, r["raw_value"], key=r["raw_key"], headers=headers))
        for f in futures:
            f.result()
        with self._lock:
            self.stats.dead_lettered += len(rows)

    def wait_caught_up(self) -> None:
        """Block until every record available now has been applied."""
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
        if self._producer is not None:
            self._producer.close()
            self._producer = None


def _untag_key(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$b" in obj:
        return bytes.fromhex(obj["$b"])
    return obj
