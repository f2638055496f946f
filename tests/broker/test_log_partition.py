"""PartitionLog and Segment against real files: append, read, roll, truncate, retain, recover."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kayak.broker.log import LogConfig, PartitionLog
from kayak.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from kayak.protocol.records import (
    Codec,
    ControlRecordType,
    TimestampType,
    build_control_batch,
    build_record_batch,
    parse_batches,
    scan_batches,
    validate_batch,
)


def batch(values: list[bytes], timestamp: int = 1_700_000_000_000, **kw: object) -> bytes:
    return build_record_batch(values, timestamp=timestamp, **kw)  # type: ignore[arg-type]


def read_values(
    plog: PartitionLog, offset: int, max_bytes: int = 1 << 20
) -> list[tuple[int, bytes | None]]:
    found = plog.read(offset, max_bytes)
    assert found is not None
    return [(r.offset, r.value) for b in parse_batches(found.read()) for r in b]


def test_append_assigns_contiguous_offsets_and_reads_back(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    first = plog.append(batch([b"a", b"b", b"c"]))
    second = plog.append(batch([b"d"]) + batch([b"e", b"f"]))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 5)
    assert plog.log_end_offset == plog.high_watermark == 6
    assert read_values(plog, 0) == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))
    # a fetch inside a batch returns the whole batch; the client skips what it did not ask for
    assert read_values(plog, 5)[0] == (4, b"e")
    assert plog.read(6, 1000) is None
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(7, 1000)


def test_max_bytes_returns_whole_batches_and_first_one_even_if_larger(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    for i in range(5):
        plog.append(batch([bytes([i]) * 100]))
    one = len(batch([b"x" * 100]))
    found = plog.read(0, one * 2 + one // 2)
    assert found is not None and found.length == 2 * one
    tiny = plog.read(0, 10)
    assert tiny is not None and tiny.length == one  # min_one
    assert plog.read(0, 10, min_one=False) is None


def test_bad_batches_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    plog.append(batch([b"ok"]))
    size = plog.size_in_bytes
    good = bytearray(batch([b"x", b"y"]))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        plog.append(good + corrupt)  # the good first batch must not be stored either
    with pytest.raises(CorruptRecordError):
        plog.append(good[:-3])
    with pytest.raises(CorruptRecordError):
        plog.append(b"\x00" * 70)
    legacy = bytearray(good)
    legacy[16] = 1
    with pytest.raises((InvalidRecordError, CorruptRecordError)):
        plog.append(legacy)
    assert plog.size_in_bytes == size and plog.log_end_offset == 1
    assert read_values(plog, 0) == [(0, b"ok")]


def test_control_batches_from_producers_are_refused(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control"):
        plog.append(marker)
    assert plog.log_end_offset == 0 and plog.size_in_bytes == 0


def test_max_message_bytes(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(max_message_bytes=200))
    with pytest.raises(RecordTooLargeError):
        plog.append(batch([b"x" * 500]))
    assert plog.log_end_offset == 0


def test_segments_roll_by_size_and_reads_cross_them(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for i in range(20):
        plog.append(batch([b"%03d" % i * 20]))
    assert len(plog.segments) > 3
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))[0] == "00000000000000000000.log"
    for offset in (0, 7, 19):
        assert read_values(plog, offset)[0][0] == offset


def test_sparse_index_lookups_land_on_the_right_batch(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=256))
    for i in range(200):
        plog.append(batch([b"v%d" % i, b"w%d" % i]))
    assert 1 < len(plog.active.index) < 200
    for offset in (0, 1, 57, 211, 399):
        values = read_values(plog, offset, 100)
        assert values[0][0] <= offset <= values[-1][0]


def test_delete_records_moves_log_start_and_survives_restart(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, LogConfig(segment_bytes=300))
    for i in range(20):
        plog.append(batch([b"%03d" % i * 20]))
    segments_before = len(plog.segments)
    assert plog.delete_records_before(12) == 12
    assert len(plog.segments) < segments_before
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(11, 1000)
    assert read_values(plog, 12)[0][0] == 12
    plog.close()
    reopened = PartitionLog.open(directory, LogConfig(segment_bytes=300), clean_shutdown=True)
    assert reopened.log_start_offset == 12 and reopened.log_end_offset == 20
    with pytest.raises(OffsetOutOfRangeError):
        reopened.delete_records_before(21)
    assert reopened.delete_records_before(-1) == 20  # -1: up to the high watermark


def test_retention_by_bytes_and_time_keeps_an_active_segment_of_new_records(tmp_path: Path) -> None:
    now = 1_700_000_000_000
    plog = PartitionLog.open(tmp_path / "a-0", LogConfig(segment_bytes=300, retention_bytes=600))
    for i in range(20):
        plog.append(batch([b"%03d" % i * 20], timestamp=now))
    assert plog.apply_retention(now) > 0
    assert plog.size_in_bytes - plog.segments[0].size < 600
    assert plog.log_start_offset == plog.segments[0].base_offset > 0

    timed = PartitionLog.open(tmp_path / "b-0", LogConfig(segment_bytes=300, retention_ms=1000))
    for i in range(10):
        timed.append(batch([b"%03d" % i * 20], timestamp=now - 10_000))
    timed.append(batch([b"new" * 40], timestamp=now))
    timed.apply_retention(now)
    assert len(timed.segments) == 1 and timed.log_start_offset == 10
    compacted = PartitionLog.open(
        tmp_path / "c-0", LogConfig(segment_bytes=300, retention_ms=1, cleanup_policy="compact")
    )
    for i in range(5):
        compacted.append(batch([b"%03d" % i * 20], keys=[b"k"], timestamp=now - 10_000))
    assert compacted.apply_retention(now) == 0


def test_log_append_time_restamps_with_a_valid_crc(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    result = plog.append(batch([b"a", b"b"], timestamp=5), now_ms=1_234_567)
    assert result.log_append_time == 1_234_567
    found = plog.read(0, 1000)
    assert found is not None
    data = found.read()
    header = next(iter(scan_batches(data)))
    validate_batch(header, data)
    parsed = next(iter(parse_batches(data)))
    assert parsed.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in parsed] == [1_234_567, 1_234_567]


def test_offset_for_timestamp(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    for i in range(50):
        plog.append(batch([b"x"], timestamp=1000 + i * 10))
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert plog.offset_for_timestamp(1205) == (21, 1210)
    assert plog.offset_for_timestamp(99_999) is None


def test_compressed_batches_are_stored_as_received(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        plog.append(batch([b"value-%d" % i for i in range(10)], codec=codec))
    assert [v for _, v in read_values(plog, 0)] == [b"value-%d" % i for i in range(10)] * 4


def test_bad_topic_config_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        LogConfig.from_properties({"segment.bytes": "lots"})
    with pytest.raises(ConfigError, match=r"cleanup\.policy"):
        LogConfig.from_properties({"cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match=r"no\.such"):
        LogConfig.from_properties({"no.such": "1"})
    config = LogConfig.from_properties({"retention.ms": "60000", "cleanup.policy": "compact"})
    assert config.retention_ms == 60000 and not config.deletes
    assert config.to_properties()["retention.ms"] == "60000"


def test_segment_files_are_named_like_kafkas(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for _ in range(3):
        plog.append(batch([b"y" * 150]))
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000001.log" in names and "00000000000000000001.index" in names
    assert "00000000000000000001.timeindex" in names


def test_read_returns_the_largest_whole_batch_prefix_within_max_bytes(tmp_path: Path) -> None:
    import random

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    rng = random.Random(7)
    for i in range(300):
        plog.append(batch([bytes([i % 256]) * rng.randrange(1, 400)]))
    boundaries = [h.end for h in plog.active.headers()]
    starts = {h.base_offset: h.position for h in plog.active.headers()}
    for _ in range(300):
        offset = rng.randrange(0, 300)
        max_bytes = rng.randrange(1, 20_000)
        found = plog.read(offset, max_bytes)
        assert found is not None and found.position == starts[offset]
        fitting = [b for b in boundaries if found.position < b <= found.position + max_bytes]
        expected_end = max(fitting) if fitting else min(b for b in boundaries if b > found.position)
        assert found.position + found.length == expected_end


def test_an_active_segment_wholly_past_retention_ms_is_rolled_and_deleted(tmp_path: Path) -> None:
    # Kafka deletes a quiet topic's last segment once all of it is past retention.ms.
    now = 1_700_000_000_000
    plog = PartitionLog.open(tmp_path / "q-0", LogConfig(retention_ms=1000))
    for i in range(3):
        plog.append(batch([b"old %d" % i], timestamp=now - 10_000))
    plog.flush()
    assert plog.high_watermark == 3
    assert plog.apply_retention(now) == 1
    assert plog.log_start_offset == plog.log_end_offset == 3 and len(plog.segments) == 1
    assert plog.active.size == 0
    plog.append(batch([b"new"], timestamp=now))  # offsets go on
    assert plog.log_end_offset == 4
    assert plog.apply_retention(now) == 0  # a record within retention.ms keeps its segment


def test_an_active_segment_past_retention_ms_stays_while_not_all_visible(tmp_path: Path) -> None:
    now = 1_700_000_000_000
    plog = PartitionLog.open(
        tmp_path / "v-0", LogConfig(retention_ms=1000), visible_after_flush=True
    )
    plog.append(batch([b"old"], timestamp=now - 10_000))
    assert plog.high_watermark == 0  # not on disk yet: no reader has seen it, none may lose it
    assert plog.apply_retention(now) == 0 and plog.log_start_offset == 0
    plog.flush()
    assert plog.apply_retention(now) == 1
