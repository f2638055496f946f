"""The broker's numbers as Prometheus metric families, built when scraped.

Nothing here runs per request: the hot path only updates plain counters (in
:class:`~kayak.broker.metrics.requests.RequestMetrics`, the storage layer's logs and group
commit, the connection tracker) and :class:`BrokerCollector` turns them into samples when
``/metrics`` is read. Every family carries a ``shard`` label (the broker's node id), so the
numbers of ``kayak broker --shards N`` stay apart when the front merges them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kayak.broker.metrics.histogram import RECORD_COUNT_BUCKETS, FastHistogram
from kayak.broker.metrics.requests import PHASES, RequestMetrics, api_name
from kayak.errors import ErrorCode

if TYPE_CHECKING:
    from kayak.broker.catalog import TopicCatalog
    from kayak.broker.connection_tracker import ConnectionTracker
    from kayak.broker.group.offsets import OffsetStore

PREFIX = "kayak"

_PHASE_METRICS = {
    "queue": ("request_queue_time_seconds", "from decoded to its handler starting"),
    "local": ("request_local_time_seconds", "in its handler, fsync and long-poll waits included"),
    "response_queue": ("response_queue_time_seconds", "from handled to its turn to be sent"),
    "response_send": ("response_send_time_seconds", "encoding and writing the response"),
    "total": ("request_total_time_seconds", "from decoded to the response written"),
}
assert tuple(_PHASE_METRICS) == PHASES


class FlushStats:
    """What the group commit reports (its :class:`~kayak.broker.log.group_commit.FlushObserver`)."""

    def __init__(self) -> None:
        self.fsync = FastHistogram()
        self.records_per_round = FastHistogram(RECORD_COUNT_BUCKETS)

    def flushed(self, durations: list[float], records: int) -> None:
        for seconds in durations:
            self.fsync.observe(seconds)
        self.records_per_round.observe(records)


class BrokerMetrics:
    """Everything one broker process measures; the server fills in what it has."""

    def __init__(self, node_id: int = 0) -> None:
        self.node_id = node_id
        self.requests = RequestMetrics()
        self.flush = FlushStats()
        self.catalog: TopicCatalog | None = None
        self.connections: ConnectionTracker | None = None
        self.offsets: OffsetStore | None = None


class BrokerCollector(Collector):
    """One broker process's families (a prometheus_client collector)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        metrics = self.metrics
        shard = str(metrics.node_id)
        yield from _request_families(metrics.requests, shard)
        yield from _flush_families(metrics.flush, shard)
        if metrics.catalog is not None:
            yield from _log_families(metrics.catalog, shard)
        if metrics.connections is not None:
            yield from _connection_families(metrics.connections, shard)
        if metrics.offsets is not None:
            yield _committed_family(metrics.offsets, shard)


def _name(suffix: str) -> str:
    return f"{PREFIX}_{suffix}"


