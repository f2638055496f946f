"""Bounded descriptors: segment files opened lazily through an LRU, slices pinning theirs,
sealed segments trusted from their record and their indexes loaded on first use."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.loader import SEALED_SEGMENTS
from kayak.broker.log.open_files import OpenFiles
from kayak.broker.log.segment import CopiedSlice, FileSlice
from kayak.errors import ConfigError, KafkaStorageError
from kayak.protocol.records import build_record_batch, parse_batches

# ~80-byte batches, so 400-byte segments hold 5 of them (LogConfig built directly:
# the 1 MiB minimum applies to what users ask for, not to tests crossing segments).
SMALL = LogConfig(segment_bytes=400, index_interval_bytes=64)
COUNT = 60


def value(i: int) -> bytes:
    return b"value-%04d" % i


def fill(directory: Path, files: OpenFiles, count: int = COUNT) -> PartitionLog:
    plog = PartitionLog.open(directory, SMALL, files=files)
    for i in range(count):
        plog.append(build_record_batch([value(i)], timestamp=1000 + i))
    plog.flush()
    return plog


def read_all(plog: PartitionLog, max_bytes: int = 1 << 20) -> list[bytes]:
    out: list[bytes] = []
    offset = plog.log_start_offset
    while (found := plog.read(offset, max_bytes)) is not None:
        batches = list(parse_batches(found.read()))
        out += [r.value for b in batches for r in b if r.offset >= offset and r.value]
        offset = batches[-1].next_offset
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_stay_within_the_cache_however_many_segments(tmp_path: Path) -> None:
    files = OpenFiles(capacity=3, pin_limit=2)
    gc.collect()  # descriptors an earlier test left to the collector close now, not mid-test
    before = open_fds()
    plog = fill(tmp_path / "t-0", files)
    assert len(plog.segments) >= 10
    assert files.open_count <= 3 and open_fds() - before <= 3
    assert read_all(plog) == [value(i) for i in range(COUNT)]
    assert read_all(plog, max_bytes=1) == [value(i) for i in range(COUNT)]  # one batch a read
    assert files.open_count <= 3 and open_fds() - before <= 3
    assert files.opened > len(plog.segments), "files were not closed and reopened"
    plog.close()
    # every segment descriptor closed (<=: the process's other descriptors may close meanwhile)
    assert files.open_count == 0 and open_fds() <= before


def test_a_reopened_file_reads_the_same_bytes(tmp_path: Path) -> None:
    files = OpenFiles(capacity=1, pin_limit=0)
    plog = fill(tmp_path / "t-0", files)
    first = plog.read(0, 1 << 20)
    assert first is not None
    expected = first.read()
    del first
    assert read_all(plog)[-1] == value(COUNT - 1)  # every other file opened meanwhile
    again = plog.read(0, 1 << 20)
    assert again is not None and again.read() == expected


def test_slices_pin_their_files_up_to_the_limit_then_copy(tmp_path: Path) -> None:
    files = OpenFiles(capacity=2, pin_limit=3)
    plog = fill(tmp_path / "t-0", files)
    starts = [s.base_offset for s in plog.segments[:-1]]
    held = [plog.read(offset, 1 << 20) for offset in starts]
    assert all(h is not None for h in held)
    pinned = [h for h in held if isinstance(h, FileSlice)]
    copied = [h for h in held if isinstance(h, CopiedSlice)]
    assert pinned and copied, (len(pinned), len(copied))
    assert files.open_count <= 2 * files.capacity + files.pin_limit
    # A pinned file outlives its eviction: other files open while the slices are held.
    assert read_all(plog) == [value(i) for i in range(COUNT)]
    for slice_, start in zip(held, starts, strict=True):
        assert slice_ is not None
        (batch, *_) = parse_batches(slice_.read())
        assert batch.base_offset == start and next(iter(batch)).value == value(start)
    del held, pinned, copied, slice_
    assert files.open_count <= files.capacity


def test_a_pinned_file_survives_deletion_and_eviction(tmp_path: Path) -> None:
    files = OpenFiles(capacity=1, pin_limit=4)
    plog = fill(tmp_path / "t-0", files)
    found = plog.read(0, 1 << 20)
    assert isinstance(found, FileSlice)
    expected = found.read()
    plog.delete_records_before(plog.segments[-1].base_offset)
    others = [tmp_path / f"other-{i}" for i in range(8)]
    for path in others:
        path.write_bytes(b"B" * 4096)
    descriptors = [os.open(path, os.O_RDONLY) for path in others]  # would take a freed number
    try:
        assert found.read() == expected
    finally:
        for fd in descriptors:
            os.close(fd)


def test_a_clean_start_opens_one_file_whatever_the_segment_count(tmp_path: Path) -> None:
    files = OpenFiles(capacity=8, pin_limit=8)
    fill(tmp_path / "t-0", files).close()
    assert (tmp_path / "t-0" / SEALED_SEGMENTS).exists()
    reopened_files = OpenFiles(capacity=8, pin_limit=8)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=reopened_files)
    assert len(plog.segments) >= 10
    assert reopened_files.opened == 1, "a sealed segment was opened at start"
    assert plog.log_end_offset == COUNT
    assert plog.offset_for_timestamp(1020) == (20, 1020)
    assert read_all(plog) == [value(i) for i in range(COUNT)]


def test_sealed_segments_not_in_the_record_are_checked_and_recorded(tmp_path: Path) -> None:
    """Data from before the record existed (or a lost record) is checked at start, once."""
    files = OpenFiles(capacity=4, pin_limit=4)
    fill(tmp_path / "t-0", files).close()
    (tmp_path / "t-0" / SEALED_SEGMENTS).unlink()
    counting = OpenFiles(capacity=4, pin_limit=4)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=counting)
    assert counting.opened == len(plog.segments)
    assert read_all(plog) == [value(i) for i in range(COUNT)]
    plog.close()
    counting = OpenFiles(capacity=4, pin_limit=4)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=counting)
    assert counting.opened == 1


def test_a_truncated_sealed_segment_keeps_the_partition_offline(tmp_path: Path) -> None:
    files = OpenFiles(capacity=4, pin_limit=4)
    fill(tmp_path / "t-0", files).close()
    older = sorted((tmp_path / "t-0").glob("*.log"))[2]
    os.truncate(older, older.stat().st_size - 7)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=files)
    assert plog.offline is not None and older.name in plog.offline


def test_a_damaged_sealed_segment_found_on_first_use_takes_the_partition_offline(
    tmp_path: Path,
) -> None:
    files = OpenFiles(capacity=4, pin_limit=4)
    fill(tmp_path / "t-0", files).close()
    older = sorted((tmp_path / "t-0").glob("*.log"))[1]
    older.with_suffix(".index").unlink()  # loaded on first use: rebuilt with a CRC scan
    data = bytearray(older.read_bytes())
    data[-3] ^= 0xFF  # the last batch's CRC-covered bytes (size unchanged)
    older.write_bytes(data)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=files)
    assert plog.offline is None  # nothing opened the segment yet
    with pytest.raises(KafkaStorageError, match=older.name):
        read_all(plog)
    assert plog.offline is not None and older.name in plog.offline


def test_evicted_sealed_indexes_are_dropped_and_load_again(tmp_path: Path) -> None:
    files = OpenFiles(capacity=1, pin_limit=0)
    plog = fill(tmp_path / "t-0", files)
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, clean_shutdown=True, files=files)
    first = plog.segments[0]
    assert read_all(plog, max_bytes=1)[:3] == [value(0), value(1), value(2)]
    assert len(first.index) == 0, "an evicted sealed segment kept its index in memory"
    found = plog.read(1, 1)
    assert found is not None and len(first.index) > 0
    assert next(iter(next(iter(parse_batches(found.read()))))).value == value(1)


def test_a_sync_without_a_pinned_file_opens_it_by_name(tmp_path: Path) -> None:
    files = OpenFiles(capacity=1, pin_limit=0)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, visible_after_flush=True, files=files)
    held = PartitionLog.open(tmp_path / "u-0", SMALL, files=files)  # takes the one slot
    held.append(build_record_batch([b"x"]))
    plog.append(build_record_batch([b"a"]))
    pinned = held.read(0, 1 << 20)  # holds u's file past its eviction: no pin may be given
    point = plog.flush_point()
    assert point is not None and point.file is None
    point.sync()
    plog.flushed(point)
    assert read_all(plog) == [b"a"] and pinned is not None


def test_segment_bytes_below_one_mib_is_refused_from_users_only() -> None:
    with pytest.raises(ConfigError, match="1048576"):
        LogConfig.from_properties({"segment.bytes": "1048575"}, from_user=True)
    assert LogConfig.from_properties({"segment.bytes": "1048576"}, from_user=True)
    # A topic stored by an older version with a tiny segment.bytes still loads.
    assert LogConfig.from_properties({"segment.bytes": "2048"}).segment_bytes == 2048
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        LogConfig.from_properties({"segment.bytes": "13"})


def test_resizing_for_a_lower_limit_lets_files_go_and_reads_stay_right(tmp_path: Path) -> None:
    files = OpenFiles.for_fd_limit(4096)
    plog = fill(tmp_path / "t-0", files)
    assert read_all(plog) == [value(i) for i in range(COUNT)]
    assert len(files) > 4  # every segment read is cached
    files.resize_for_fd_limit(32)  # the smallest budget: 16 descriptors, 4 cached
    assert (files.capacity, files.pin_limit) == (4, 8)
    assert len(files) <= 4 and files.open_count <= 4
    assert read_all(plog) == [value(i) for i in range(COUNT)]
    assert files.open_count <= 4
    plog.close()
