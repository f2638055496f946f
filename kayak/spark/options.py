"""The data source's options, named as Spark's Kafka source names them, checked up front.

Spark hands a data source its options as strings (keys case-insensitive). Spark's own options
are checked when the DataFrame is defined (``load()``), so a typo fails at once with an error
naming the option, not later in an executor; ``kafka.*`` properties and what needs the
cluster (does a topic in ``assign`` exist?) are checked on first use, on the driver. (Checking
``kafka.*`` needs kayak's client, whose import would add about a second to every ``load()``.)

``kafka.*`` options are Kafka client properties: the prefix is dropped and the rest goes to
kayak's client configuration (which uses Kafka's property names). That includes security, as
Spark's Kafka source spells it: ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` (PEM, with
``kafka.ssl.truststore.type=PEM``) or ``kafka.ssl.ca.location``, ... Those files must exist
at the same path on every executor. The options are kept out of ``repr``s (they may hold
passwords). A property that none of
kayak's clients knows is an error; one only another client kind knows (``kafka.acks`` on a
reader) is ignored there, because Spark users share one option set between readers and
writers. Properties the source itself must control (``group.id``, ``auto.offset.reset``,
serializers, ...) are refused with the option to use instead.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EARLIEST",
    "LATEST",
    "KayakSparkError",
    "OffsetSpec",
    "ReadOptions",
    "TimestampSpec",
    "WriteOptions",
    "client_properties",
    "parse_read_options",
    "parse_write_options",
]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

# Spark's Kafka source refuses these for the same reasons: the source tracks offsets itself
# (checkpoint), and records are handed out as bytes.
_REFUSED = {
    "group.id": "the source reads by assignment and keeps its offsets in Spark's checkpoint; "
    "no consumer group is used",
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.commit": "nothing is committed to Kafka: offsets live in Spark's checkpoint",
    "key.deserializer": "keys are always read as binary; cast or use a UDF",
    "value.deserializer": "values are always read as binary; cast or use a UDF",
    "key.serializer": "keys are written from a binary or string 'key' column",
    "value.serializer": "values are written from a binary or string 'value' column",
    "interceptor.classes": "interceptors are not supported",
}

# Spark's option names that this source knows; anything else (not kafka.*) is an error, so a
# misspelt option cannot be silently ignored.
_READ_OPTIONS = {
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "failondataloss",
    "includeheaders",
    "minpartitions",
    "maxrecordsperpartition",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "topic",  # a writer option; tolerated so one option set serves reads and writes
    "path",
}
_WRITE_OPTIONS = {
    "kafka.bootstrap.servers",
    "topic",
    "includeheaders",
    "path",
    "checkpointlocation",
}
# Spark options of its Kafka source that this one does not implement: a clear error.
_UNSUPPORTED = {
    "maxtriggerdelay": "minOffsetsPerTrigger/maxTriggerDelay are not supported",
    "groupidprefix": "no consumer group is used",
    "kafka.group.id": _REFUSED["group.id"],
}


class KayakSparkError(ValueError):
    """A bad option or an impossible read, raised by kayak's Spark data source.

    The message names the option (or the topic, partition and offsets) concerned.
    """


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: ``earliest``/``latest`` for every partition, or per partition
    (``{topic: {partition: offset}}`` with -2 for earliest and -1 for latest)."""

    default: int | None  # EARLIEST or LATEST for every partition, or None when per partition
    per_partition: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TimestampSpec:
    """Start or stop by record timestamp (ms): one for every partition, or per partition."""

    everywhere: int | None
    per_partition: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """Everything a reader needs, checked; picklable (it travels to executors)."""

    bootstrap_servers: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: TimestampSpec | None
    ending_timestamp: TimestampSpec | None
    timestamp_strategy: str  # "error" or "latest": a timestamp no record is at or after
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    poll_timeout_ms: int
    # kafka.* properties, prefix removed; out of repr: they may hold passwords (sasl.*, ssl.*)
    client: dict[str, str] = field(repr=False)

    def consumer_config(self) -> dict[str, object]:
        """The executor consumer's configuration: assignment only, no group, no resets."""
        from kayak.client.config import CONSUMER

        config: dict[str, object] = {
            name: value for name, value in self.client.items() if name in CONSUMER
        }
        config["bootstrap.servers"] = self.bootstrap_servers
        config["enable.auto.commit"] = False
        # A missing offset must surface (failOnDataLoss decides), never silently reset.
        config["auto.offset.reset"] = "none"
        config.setdefault("max.poll.records", 10_000)
        # A task's range is data that exists, so the broker never needs to hold a fetch for
        # more; but the one fetch a consumer sends past the range's end (prefetch) is held
        # for fetch.max.wait.ms, and the next task's first fetch would queue behind it.
        config.setdefault("fetch.max.wait.ms", 10)
        # A task reads one partition from start to end: bigger fetches mean fewer round
        # trips and responses (measured ~2x the rows/s of the 1 MiB default).
        config.setdefault("max.partition.fetch.bytes", 8 * 1024 * 1024)
        return config

    def admin_config(self) -> dict[str, object]:
        """The driver's admin client configuration (common properties only)."""
        from kayak.client.config import ADMIN

        config: dict[str, object] = {
            name: value for name, value in self.client.items() if name in ADMIN
        }
        config["bootstrap.servers"] = self.bootstrap_servers
        return config

    @property
    def isolation_level(self) -> str:
        return self.client.get("isolation.level", "read_uncommitted")

    def describe_subscription(self) -> str:
        if self.subscribe is not None:
            return f"subscribe={','.join(self.subscribe)}"
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        return f"assign={json.dumps(self.assign)}"


