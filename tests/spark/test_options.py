"""Option parsing, offset arithmetic and the Arrow conversion, without Spark."""

from __future__ import annotations

from itertools import pairwise

import pytest

from kayak.client.consumer import ConsumerRecord
from kayak.client.types import TopicPartition
from kayak.spark.arrow import kafka_arrow_schema, records_to_batch
from kayak.spark.offsets import OffsetRange, from_json, limit_offsets, split_ranges, to_json
from kayak.spark.options import (
    EARLIEST,
    LATEST,
    KayakSparkError,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "option 'kafka.bootstrap.servers' is required"),
        ({**BASE, "assign": '{"t": [0]}'}, "got subscribe, assign"),
        ({"kafka.bootstrap.servers": "h:1"}, "got none of them"),
        ({**BASE, "startingOffsets": "{bad"}, "option 'startingOffsets' is not valid JSON"),
        ({**BASE, "startingOffsets": "soon"}, "option 'startingOffsets' must be 'earliest'"),
        ({**BASE, "startingOffsets": '{"t": {"x": 1}}'}, "partition 'x', which is not a number"),
        ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, r"t-0 has -3; expected an integer"),
        ({**BASE, "startingOffsets": "latest"}, "'latest' is not allowed for batch queries"),
        ({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, r"-2 \(earliest\), which is not allowed"),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": "0"}'}, "must map to a list"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[]"}, "must be a JSON object"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "[x"}, "not a valid regular"),
        ({**BASE, "kafka.fetch.max.bites": "1"}, "option 'kafka.fetch.max.bites'"),
        ({**BASE, "kafka.fetch.max.bytes": "-5"}, "option 'kafka.fetch.max.bytes'"),
        ({**BASE, "kafka.group.id": "g"}, "'kafka.group.id' is not supported"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "use the startingOffsets option"),
        ({**BASE, "failOnDataLoss": "maybe"}, "option 'failOnDataLoss' must be true or false"),
        ({**BASE, "minPartitions": "0"}, "option 'minPartitions' must be at least 1"),
        ({**BASE, "startingOfsets": "earliest"}, "unknown option 'startingofsets'"),
        ({**BASE, "maxOffsetsPerTrigger": "5"}, "'maxOffsetsPerTrigger' is for streaming"),
        ({**BASE, "startingTimestamp": "yesterday"}, "'startingTimestamp' must be milliseconds"),
    ],
)
def test_bad_read_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(KayakSparkError, match=message):
        parse_read_options(options, streaming=False)


def test_read_options_parsed() -> None:
    read = parse_read_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",  # Spark's option keys are case-insensitive
            "subscribe": "a, b",
            "startingOffsets": '{"a": {"0": 5, "1": -2}, "b": {"0": -1}}',
            "maxOffsetsPerTrigger": "100",
            "includeHeaders": "TRUE",
            "kafka.fetch.max.bytes": "1048576",
            "kafka.acks": "1",  # a producer property: ignored by the consumer
        },
        streaming=True,
    )
    assert read.subscribe == ("a", "b")
    assert read.starting.per_partition == {"a": {0: 5, 1: EARLIEST}, "b": {0: LATEST}}
    assert read.max_offsets_per_trigger == 100 and read.include_headers
    assert read.fail_on_data_loss is True
    config = read.consumer_config()
    assert config["fetch.max.bytes"] == "1048576" and "acks" not in config
    assert config["auto.offset.reset"] == "none"
    streaming_default = parse_read_options({**BASE}, streaming=True)
    assert streaming_default.starting.default == LATEST
    assert parse_read_options({**BASE}, streaming=False).starting.default == EARLIEST
    with pytest.raises(KayakSparkError, match="'endingOffsets' is for batch queries only"):
        parse_read_options({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_write_options() -> None:
    write = parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "t"})
    assert write.topic == "t"
    assert write.producer_config()["acks"] == "all"
    with pytest.raises(KayakSparkError, match=r"option 'kafka\.linger\.ms'"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "soon"})


def test_offsets_json_is_canonical() -> None:
    offsets = {
        TopicPartition("b", 0): 1,
        TopicPartition("a", 10): 2,
        TopicPartition("a", 2): 3,
    }
    assert list(to_json(offsets)) == ["a", "b"]
    assert list(to_json(offsets)["a"]) == ["2", "10"]
    assert from_json(to_json(offsets)) == offsets


def test_limit_offsets_proportional() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    start = {a: 0, b: 100, c: 50}
    latest = {a: 900, b: 200, c: 50}  # backlogs 900, 100, 0
    limited = limit_offsets(start, latest, 100)
    assert limited == {a: 90, b: 110, c: 50}
    assert limit_offsets(start, latest, 10_000) == latest
    # A small backlog still moves when the budget is tiny compared to a big one.
    tiny = limit_offsets({a: 0, b: 0}, {a: 1_000_000, b: 1}, 10)
    assert tiny[b] == 1 and tiny[a] == 9
    # New partitions (not in start) are read from their start like any other.
    assert (
        limit_offsets({a: 0, b: 0}, {a: 10, b: 10}, 5)[a]
        + limit_offsets({a: 0, b: 0}, {a: 10, b: 10}, 5)[b]
        == 5
    )


def test_split_ranges() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None, None) == ranges[:2]
    split = split_ranges(ranges, 10, None)
    assert len(split) >= 10
    for partition, size in ((0, 100), (1, 10)):
        parts = [r for r in split if r.partition == partition]
        assert parts[0].from_offset == 0 and parts[-1].until_offset == size
        assert all(x.until_offset == y.from_offset for x, y in pairwise(parts))
    capped = split_ranges(ranges, None, 30)
    assert max(r.size for r in capped) <= 30 and sum(r.size for r in capped) == 110


def test_records_to_batch() -> None:
    records = [
        ConsumerRecord("t", 3, 7, 1_700_000_000_123, 1, b"k", b"v", [("h", b"x")]),
        ConsumerRecord("t", 3, 9, 1_700_000_000_124, 1, None, None, []),
    ]
    batch = records_to_batch(records, "t", 3, kafka_arrow_schema(True))
    assert batch.schema == kafka_arrow_schema(True)
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [7, 9]
    assert [r["key"] for r in rows] == [b"k", None]
    assert [r["value"] for r in rows] == [b"v", None]
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {3}
    assert {r["timestampType"] for r in rows} == {1}
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}] and rows[1]["headers"] == []
