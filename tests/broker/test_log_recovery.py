"""What a restart finds: torn tails cut, corrupt tails cut, lost indexes rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

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