@dataclass(frozen=True)
class WriteOptions:
    """A writer's options, checked; picklable."""

    bootstrap_servers: str
    topic: str | None
    client: dict[str, str] = field(repr=False)  # may hold passwords

    def producer_config(self) -> dict[str, object]:
        """The producer's configuration: acks=all and idempotence unless set otherwise."""
        from kayak.client.config import PRODUCER

        config: dict[str, object] = {
            name: value for name, value in self.client.items() if name in PRODUCER
        }
        config["bootstrap.servers"] = self.bootstrap_servers
        config.setdefault("acks", "all")
        return config


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options as Kafka property names; refused or unknown ones raise."""
    from kayak.client.config import ADMIN, CONSUMER, LIBRDKAFKA_ALIASES, PRODUCER

    found: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if not lowered.startswith("kafka.") or lowered == "kafka.bootstrap.servers":
            continue
        name = lowered[len("kafka.") :]
        name = LIBRDKAFKA_ALIASES.get(name, name)
        if name in _REFUSED:
            raise KayakSparkError(f"option 'kafka.{name}' is not supported: {_REFUSED[name]}")
        if name not in CONSUMER and name not in PRODUCER and name not in ADMIN:
            raise KayakSparkError(
                f"option '{key}': {name!r} is not a Kafka client property kayak's client "
                "knows (see kayak.client.config for the supported ones)"
            )
        found[name] = value
    return found


def _check_client(kind: str, config: dict[str, object]) -> None:
    """Build the client configuration once so bad values fail now, naming the option."""
    from kayak.client.config import AdminConfig, ConsumerConfig, ProducerConfig
    from kayak.errors import ConfigError

    builders: dict[str, type[ConsumerConfig | ProducerConfig | AdminConfig]] = {
        "consumer": ConsumerConfig,
        "producer": ProducerConfig,
        "admin": AdminConfig,
    }
    try:
        builders[kind].from_user(config)
    except ConfigError as exc:
        raise KayakSparkError(f"option 'kafka.{exc.name}': {exc.message}") from None


def _require_bootstrap(options: Mapping[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise KayakSparkError(
            "option 'kafka.bootstrap.servers' is required: the Kafka brokers to connect to "
            "(host:port,host:port)"
        )
    return servers


def _check_known(options: Mapping[str, str], known: set[str], what: str) -> None:
    for key in options:
        if key in _UNSUPPORTED:
            raise KayakSparkError(f"option {key!r} is not supported: {_UNSUPPORTED[key]}")
        if key.startswith("kafka.") or key in known:
            continue
        raise KayakSparkError(
            f"unknown option {key!r} for a kayak {what}; known: "
            + ", ".join(sorted(known))
            + " and kafka.* client properties"
        )


def _parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise KayakSparkError(f"option {name!r} must be true or false, not {raw!r}")


def _parse_int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KayakSparkError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise KayakSparkError(f"option {name!r} must be at least {minimum}, not {value}")
    return value


def _parse_json_object(name: str, raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KayakSparkError(f"option {name!r} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(parsed, dict):
        raise KayakSparkError(f"option {name!r} must be a JSON object, not {raw!r}")
    return parsed


def _partition_number(name: str, topic: str, key: object) -> int:
    try:
        number = int(str(key))
    except ValueError:
        raise KayakSparkError(
            f"option {name!r}: topic {topic!r} has partition {key!r}, which is not a number"
        ) from None
    if number < 0:
        raise KayakSparkError(f"option {name!r}: topic {topic!r} has partition {number} < 0")
    return number


def _per_partition_ints(name: str, raw: str, minimum: int) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` → ``{"topic": {0: 23, 1: -2}}``, checked."""
    parsed = _parse_json_object(name, raw)
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise KayakSparkError(
                f'option {name!r}: topic {topic!r} must map to {{"partition": number}}, '
                f"not {partitions!r}"
            )
        offsets: dict[int, int] = {}
        for key, value in partitions.items():
            number = _partition_number(name, topic, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise KayakSparkError(
                    f"option {name!r}: {topic}-{number} has {value!r}; expected an integer "
                    f">= {minimum}"
                )
            offsets[number] = value
        result[topic] = offsets
    return result


def _parse_offsets(
    options: Mapping[str, str], name: str, default: int, *, batch: bool, ending: bool
) -> OffsetSpec:
    raw = options.get(name.lower())
    if raw is None:
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        value = EARLIEST if text.lower() == "earliest" else LATEST
        if batch and not ending and value == LATEST:
            raise KayakSparkError(
                f"option {name!r}: 'latest' is not allowed for batch queries (it would read "
                "nothing); use a streaming query or 'earliest'/JSON offsets"
            )
        if ending and value == EARLIEST:
            raise KayakSparkError(f"option {name!r}: 'earliest' is not allowed as an end")
        return OffsetSpec(value)
    if not text.startswith("{"):
        raise KayakSparkError(
            f"option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, not {raw!r}'
        )
    per_partition = _per_partition_ints(name, text, EARLIEST)
    for topic, partitions in per_partition.items():
        for number, offset in partitions.items():
            if batch and not ending and offset == LATEST:
                raise KayakSparkError(
                    f"option {name!r}: {topic}-{number} is -1 (latest), which is not allowed "
                    "as a batch query's start"
                )
            if ending and offset == EARLIEST:
                raise KayakSparkError(
                    f"option {name!r}: {topic}-{number} is -2 (earliest), which is not allowed "
                    "as an end"
                )
    return OffsetSpec(None, per_partition)


def _parse_timestamps(
    options: Mapping[str, str], everywhere_name: str, per_partition_name: str
) -> TimestampSpec | None:
    # A timestamp for every partition takes precedence over per-partition ones, as in Spark.
    raw = options.get(everywhere_name.lower())
    if raw is not None:
        try:
            value = int(raw.strip())
        except ValueError:
            raise KayakSparkError(
                f"option {everywhere_name!r} must be milliseconds since the epoch, not {raw!r}"
            ) from None
        if value < 0:
            raise KayakSparkError(f"option {everywhere_name!r} must be >= 0, not {value}")
        return TimestampSpec(value)
    raw = options.get(per_partition_name.lower())
    if raw is not None:
        return TimestampSpec(None, _per_partition_ints(per_partition_name, raw.strip(), 0))
    return None


def _parse_subscription(
    options: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, dict[str, tuple[int, ...]] | None]:
    given = [
        name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in options
    ]
    if len(given) != 1:
        which = ", ".join(given) if given else "none of them"
        raise KayakSparkError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
            f"set to say what to read; got {which}"
        )
    if "subscribe" in options:
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise KayakSparkError("option 'subscribe' must name at least one topic")
        return topics, None, None
    if "subscribepattern" in options:
        pattern = options["subscribepattern"].strip()
        if not pattern:
            raise KayakSparkError("option 'subscribePattern' must be a regular expression")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KayakSparkError(
                f"option 'subscribePattern' is not a valid regular expression ({exc}): {pattern!r}"
            ) from None
        return None, pattern, None
    parsed = _parse_json_object("assign", options["assign"])
    assigned: dict[str, tuple[int, ...]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not partitions:
            raise KayakSparkError(
                f"option 'assign': topic {topic!r} must map to a list of partitions like "
                f'{{"{topic}": [0, 1]}}, not {partitions!r}'
            )
        assigned[topic] = tuple(sorted({_partition_number("assign", topic, p) for p in partitions}))
    if not assigned:
        raise KayakSparkError("option 'assign' must name at least one topic partition")
    return None, None, assigned


def parse_read_options(
    raw_options: Mapping[str, str], *, streaming: bool | None, check_client: bool = True
) -> ReadOptions:
    """Check a reader's options and return them parsed. ``streaming`` None (not known yet,
    at ``load()``) skips the checks that depend on batch versus streaming; without
    ``check_client`` the ``kafka.*`` properties are not checked (that needs kayak's client,
    whose import is left to the reader)."""
    options = _lower(raw_options)
    _check_known(options, _READ_OPTIONS, "reader")
    bootstrap = _require_bootstrap(options)
    subscribe, pattern, assign = _parse_subscription(options)
    client = client_properties(options) if check_client else {}
    batch = streaming is False
    if streaming and "endingoffsets" in options:
        raise KayakSparkError("option 'endingOffsets' is for batch queries only")
    if streaming and ("endingtimestamp" in options or "endingoffsetsbytimestamp" in options):
        raise KayakSparkError(
            "options 'endingTimestamp'/'endingOffsetsByTimestamp' are for batch queries only"
        )
    if batch and "maxoffsetspertrigger" in options:
        raise KayakSparkError("option 'maxOffsetsPerTrigger' is for streaming queries only")
    if "minoffsetspertrigger" in options:
        raise KayakSparkError(
            "option 'minOffsetsPerTrigger' is not supported (nor maxTriggerDelay)"
        )
    for ignored in ("fetchoffset.numretries", "fetchoffset.retryintervalms"):
        if ignored in options:
            # Accepted so Spark jobs run unchanged; kayak's admin client retries by itself
            # (retries, retry.backoff.ms: set them as kafka.* options).
            log.warning("option %r has no effect with kayak's client", ignored)
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KayakSparkError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', not "
            f"{strategy!r}"
        )
    read = ReadOptions(
        bootstrap_servers=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_parse_offsets(
            options,
            "startingOffsets",
            LATEST if streaming else EARLIEST,
            batch=batch,
            ending=False,
        ),
        ending=_parse_offsets(options, "endingOffsets", LATEST, batch=batch, ending=True),
        starting_timestamp=_parse_timestamps(
            options, "startingTimestamp", "startingOffsetsByTimestamp"
        ),
        ending_timestamp=_parse_timestamps(options, "endingTimestamp", "endingOffsetsByTimestamp"),
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_parse_int(options, "maxOffsetsPerTrigger", 1),
        fail_on_data_loss=_parse_bool(options, "failOnDataLoss", True),
        include_headers=_parse_bool(options, "includeHeaders", False),
        min_partitions=_parse_int(options, "minPartitions", 1),
        max_records_per_partition=_parse_int(options, "maxRecordsPerPartition", 1),
        poll_timeout_ms=_parse_int(options, "kafkaConsumer.pollTimeoutMs", 1) or 120_000,
        client=client,
    )
    if check_client:
        _check_client("consumer", read.consumer_config())
        _check_client("admin", read.admin_config())
    return read


def parse_write_options(raw_options: Mapping[str, str]) -> WriteOptions:
    """Check a writer's options and return them parsed."""
    options = _lower(raw_options)
    # A writer tolerates the reader's options (one option map is often shared).
    _check_known(options, _WRITE_OPTIONS | _READ_OPTIONS, "writer")
    bootstrap = _require_bootstrap(options)
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise KayakSparkError("option 'topic' must not be empty")
    write = WriteOptions(
        bootstrap_servers=bootstrap,
        topic=topic.strip() if topic else None,
        client=client_properties(options),
    )
    _check_client("producer", write.producer_config())
    return write
