"""What a restart finds: torn tails cut, corrupt tails cut, lost indexes rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kayak.broker.log import LogConfig, PartitionLog
from kayak.protocol.records import build_record_batch, parse_batches


def fill(directory: Path, count: int, config: LogConfig | None = None) -> PartitionLog:
    plog = PartitionLog.open(directory, config or LogConfig(index_interval_bytes=128))
    for i in range(count):
        plog.append(build_record_batch([b"value-%04d" % i], timestamp=1000 + i))
    plog.flush()
    return plog


def values(plog: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = plog.log_start_offset
    while (found := plog.read(offset, 1 << 20)) is not None:
        batches = list(parse_batches(found.read()))
        out += [r.value for b in batches for r in b if r.offset >= offset]
        offset = batches[-1].next_offset
    return out


def active_log_file(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


def test_torn_tail_is_cut_and_appends_continue(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    fill(directory, 30)  # no close: as after kill -9
    path = active_log_file(directory)
    size = path.stat().st_size
    with open(path, "ab") as f:  # half of a batch reached the disk
        f.write(build_record_batch([b"torn"])[:40])
    plog = PartitionLog.open(directory, LogConfig(index_interval_bytes=128))
    assert path.stat().st_size == size
    assert plog.log_end_offset == 30
    assert values(plog) == [b"value-%04d" % i for i in range(30)]
    plog.append(build_record_batch([b"after"]))
    assert values(plog)[-1] == b"after" and plog.log_end_offset == 31


def test_corrupt_last_batch_is_cut_to_the_last_valid_one(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    fill(directory, 10)
    path = active_log_file(directory)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x55  # inside the last batch's CRC-covered bytes
    path.write_bytes(data)
    plog = PartitionLog.open(directory, LogConfig(index_interval_bytes=128))
    assert plog.log_end_offset == 9
    assert values(plog) == [b"value-%04d" % i for i in range(9)]


def test_garbage_length_prefix_does_not_break_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    fill(directory, 5)
    with open(active_log_file(directory), "ab") as f:
        f.write(b"\x00" * 8 + b"\xff\xff\xff\xf0" + b"junk")  # negative batch length
    plog = PartitionLog.open(directory, LogConfig())
    assert plog.log_end_offset == 5


def test_missing_and_broken_indexes_are_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=600, index_interval_bytes=64)
    fill(directory, 40, config).close()
    indexes = sorted(directory.glob("*.index"))
    assert len(indexes) > 2
    os.unlink(indexes[0])
    indexes[1].write_bytes(indexes[1].read_bytes()[:-3])
    plog = PartitionLog.open(directory, config, clean_shutdown=True)
    assert plog.log_end_offset == 40
    assert values(plog) == [b"value-%04d" % i for i in range(40)]
    assert len(plog.segments[0].index) > 0


def test_clean_reopen_keeps_everything_without_rescanning(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=800)
    fill(directory, 50, config).close()
    plog = PartitionLog.open(directory, config, clean_shutdown=True)
    assert plog.log_end_offset == 50 and len(plog.segments) > 1
    assert plog.offset_for_timestamp(1020) == (20, 1020)
    assert values(plog) == [b"value-%04d" % i for i in range(50)]


def _varied_batches(count: int, seed: int) -> list[bytes]:
    import random

    rng = random.Random(seed)
    return [
        build_record_batch([bytes([65 + i % 26]) * rng.randint(200, 9000)], timestamp=1000 + i)
        for i in range(count)
    ]


def test_recovery_keeps_every_batch_across_read_chunks(tmp_path: Path) -> None:
    """Batches of varying size in a segment larger than the recovery chunk: none is cut.

    Regression: a batch straddling a 4 MiB chunk boundary was measured from the chunk's
    first bytes instead of its own, and recovery cut everything from there on.
    """
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, LogConfig())
    batches = _varied_batches(2300, seed=7)
    for raw in batches:
        plog.append(raw)
    plog.flush()
    size = active_log_file(directory).stat().st_size
    assert size > 2 * 4 * 1024 * 1024
    reopened = PartitionLog.open(directory, LogConfig(), clean_shutdown=False)
    assert active_log_file(directory).stat().st_size == size
    assert reopened.log_end_offset == 2300
    assert len(values(reopened)) == 2300


def test_recovery_reads_a_batch_larger_than_its_chunk(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(max_message_bytes=16 * 1024 * 1024)
    plog = PartitionLog.open(directory, config)
    big = os.urandom(6 * 1024 * 1024)
    for value in (b"small", big, b"after"):
        plog.append(build_record_batch([value]))
    with open(active_log_file(directory), "ab") as f:
        f.write(build_record_batch([big])[:-1])  # a torn copy of the big batch
    reopened = PartitionLog.open(directory, config, clean_shutdown=False)
    assert values(reopened) == [b"small", big, b"after"]


def test_damage_in_the_middle_is_not_cut_but_takes_the_partition_offline(
    tmp_path: Path,
) -> None:
    """A bad batch followed by valid ones is damage, not a torn tail: nothing is cut."""
    from kayak.errors import KafkaStorageError

    directory = tmp_path / "t-0"
    fill(directory, 20)
    path = active_log_file(directory)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's CRC-covered bytes
    path.write_bytes(data)
    plog = PartitionLog.open(directory, LogConfig(index_interval_bytes=128))
    assert plog.offline is not None and str(path) in plog.offline
    assert path.stat().st_size == len(data), "nothing may be cut"
    with pytest.raises(KafkaStorageError, match="offline"):
        plog.append(build_record_batch([b"x"]))


def test_a_missing_older_segment_is_a_gap_that_keeps_the_partition_offline(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=600, index_interval_bytes=64)
    fill(directory, 40, config).close()
    logs = sorted(directory.glob("*.log"))
    os.unlink(logs[1])
    plog = PartitionLog.open(directory, config, clean_shutdown=True)
    assert plog.offline is not None and "missing" in plog.offline


def test_reads_stop_at_the_durable_offset(tmp_path: Path) -> None:
    """With fsync-before-ack, a fetch never sees what is not on disk yet."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), visible_after_flush=True)
    plog.append(build_record_batch([b"a"]))
    plog.flush()
    plog.append(build_record_batch([b"b"]))
    assert (plog.high_watermark, plog.log_end_offset) == (1, 2)
    assert values(plog) == [b"a"]
    plog.flush()
    assert values(plog) == [b"a", b"b"]


def test_a_slice_outlives_the_deletion_of_its_segment(tmp_path: Path) -> None:
    """The descriptor of a deleted segment stays open while a fetch holds a slice of it."""
    config = LogConfig(segment_bytes=600)
    plog = fill(tmp_path / "a-0", 40, config)
    found = plog.read(0, 1 << 20)
    assert found is not None
    expected = found.read()
    plog.delete_records_before(plog.segments[-1].base_offset)
    others = [open(tmp_path / f"other-{i}", "wb") for i in range(20)]  # noqa: SIM115
    for f in others:
        f.write(b"B" * 4096)
        f.flush()
    try:
        assert found.read() == expected
    finally:
        for f in others:
            f.close()
