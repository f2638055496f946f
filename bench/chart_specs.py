"""What each benchmark table means as a chart: a :class:`ChartSpec` per table in :data:`CHARTS`.

A spec names the columns that label a group of bars, the series (one bar per group each: the
column holding its value, which number of the cell, its min-max column, kayak's or a peer's),
the ratio written at a bar, and README's table it recognises by its exact header. Specs are
data only: bench/chart_data.py reads a table's cells with them, bench/chart_drawing.py draws.
"""

from __future__ import annotations

from dataclasses import dataclass

# -- what a table means ----------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One bar per group: the values of the column whose header matches ``column`` (a regex).

    ``part`` picks one number of a cell holding several ("1,593 → 1,720": part 1 is after).
    In a long table (``ChartSpec.pivot``), the series' rows are those whose pivot cell
    matches ``where``. ``spread``: a "min-max" column drawn as an error bar. A series whose
    column is missing from the table is left out (peers that were not measured).
    """

    name: str
    column: str
    part: int = 0
    where: str | None = None
    spread: str | None = None
    peer: bool = False  # drawn in the peers' colours, kayak's series in blues


@dataclass(frozen=True)
class Ratio:
    """Text written at ``series``' bar: the table's ratio column when it has one, else
    ``series / versus`` computed from the two bars' values; ``template`` frames the number."""

    series: str
    template: str
    column: str | None = None
    versus: str | None = None


@dataclass(frozen=True)
class ChartSpec:
    """How one benchmark table becomes a chart."""

    name: str  # file stem: docs/bench/NAME.svg
    title: str  # what was measured
    unit: str  # the value axis' label
    labels: tuple[str, ...]  # regexes of the columns naming a group (missing ones are skipped)
    series: tuple[Series, ...]
    ratios: tuple[Ratio, ...] = ()
    # e.g. "{}, acks={}", or several: the one with as many {} as label cells found; default:
    # the cells joined by ", "
    label_format: str | tuple[str, ...] | None = None
    pivot: str | None = None  # regex of the column saying which series a row belongs to
    log: bool = False  # values spanning orders of magnitude
    times: bool = False  # cells carry time units (s, ms, µs): all shown in milliseconds
    readme_header: tuple[str, ...] | None = None  # README's table with exactly this header


# -- the benchmarks' tables ------------------------------------------------------------------

# The kayak bar's note: against Apache Kafka when the table has it, else against Tansu.
_KAYAK_TANSU = (
    Ratio("kayak", "{}x Tansu", column=r"^kayak / Tansu$", versus="Tansu"),
    Ratio("kayak", "{}x Kafka", column=r"^kayak / Kafka$", versus="Apache Kafka"),
)

