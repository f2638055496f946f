"""What ``/metrics`` serves: this process's families, the other shards', and the lag.

``kayak broker --shards N`` runs N processes and only shard 0 has the HTTP server. Every
other shard writes its own families to ``<data dir>/metrics/shard-<id>.prom`` every
:data:`SNAPSHOT_INTERVAL_S` (the text format, replaced atomically; like node_exporter's
textfile collector), and shard 0 merges those files into its answer, each sample keeping its
``shard`` label. A shard's numbers are therefore up to that interval old;
``kayak_shard_metrics_age_seconds`` says how old, and a file older than
:data:`STALE_AFTER_S` (a shard that is down) is left out and its ``kayak_shard_up`` is 0.

Consumer lag is computed here, after the merge, because a group's committed offsets live on
its coordinator shard while each partition's high watermark lives on the shard that owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from kayak.broker.metrics.collector import BrokerCollector

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "metrics"
SNAPSHOT_INTERVAL_S = 2.0
STALE_AFTER_S = 3 * SNAPSHOT_INTERVAL_S + 5.0


def snapshot_path(data_dir: Path, node_id: int) -> Path:
    return data_dir / SNAPSHOT_DIR / f"shard-{node_id}.prom"


class ClusterCollector(Collector):
    """This shard's families, merged with the snapshots of shards ``1..shard_count-1``
    (when this is shard 0 of several), and consumer lag per group and partition."""

    def __init__(self, local: BrokerCollector, data_dir: Path, shard_count: int) -> None:
        self.local = local
        self.data_dir = data_dir
        self.shard_count = shard_count

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for family in self.local.collect():
            families[family.name] = family
        if self.shard_count > 1:
            families.update(self._merge_shards(families))
        yield from families.values()
        yield _lag(families)

    def _merge_shards(self, families: dict[str, Metric]) -> dict[str, Metric]:
        up = GaugeMetricFamily(
            "kayak_shard_up",
            "1 if the shard's metrics are current (always 1 for shard 0, which serves them).",
            labels=["shard"],
        )
        age = GaugeMetricFamily(
            "kayak_shard_metrics_age_seconds",
            "Age of the numbers shown for the shard (0 for shard 0).",
            labels=["shard"],
        )
        up.add_metric(["0"], 1)
        age.add_metric(["0"], 0)
        now = time.time()
        for node in range(1, self.shard_count):
            text, written_at = _read_snapshot(snapshot_path(self.data_dir, node))
            current = text is not None and now - written_at <= STALE_AFTER_S
            up.add_metric([str(node)], 1 if current else 0)
            if text is None:
                continue
            age.add_metric([str(node)], max(now - written_at, 0.0))
            if current:
                _merge_text(families, text, node)
        return {up.name: up, age.name: age}


def _read_snapshot(path: Path) -> tuple[str | None, float]:
    try:
        with path.open() as file:
            return file.read(), os.fstat(file.fileno()).st_mtime
    except OSError:
        return None, 0.0


def _merge_text(families: dict[str, Metric], text: str, node: int) -> None:
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError as exc:  # a torn or foreign file: one line, the rest still served
        log.warning("metrics of shard %d unreadable: %s", node, exc)
        return
    for family in parsed:
        mine = families.get(family.name)
        if mine is None:
            families[family.name] = family
        elif mine.type == family.type:
            mine.samples.extend(family.samples)


def _lag(families: dict[str, Metric]) -> Metric:
    """High watermark minus committed offset, for every committed partition whose high
    watermark is known (kafka-lag-exporter's kafka_consumergroup_group_lag)."""
    lag = GaugeMetricFamily(
        "kayak_consumer_group_lag",
        "Records a group has still to consume per partition: high watermark minus committed "
        "offset (what Burrow and kafka-lag-exporter report).",
        labels=["group", "topic", "partition"],
    )
    high: dict[tuple[str, str], float] = {}
    if (watermarks := families.get("kayak_partition_high_watermark")) is not None:
        for sample in watermarks.samples:
            high[(sample.labels["topic"], sample.labels["partition"])] = sample.value
    if (committed := families.get("kayak_consumer_group_committed_offset")) is not None:
        for sample in committed.samples:
            labels = sample.labels
            end = high.get((labels["topic"], labels["partition"]))
            if end is not None:
                lag.add_metric(
                    [labels["group"], labels["topic"], labels["partition"]],
                    max(end - sample.value, 0.0),
                )
    return lag


class SnapshotWriter:
    """A shard other than 0: its families to its snapshot file, every interval."""

    def __init__(self, local: BrokerCollector, data_dir: Path, node_id: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(local)
        self.path = snapshot_path(data_dir, node_id)
        self._task: asyncio.Task[None] | None = None

    def write(self) -> None:
        self.path.parent.mkdir(exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        # No fsync: a snapshot lost to a crash is simply replaced by the next one.
        temporary.write_bytes(generate_latest(self.registry))
        os.replace(temporary, self.path)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(OSError):
            self.path.unlink()  # stopped: shard 0 reports it down at once

    async def _run(self) -> None:
        while True:
            try:
                self.write()
            except OSError as exc:
                log.warning("cannot write this shard's metrics to %s: %s", self.path, exc)
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