def _gauge(suffix: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(_name(suffix), doc, labels=labels)


def _counter(suffix: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(_name(suffix), doc, labels=labels)


def _request_families(requests: RequestMetrics, shard: str) -> Iterator[Metric]:
    count = CounterMetricFamily(
        _name("requests"), "Requests answered, per API (Kafka: RequestMetrics RequestsPerSec).",
        labels=["shard", "api"],
    )  # fmt: skip
    latency = {
        phase: HistogramMetricFamily(
            _name(name),
            f"Seconds a request spent {what} (Kafka: RequestMetrics {_KAFKA_PHASE[phase]}).",
            labels=["shard", "api"],
        )
        for phase, (name, what) in _PHASE_METRICS.items()
    }
    for key, stats in requests.each_api():
        labels = [shard, api_name(key)]
        count.add_metric(labels, stats.requests)
        for phase, histogram in stats.phases():
            _add_histogram(latency[phase], labels, histogram)
    errors = CounterMetricFamily(
        _name("request_errors"),
        "Error codes in responses, per API and code; partitioned APIs count each partition "
        "(Kafka: RequestMetrics ErrorsPerSec, without error=NONE).",
        labels=["shard", "api", "error"],
    )
    for (key, code), n in sorted(requests.errors.items()):
        errors.add_metric([shard, api_name(key), _error_name(code)], n)
    yield count
    yield from latency.values()
    yield errors


_KAFKA_PHASE = {
    "queue": "RequestQueueTimeMs",
    "local": "LocalTimeMs + RemoteTimeMs",
    "response_queue": "ResponseQueueTimeMs",
    "response_send": "ResponseSendTimeMs",
    "total": "TotalTimeMs",
}


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _add_histogram(family: HistogramMetricFamily, labels: list[str], h: FastHistogram) -> None:
    family.add_metric(labels, h.cumulative(), h.sum)


def _flush_families(flush: FlushStats, shard: str) -> Iterator[Metric]:
    fsync = HistogramMetricFamily(
        _name("log_flush_time_seconds"),
        "Seconds per fdatasync of a log by the group commit "
        "(Kafka: LogFlushStats LogFlushRateAndTimeMs).",
        labels=["shard"],
    )
    _add_histogram(fsync, [shard], flush.fsync)
    per_round = HistogramMetricFamily(
        _name("group_commit_records"),
        "Records made durable by one group-commit round (one fdatasync per dirty log).",
        labels=["shard"],
    )
    _add_histogram(per_round, [shard], flush.records_per_round)
    yield fsync
    yield per_round


def _log_families(catalog: TopicCatalog, shard: str) -> Iterator[Metric]:
    per_topic = {
        "bytes_in": ("topic_bytes_in", "Bytes appended (Kafka: BrokerTopicMetrics BytesInPerSec)."),
        "records_in": ("topic_records_in",
                       "Records appended (Kafka: BrokerTopicMetrics MessagesInPerSec)."),
        "bytes_out": ("topic_bytes_out",
                      "Record bytes handed to fetches (Kafka: BrokerTopicMetrics BytesOutPerSec)."),
        "records_out": ("topic_records_out",
                        "Records (offsets) handed to fetches (Kafka has no such meter)."),
    }  # fmt: skip
    totals: dict[str, Counter[str]] = {key: Counter() for key in per_topic}
    size = _gauge(
        "log_size_bytes",
        "Bytes in the partition's segments (Kafka: Log Size).",
        ["shard", "topic", "partition"],
    )
    segments = _gauge(
        "log_segments",
        "Segments of the partition (Kafka: Log NumLogSegments).",
        ["shard", "topic", "partition"],
    )
    start = _gauge(
        "log_start_offset",
        "First offset still stored (Kafka: Log LogStartOffset).",
        ["shard", "topic", "partition"],
    )
    end = _gauge(
        "log_end_offset",
        "Offset the next record gets (Kafka: Log LogEndOffset).",
        ["shard", "topic", "partition"],
    )
    high = _gauge(
        "partition_high_watermark",
        "End of what consumers may read (the durable end when acks wait for fsync).",
        ["shard", "topic", "partition"],
    )
    partitions, offline = 0, 0
    for partition in catalog.partitions():
        plog = partition.log
        partitions += 1
        offline += plog.offline is not None
        topic = partition.topic
        totals["bytes_in"][topic] += plog.appended_bytes
        totals["records_in"][topic] += plog.appended_records
        totals["bytes_out"][topic] += plog.read_bytes
        totals["records_out"][topic] += plog.read_records
        labels = [shard, topic, str(partition.index)]
        size.add_metric(labels, plog.size_in_bytes)
        segments.add_metric(labels, len(plog.segments))
        start.add_metric(labels, plog.log_start_offset)
        end.add_metric(labels, plog.log_end_offset)
        high.add_metric(labels, plog.high_watermark)
    for key, (name, doc) in per_topic.items():
        family = CounterMetricFamily(_name(name), doc, labels=["shard", "topic"])
        for topic, value in sorted(totals[key].items()):
            family.add_metric([shard, topic], value)
        yield family
    yield from (size, segments, start, end, high)
    count = _gauge(
        "partitions",
        "Partitions this shard leads (Kafka: ReplicaManager PartitionCount).",
        ["shard"],
    )
    count.add_metric([shard], partitions)
    yield count
    down = _gauge(
        "partitions_offline",
        "Partitions offline after a storage error (Kafka: OfflinePartitionsCount).",
        ["shard"],
    )
    down.add_metric([shard], offline)
    yield down


def _connection_families(tracker: ConnectionTracker, shard: str) -> Iterator[Metric]:
    per_listener: Counter[str] = Counter(c.listener.name for c in tracker.connections)
    open_now = _gauge(
        "connections",
        "Open client connections per listener (Kafka: SocketServer connection-count).",
        ["shard", "listener"],
    )
    for listener, n in sorted(per_listener.items()):
        open_now.add_metric([shard, listener], n)
    yield open_now
    created = _counter(
        "connections_created",
        "Connections accepted (Kafka: connection-creation-total).",
        ["shard"],
    )
    created.add_metric([shard], tracker.created)
    yield created
    refused = _counter(
        "connections_refused",
        "Connections refused by max.connections or max.connections.per.ip.",
        ["shard"],
    )
    refused.add_metric([shard], tracker.refused)
    yield refused


def _committed_family(offsets: OffsetStore, shard: str) -> Metric:
    committed = GaugeMetricFamily(
        _name("consumer_group_committed_offset"),
        "A group's committed offset per partition (on the group's coordinator shard).",
        labels=["shard", "group", "topic", "partition"],
    )
    for group in sorted(offsets.groups()):
        for (topic, partition), entry in sorted(offsets.fetch_all(group).items()):
            committed.add_metric([shard, group, topic, str(partition)], entry.offset)
    return committed