CHARTS: dict[str, ChartSpec] = {
    spec.name: spec
    for spec in (
        ChartSpec(
            "record_batch", "Record batches: encode and decode, 1,000 uncompressed records",
            "records/s (higher is better)", (r"^value$", r"^(operation|op)$"),
            (Series("pure Python", r"^pure Python$"), Series("with C codec", r"^with C codec$"),
             Series("kayak", r"^kayak$"), Series("kafka-python", r"^kafka-python$", peer=True),
             Series("aiokafka", r"^aiokafka$", peer=True)),
            (Ratio("with C codec", "{}x aiokafka", column=r"^x aiokafka$"),
             Ratio("kayak", "{}x aiokafka", column=r"^x aiokafka$")),
            readme_header=("value", "operation", "pure Python", "with C codec", "x aiokafka"),
        ),
        ChartSpec(
            "broker_consume", "One consumer, one partition: 512 MiB of 1,000 B records",
            "MiB/s (higher is better; bars: medians, whiskers: runs min-max)", (r"^reader",),
            (Series("MiB/s", r"^MiB/s$", spread=r"^runs \(min.max\)$"),),
            (Ratio("MiB/s", "{} of machine limit", column=r"^of machine limit$"),),
            readme_header=("reader → broker", "MiB/s", "runs (min-max)", "of machine limit",
                           "broker CPU µs/record", "kayak / Kafka"),
        ),
        ChartSpec(
            "broker_appends", "Durable appends: 128 producers, one 2 KiB record per acks=all "
            "request", "acknowledged appends/s (higher is better)", (r"^connections$",),
            (Series("--flush group", r"^group$"), Series("--flush always", r"^always$"),
             Series("--flush never", r"^never$"),
             Series("Apache Kafka", r"^Apache Kafka$", peer=True),
             Series("Kafka, fsync per message", r"^Apache Kafka, flush every message$",
                    peer=True),
             Series("Tansu (memory)", r"^Tansu", peer=True)),
            (Ratio("--flush group", "{}x always", column=r"^group / always$"),),
            label_format="{} connections",
            readme_header=("connections", "group", "always", "never", "Apache Kafka",
                           "Apache Kafka, flush every message", "group / always", "group / Kafka",
                           "group / Kafka, flush every message",
                           "broker CPU µs / request (group, never)",
                           "Kafka broker CPU µs / request (default, flush every message)",
                           "empty server µs / request (floor)"),
        ),
        ChartSpec(
            "broker_produce", "Produce: one producer, kayak durable (--flush group) vs "
            "Apache Kafka (page cache) vs Tansu in memory", "messages/s (higher is better)",
            (r"^client$", r"^value$", r"^acks$"),
            (Series("kayak", r"^kayak.*msg/s$"),
             Series("Apache Kafka", r"^Apache Kafka.*msg/s$", peer=True),
             Series("Tansu", r"^Tansu.*msg/s$", peer=True)),
            _KAYAK_TANSU, label_format=("{}, acks={}", "{}: {}, acks={}"),
            readme_header=("client", "value", "acks", "kayak (group) msg/s", "Apache Kafka msg/s",
                           "Tansu (memory) msg/s", "kayak / Kafka", "kayak / Tansu",
                           "broker CPU µs/msg kayak / Kafka / Tansu"),
        ),
        ChartSpec(
            "broker_memory", "Resident memory: idle, and the peak under the produce load",
            "MiB (lower is better)", (r"^broker$",),
            (Series("idle", r"^resident MiB, idle$"),
             Series("under load (peak)", r"^resident MiB, under load", peer=True)),
            readme_header=("broker", "resident MiB, idle", "resident MiB, under load (peak)"),
        ),
        ChartSpec(
            "e2e_latency", "End-to-end latency p99: confluent-kafka producer → consumer, "
            "100 B, acks=all", "p99 send → receive, ms (log scale; lower is better)",
            (r"^rate", r"^linger", r"^consumer$", r"^kayak --flush$"),
            (Series("kayak", r"^(e2e )?p99 ms$", where=r"^kayak"),
             Series("Apache Kafka", r"^(e2e )?p99 ms$", where=r"^Apache Kafka", peer=True),
             Series("Tansu", r"^(e2e )?p99 ms$", where=r"^Tansu", peer=True)),
            (Ratio("kayak", "{}x Tansu", column=r"^p99 kayak / Tansu$", versus="Tansu"),
             Ratio("kayak", "{}x Kafka", column=r"^p99 kayak / Kafka$", versus="Apache Kafka")),
            label_format=("{}", "{}, linger.ms={}", "{}, linger.ms={}, {}"), pivot=r"^broker$",
            log=True,
            readme_header=("rate", "linger.ms", "kayak --flush", "broker", "p50 ms", "p99 ms",
                           "p99.9 ms", "ack p99 ms", "broker CPU", "broker CPU µs/msg", "rec/req",
                           "p99 kayak / Kafka"),
        ),
        ChartSpec(
            "topics", "Topics at scale: kayak vs Apache Kafka vs Tansu (memory)",
            "each row's unit: seconds, ms, topics/s or MiB (log scale)", (r"^measure$",),
            (Series("kayak", r"^kayak$", spread=r"^runs \(min.max\)$"),
             Series("Apache Kafka", r"^Apache Kafka$", peer=True),
             Series("Tansu (memory)", r"^Tansu", peer=True),
             Series("before issue 13", r"^before", peer=True)),
            (Ratio("kayak", "{}x Tansu", column=r"^kayak / Tansu$", versus="Tansu (memory)"),
             Ratio("kayak", "{}x Kafka", column=r"^kayak / Kafka$", versus="Apache Kafka")),
            log=True,
            readme_header=("measure", "kayak", "runs (min-max)", "Apache Kafka", "kayak / Kafka",
                           "Tansu (memory, not durable)", "kayak / Tansu"),
        ),
        ChartSpec(
            "client_produce", "Client produce: groups of 1,000 messages, acks=1 (kayak's "
            "broker: --flush never; Apache Kafka)", "messages/s (higher is better)",
            (r"^broker$", r"^(value|size)$"),
            (Series("kayak send", r"^(kayak send$|msg/s)", where=r"^kayak send$",
                    spread=r"^min-max$"),
             Series("kayak produce", r"^(kayak produce$|msg/s)", where=r"^kayak produce$",
                    spread=r"^min-max$"),
             Series("kayak send_batch", r"^(kayak send_batch$|msg/s)", where=r"^kayak send_batch$",
                    spread=r"^min-max$"),
             Series("confluent-kafka (callback)", r"^(confluent-kafka \(callback\)$|msg/s)",
                    where=r"^confluent-kafka \(callback\)$", peer=True, spread=r"^min-max$"),
             Series("confluent-kafka", r"^(confluent-kafka$|msg/s)", where=r"^confluent-kafka$",
                    peer=True, spread=r"^min-max$"),
             Series("Java producer", r"^(Java producer$|msg/s)", where=r"^Java producer$",
                    peer=True, spread=r"^min-max$"),
             Series("aiokafka", r"^(aiokafka$|msg/s)", where=r"^aiokafka$", peer=True,
                    spread=r"^min-max$"),
             Series("kafka-python", r"^(kafka-python$|msg/s)", where=r"^kafka-python$", peer=True,
                    spread=r"^min-max$")),
            (Ratio("kayak send", "{}x confluent-kafka", column=r"^vs confluent-kafka$",
                   versus="confluent-kafka"),
             Ratio("kayak produce", "{}x confluent-kafka", column=r"^vs confluent-kafka$",
                   versus="confluent-kafka"),
             Ratio("kayak send_batch", "{}x confluent-kafka", column=r"^vs confluent-kafka$",
                   versus="confluent-kafka")),
            pivot=r"^client$",
            readme_header=("broker", "size", "client", "msg/s (median)", "min-max", "MB/s",
                           "client CPU µs/msg", "broker CPU µs/msg", "vs confluent-kafka",
                           "vs Java"),
        ),
        ChartSpec(
            "client_consume", "Client consume: 256 MiB of 1 KiB values, one partition",
            "MiB/s (higher is better; whiskers: runs min-max)", (r"^reader$", r"^broker$"),
            (Series("MiB/s", r"^MiB/s$", spread=r"^spread$"),),
            (Ratio("MiB/s", "{}x confluent-kafka", column=r"^vs confluent$"),),
            label_format="{} → {}",
            readme_header=("reader", "broker", "MiB/s", "spread", "records/s",
                           "reader CPU µs/rec", "broker CPU µs/rec", "vs confluent", "vs Java"),
        ),
        ChartSpec(
            "cdc", "CDC pipeline: source → kayak → Spark local[2] → target, vs the source "
            "alone", "changes/s (higher is better)",
            (r"^source$",),
            (Series("source alone", r"^source alone changes/s$", peer=True),
             Series("pipeline", r"^pipeline changes/s$")),
            (Ratio("pipeline", "{}x source alone", column=r"^(x source alone|ratio)$"),),
            readme_header=("source", "changes", "workload rate", "source alone changes/s",
                           "capture alone changes/s", "pipeline changes/s", "ratio",
                           "pipeline / capture alone", "latency p50 ms", "latency p99 ms"),
        ),
        ChartSpec(
            "cdc_issue14", "CDC pipeline before and after one Spark stage per micro-batch",
            "pipeline changes/s (higher is better)",
            (r"^source$", r"^changes$", r"^workload rate$"),
            (Series("before (decode, shuffle, apply)", r"^pipeline changes/s, before", part=0,
                    peer=True),
             Series("after (one stage)", r"^pipeline changes/s, before", part=1)),
            (Ratio("after (one stage)", "{}x before",
                   versus="before (decode, shuffle, apply)"),),
            label_format="{}, {} changes, workload {}",
            readme_header=("source", "changes", "workload rate",
                           "source alone changes/s", "pipeline changes/s, before → after",
                           "x source alone, before → after", "latency p50, before → after",
                           "latency p99, before → after"),
        ),
        ChartSpec(
            "spark_read", "Spark reader: count(*) + sum(length(value)) over 512 MiB, local[2]",
            "MiB/s (higher is better)", (r"^source$",),
            (Series("MiB/s", r"^MiB/s$", spread=r"^MiB/s runs"),),
            (Ratio("MiB/s", "{}x format(\"kafka\") from Apache Kafka",
                   column=r"^x format\(\"kafka\"\) from Apache Kafka$"),),
            readme_header=("source", "rows/s", "MiB/s", "MiB/s runs (min-max)", "x Parquet",
                           'x format("kafka") from Apache Kafka', "Spark JVM CPU µs/record",
                           "Python workers CPU µs/record", "broker CPU µs/record"),
        ),
        ChartSpec(
            "metrics_overhead", "Metrics overhead: two brokers but for Broker(metrics=...)",
            "records/s (higher is better)", (r"^point$",),
            (Series("metrics off", r"^metrics off /s$", peer=True),
             Series("metrics on", r"^metrics on /s$")),
            (Ratio("metrics on", "{}x off", column=r"^on / off$"),),
            readme_header=("point", "metrics off /s", "metrics on /s", "on / off",
                           "broker CPU µs off / on"),
        ),
        ChartSpec(
            "broker_tls", "What TLS costs: one broker, PLAINTEXT and SSL listeners, 1,000 B "
            "values", "MiB/s (higher is better)", (r"^measure$",),
            (Series("PLAINTEXT", r"^PLAINTEXT MiB/s$", peer=True), Series("SSL", r"^SSL MiB/s$")),
            (Ratio("SSL", "{}x PLAINTEXT", column=r"^SSL / PLAINTEXT$"),),
            readme_header=("measure", "PLAINTEXT MiB/s", "SSL MiB/s", "SSL / PLAINTEXT",
                           "broker CPU s/GiB, PLAINTEXT / SSL"),
        ),
        ChartSpec(
            "transactions", "Transactional produce vs plain: one confluent-kafka producer, "
            "100 B, acks=all", "records/s (log scale; higher is better)", (r"^produce$",),
            (Series("kayak (group)", r"^records/s$", where=r"^kayak \(group\)$"),
             Series("kayak (always)", r"^records/s$", where=r"^kayak \(always\)$"),
             Series("kayak (never)", r"^records/s$", where=r"^kayak \(never\)$"),
             Series("Apache Kafka", r"^records/s$", where=r"^Apache Kafka$", peer=True)),
            (Ratio("kayak (group)", "{}x Kafka", column=r"^kayak / Kafka$"),
             Ratio("kayak (always)", "{}x Kafka", column=r"^kayak / Kafka$"),
             Ratio("kayak (never)", "{}x Kafka", column=r"^kayak / Kafka$")),
            pivot=r"^broker$", log=True,
            readme_header=("produce", "broker", "records/s", "transactions/s",
                           "transactional / plain", "kayak / Kafka", "broker CPU µs/record"),
        ),
        ChartSpec(
            "cleaner", "Log cleaner: a tailing consumer's produce → receipt p99, off and on",
            "ms (lower is better)", (r"^cleaner$",),
            (Series("kayak", r"^probe p99 ms$", where=r"^kayak$"),
             Series("Apache Kafka", r"^probe p99 ms$", where=r"^Apache Kafka$", peer=True)),
            pivot=r"^broker$",
            readme_header=("broker", "cleaner", "produce msg/s", "broker CPU µs/msg",
                           "probe p50 ms", "probe p99 ms", "cleaned up to"),
        ),
        ChartSpec(
            "cdc_capture", "Capture alone, PostgreSQL: kayak cdc run vs Debezium (Connect)",
            "changes/s (higher is better)", (r"^capture$",),
            (Series("changes/s", r"^changes/s$"),),
            (Ratio("changes/s", "{}x Debezium", column=r"^x Debezium$"),),
            readme_header=("capture", "changes/s", "x source alone", "x Debezium",
                           "capturer µs/change", "broker µs/change", "capture backends µs/change",
                           "capture total µs/change", "x source's own CPU"),
        ),
    )
}  # fmt: skip
