"""What a restart finds: torn tails cut, corrupt tails cut, lost indexes rebuilt, and a log
shorter than it is known to have been (its newest segments gone or cut) kept offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.loader import LOG_END, RecordedEnd, read_log_end, write_log_end
from kayak.errors import KafkaStorageError
from kayak.protocol.records import build_record_batch, parse_batches, scan_batches


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
    plog = fill(directory, 9)
    plog.append(build_record_batch([b"value-0009"], timestamp=1009))  # never synced
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


# -- a log shorter than it is known to have been ---------------------------------------------

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=64)


def listing(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def closed_log(directory: Path, count: int = 40) -> list[Path]:
    """A cleanly closed log of several segments; its ``.log`` files."""
    fill(directory, count, SMALL).close()
    assert read_log_end(directory) == RecordedEnd(count, clean=True)
    logs = sorted(directory.glob("*.log"))
    assert len(logs) > 3
    return logs


def check_offline(directory: Path, clean: bool, found: int, expected: int) -> PartitionLog:
    """Opened offline, naming both ends, with nothing on disk changed."""
    before = listing(directory)
    plog = PartitionLog.open(directory, SMALL, clean_shutdown=clean)
    assert plog.offline is not None, f"opened online at offset {plog.log_end_offset}"
    assert f"ends at offset {found}, but reached offset {expected}" in plog.offline
    assert str(directory) in plog.offline
    with pytest.raises(KafkaStorageError, match="offline"):
        plog.append(build_record_batch([b"x"]))
    with pytest.raises(KafkaStorageError, match="offline"):
        plog.read(0, 1 << 20)
    assert plog.close() is False
    assert listing(directory) == before, "an offline start changed files"
    return plog


@pytest.mark.parametrize("clean", [True, False], ids=["clean-start", "unclean-start"])
def test_a_missing_newest_segment_keeps_the_partition_offline(tmp_path: Path, clean: bool) -> None:
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    os.unlink(logs[-1])
    plog = check_offline(directory, clean, int(logs[-1].stem), 40)
    assert f"expected {logs[-1].name}" in str(plog.offline)


@pytest.mark.parametrize("clean", [True, False], ids=["clean-start", "unclean-start"])
def test_the_last_two_segments_missing_keep_the_partition_offline(
    tmp_path: Path, clean: bool
) -> None:
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    for log in logs[-2:]:  # as a partial restore leaves them: no file of either segment
        for suffix in (".log", ".index", ".timeindex"):
            os.unlink(log.with_suffix(suffix))
    check_offline(directory, clean, int(logs[-2].stem), 40)


@pytest.mark.parametrize("clean", [True, False], ids=["clean-start", "unclean-start"])
def test_a_newest_segment_cut_mid_batch_is_not_cut_further(tmp_path: Path, clean: bool) -> None:
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    headers = list(scan_batches(logs[-1].read_bytes()))
    os.truncate(logs[-1], headers[-1].position + 20)  # inside the last batch
    plog = check_offline(directory, clean, headers[-1].base_offset, 40)
    assert f"{logs[-1].name} is cut at position {headers[-1].position}" in str(plog.offline)


@pytest.mark.parametrize("clean", [True, False], ids=["clean-start", "unclean-start"])
def test_a_newest_segment_cut_at_a_batch_boundary_is_offline(tmp_path: Path, clean: bool) -> None:
    """The worst case: what is left is a perfectly valid, shorter log."""
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    headers = list(scan_batches(logs[-1].read_bytes()))
    assert len(headers) >= 2
    os.truncate(logs[-1], headers[-1].position)
    check_offline(directory, clean, headers[-1].base_offset, 40)


def test_no_segment_file_left_is_offline(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    for log in closed_log(directory):
        os.unlink(log)
    plog = check_offline(directory, True, 0, 40)
    assert "no segment files" in str(plog.offline)


def test_a_missing_newest_index_is_rebuilt_not_a_missing_tail(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    os.unlink(logs[-1].with_suffix(".index"))
    os.unlink(logs[-1].with_suffix(".timeindex"))
    plog = PartitionLog.open(directory, SMALL, clean_shutdown=True)
    assert plog.offline is None
    assert values(plog) == [b"value-%04d" % i for i in range(40)]


def test_a_torn_tail_below_the_durable_offset_is_not_cut(tmp_path: Path) -> None:
    """After a crash the record is a lower bound: data below it had been fsynced, so a tail
    that ends before it is damage (or a cut file), not a torn write; nothing is cut."""
    directory = tmp_path / "t-0"
    plog = fill(directory, 20)  # flushed: the durable offset is recorded; no close (a crash)
    assert read_log_end(directory) == RecordedEnd(20, clean=False)
    path = active_log_file(directory)
    headers = list(scan_batches(path.read_bytes()))
    os.truncate(path, headers[15].position + 30)
    check_offline(directory, False, 15, 20)
    del plog


def test_the_record_follows_rolls_checkpoints_and_a_clean_stop(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, SMALL)
    plog.end_record.interval_s = 3600.0  # only rolls, the first checkpoint and the stop write
    plog.append(build_record_batch([b"first"]))
    plog.flush()
    assert read_log_end(directory) == RecordedEnd(1, clean=False)  # the first checkpoint
    while len(plog.segments) < 3:
        plog.append(build_record_batch([b"v" * 100]))
    sealed_end = plog.segments[-2].next_offset
    assert read_log_end(directory) == RecordedEnd(sealed_end, clean=False)  # the last roll
    plog.flush()  # within the interval: no write
    assert read_log_end(directory) == RecordedEnd(sealed_end, clean=False)
    end = plog.log_end_offset
    assert plog.close()
    assert read_log_end(directory) == RecordedEnd(end, clean=True)
    assert not list(directory.glob(f"{LOG_END}.*")), "a temp file was left behind"


def test_the_record_never_moves_back(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    fill(directory, 10).close()
    plog = PartitionLog.open(directory, LogConfig(), clean_shutdown=True)
    plog.end_record.durable(5, now=True)
    assert read_log_end(directory) == RecordedEnd(10, clean=True)
    plog.close()


def test_a_log_longer_than_its_record_opens(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    fill(directory, 10).close()
    write_log_end(directory, RecordedEnd(4, clean=True))  # an older record: nothing missing
    plog = PartitionLog.open(directory, LogConfig(), clean_shutdown=True)
    assert plog.offline is None and plog.log_end_offset == 10


@pytest.mark.parametrize("content", ["", "kayak-log-end 1\n12 clean\n", "garbage\n"])
def test_an_unreadable_or_absent_record_is_not_checked(tmp_path: Path, content: str) -> None:
    """A directory from before the record, or one a power loss left unreadable: the start
    checks what it can without it, and the next clean stop writes it again."""
    directory = tmp_path / "t-0"
    logs = closed_log(directory)
    os.unlink(logs[-1])
    if content:
        (directory / LOG_END).write_text(content)
    else:
        os.unlink(directory / LOG_END)
    plog = PartitionLog.open(directory, SMALL, clean_shutdown=True)
    assert plog.offline is None and plog.log_end_offset == int(logs[-1].stem)
    plog.close()
    assert read_log_end(directory) == RecordedEnd(int(logs[-1].stem), clean=True)
