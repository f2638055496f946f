"""The log cleaner against real files: the offset map, the rewrite, the swap and its recovery."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kayak.broker.log import PartitionLog
from kayak.broker.log.cleaner import swap
from kayak.broker.log.cleaner.manager import read_checkpoint
from kayak.broker.log.cleaner.offset_map import SLOT_SIZE, OffsetMap
from kayak.broker.log.loader import read_sealed_segments
from kayak.protocol.records import Codec, ControlRecordType, build_record_batch
from tests.broker.log_cleaner_support import (
    DAY_MS,
    T0,
    Read,
    assert_verified,
    compact_config,
    inline_cleaner,
    keyed,
    read_all,
)

NOW = T0 + 1000


def latest(records: list[Read]) -> dict[bytes | None, Read]:
    found: dict[bytes | None, Read] = {}
    for record in records:
        found[record.key] = record
    return found


# -- the offset map -----------------------------------------------------------------------------


def test_offset_map_keeps_the_latest_offset_per_key_within_its_memory() -> None:
    offset_map = OffsetMap(100 * SLOT_SIZE)
    assert offset_map.slots == 100 and offset_map.max_entries == 90
    for offset in range(1000):
        assert offset_map.put(b"k%d" % (offset % 50), offset)
    assert offset_map.size == 50
    assert offset_map.get(b"k7") == 957
    assert offset_map.get(b"missing") == -1
    assert offset_map.latest_offset == 999


def test_offset_map_refuses_new_keys_once_full_but_updates_known_ones() -> None:
    offset_map = OffsetMap(10 * SLOT_SIZE)  # 10 slots, 9 entries at most
    for i in range(9):
        assert offset_map.put(b"k%d" % i, i)
    assert offset_map.full
    assert not offset_map.put(b"new", 100)
    assert offset_map.get(b"new") == -1
    assert offset_map.put(b"k3", 101)
    assert offset_map.get(b"k3") == 101
    offset_map.clear()
    assert offset_map.size == 0 and offset_map.get(b"k3") == -1


# -- rewriting ----------------------------------------------------------------------------------


def fill(plog: PartitionLog, rounds: int, keys: int, per_batch: int = 4) -> dict[bytes, Read]:
    """``rounds`` updates of ``keys`` keys, a segment per round; returns the latest of each."""
    expected: dict[bytes, Read] = {}
    for r in range(rounds):
        for start in range(0, keys, per_batch):
            pairs = [(b"key-%d" % k, b"v%d-%d" % (r, k)) for k in range(start, start + per_batch)]
            result = plog.append(keyed(pairs))
            for i, (k, v) in enumerate(pairs):
                expected[k] = Read(result.base_offset + i, k, v)
        plog.roll()
    return expected


def test_cleaning_keeps_each_keys_latest_record_at_its_offset(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    expected = fill(plog, rounds=5, keys=40)
    end = plog.log_end_offset
    size_before = plog.size_in_bytes
    result = inline_cleaner().clean_now(plog, NOW)
    assert result is not None and result.end_offset == plog.active.base_offset
    assert result.records_removed == 4 * 40
    records = read_all(plog)[0]
    assert latest(records) == expected and len(records) == 40
    assert plog.log_end_offset == end and plog.size_in_bytes < size_before / 3
    assert read_checkpoint(plog.directory) == result.end_offset
    assert len(plog.segments) == 2  # the sealed segments became one
    assert_verified(plog.directory)
    # and again after a restart, from the files alone
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", compact_config(), clean_shutdown=True)
    assert latest(read_all(reopened)[0]) == expected
    # a second cleaning with nothing dirty changes nothing
    assert inline_cleaner().clean_now(reopened, NOW) is not None
    assert latest(read_all(reopened)[0]) == expected
    reopened.close()


def test_removed_batches_leave_continuous_offsets_for_consumers(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    for i in range(10):
        plog.append(keyed([(b"same", b"v%d" % i)]))
    plog.append(keyed([(b"other", b"x")]))
    plog.roll()
    inline_cleaner().clean_now(plog, NOW)
    records, batches = read_all(plog)
    assert records == [Read(9, b"same", b"v9"), Read(10, b"other", b"x")]
    # offsets 0..8 are covered by one empty batch (no records): continuous from 0
    assert (batches[0].base_offset, batches[0].next_offset, batches[0].record_count) == (0, 9, 0)
    assert_verified(plog.directory)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.SNAPPY])
def test_rebuilt_batches_keep_codec_headers_timestamps_and_producer_fields(
    tmp_path: Path, codec: Codec
) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    now = int(time.time() * 1000)
    plog.append(build_record_batch(
        [b"a1", b"b1", b"c1"], keys=[b"a", b"b", b"c"],
        headers=[[("h", b"1")], None, [("h", None), ("i", b"2")]],
        timestamp=[now - 30, now - 20, now - 10], codec=codec,
        producer_id=9, producer_epoch=3, base_sequence=0,
    ))  # fmt: skip
    plog.append(keyed([(b"b", b"b2")], timestamp=now))
    plog.roll()
    inline_cleaner().clean_now(plog, now)
    batches = read_all(plog)[1]
    rebuilt = batches[0]
    assert rebuilt.compression == codec
    assert (rebuilt.base_offset, rebuilt.last_offset) == (0, 2)  # the producer's last sequence
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (9, 3, 0)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in rebuilt] == [
        (0, b"a", b"a1", now - 30, (("h", b"1"),)),
        (2, b"c", b"c1", now - 10, (("h", None), ("i", b"2"))),
    ]
    assert rebuilt.max_timestamp == now - 10
    assert_verified(plog.directory)


def test_tombstones_stay_for_delete_retention_ms_after_the_first_cleaning(
    tmp_path: Path,
) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config(**{"delete.retention.ms": DAY_MS}))
    plog.append(keyed([(b"a", b"1"), (b"b", b"1")]))
    plog.append(keyed([(b"a", None)]))
    plog.roll()
    cleaner = inline_cleaner()
    cleaner.clean_now(plog, NOW)
    records, batches = read_all(plog)
    assert records == [Read(1, b"b", b"1"), Read(2, b"a", None)]
    # KIP-534: the batch holding the tombstone carries its delete horizon; the record keeps
    # its own timestamp
    tombstone = batches[-1]
    assert tombstone.has_delete_horizon and tombstone.base_timestamp == NOW + DAY_MS
    assert [r.timestamp for r in tombstone] == [T0]
    cleaner.clean_now(plog, NOW + DAY_MS - 1)  # not yet past the horizon the first one set
    assert read_all(plog)[0] == [Read(1, b"b", b"1"), Read(2, b"a", None)]
    cleaner.clean_now(plog, NOW + DAY_MS + 1)
    assert read_all(plog)[0] == [Read(1, b"b", b"1")]
    assert_verified(plog.directory)


def test_a_full_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    expected = fill(plog, rounds=3, keys=60)
    cleaner = inline_cleaner(dedupe_bytes=25 * SLOT_SIZE)  # 22 keys per pass
    ends = []
    for _ in range(12):
        result = cleaner.clean_now(plog, NOW)
        assert result is not None
        ends.append(result.end_offset)
        records = read_all(plog)[0]
        assert latest(records) == expected  # never anything lost between passes
        if len(records) == 60:
            break
    assert len(read_all(plog)[0]) == 60, ends
    assert ends == sorted(ends) and len(set(ends)) > 2
    assert_verified(plog.directory)


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config(**{"min.compaction.lag.ms": 5000}))
    plog.append(keyed([(b"k", b"old")], timestamp=T0))
    plog.roll()
    plog.append(keyed([(b"k", b"new")], timestamp=T0 + 10_000))
    plog.roll()
    cleaner = inline_cleaner()
    cleaner.clean_now(plog, T0 + 12_000)  # the second segment is 2 s old: not cleanable
    assert read_all(plog)[0] == [Read(0, b"k", b"old"), Read(1, b"k", b"new")]
    cleaner.clean_now(plog, T0 + 16_000)
    assert read_all(plog)[0] == [Read(1, b"k", b"new")]


def test_nothing_at_or_past_the_active_segment_is_cleaned(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    plog.append(keyed([(b"k", b"1")]))
    plog.append(keyed([(b"k", b"2")]))
    assert inline_cleaner().clean_now(plog, NOW) is None  # nothing sealed
    assert len(read_all(plog)[0]) == 2


def test_a_quiet_active_segment_rolls_after_segment_ms(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config(**{"segment.ms": 1000}))
    plog.append(keyed([(b"k", b"1")]))
    plog.append(keyed([(b"k", b"2")]))
    assert not plog.roll_if_quiet(1000)
    plog.active.created_at -= 2
    assert inline_cleaner().roll_if_quiet(plog)
    inline_cleaner().clean_now(plog, NOW)
    assert read_all(plog)[0] == [Read(1, b"k", b"2")]


# -- transactions -------------------------------------------------------------------------------


def txn(plog: PartitionLog, pid: int, seq: int, pairs: list[tuple[bytes, bytes | None]]) -> None:
    plog.append(keyed(pairs, producer_id=pid, producer_epoch=0, base_sequence=seq,
                      is_transactional=True))  # fmt: skip


def test_aborted_transactions_go_and_their_markers_after_the_horizon(tmp_path: Path) -> None:
    config = compact_config(**{"delete.retention.ms": 1000})
    plog = PartitionLog.open(tmp_path / "t-0", config)
    plog.append(keyed([(b"a", b"plain")]))
    txn(plog, 7, 0, [(b"a", b"aborted"), (b"b", b"aborted")])
    plog.append_marker(7, 0, commit=False, coordinator_epoch=0)
    txn(plog, 8, 0, [(b"c", b"committed")])
    plog.append_marker(8, 0, commit=True, coordinator_epoch=0)
    plog.append(keyed([(b"z", b"after")]))
    plog.roll()
    cleaner = inline_cleaner()
    cleaner.clean_now(plog, NOW)
    records, batches = read_all(plog)
    assert records == [Read(0, b"a", b"plain"), Read(4, b"c", b"committed"),
                       Read(6, b"z", b"after")]  # fmt: skip
    markers = [b for b in batches if b.is_control and b.record_count]
    assert [b.control_type for b in markers] == [ControlRecordType.ABORT, ControlRecordType.COMMIT]
    # the cleaned segment's aborted-transactions index is its sources' (read_committed needs it)
    assert [(t.producer_id, t.first_offset) for t in plog.aborted_transactions(0, 7)] == [(7, 1)]
    assert (plog.directory / "00000000000000000000.txnindex").exists()
    # the abort marker's transaction has no data left: it goes after delete.retention.ms;
    # the commit marker stays while its transaction has data (producer 8's last batch)
    cleaner.clean_now(plog, NOW + 500)
    cleaner.clean_now(plog, NOW + 5000)
    records, batches = read_all(plog)
    assert records == [Read(0, b"a", b"plain"), Read(4, b"c", b"committed"),
                       Read(6, b"z", b"after")]  # fmt: skip
    kinds = [b.control_type for b in batches if b.is_control and b.record_count]
    assert kinds == [ControlRecordType.COMMIT]
    # producer 7's marker is its last batch: kept empty, for its epoch, as Kafka keeps it
    emptied = [b for b in batches if b.is_control and not b.record_count]
    assert [(b.producer_id, b.base_offset) for b in emptied] == [(7, 3)]
    assert_verified(plog.directory)


def test_a_producers_last_batch_is_kept_empty_for_its_sequence(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    now = int(time.time() * 1000)  # a producer idle for long would have expired
    plog.append(build_record_batch([b"1", b"2"], keys=[b"k", b"k"], timestamp=now,
                                   producer_id=5, producer_epoch=0, base_sequence=0))  # fmt: skip
    plog.append(keyed([(b"k", b"3")], timestamp=now))
    plog.roll()
    inline_cleaner().clean_now(plog, now)
    records, batches = read_all(plog)
    assert records == [Read(2, b"k", b"3")]
    kept = batches[0]
    assert (kept.producer_id, kept.base_sequence, kept.record_count) == (5, 0, 0)
    assert (kept.base_offset, kept.last_offset) == (0, 1)  # its last sequence is still 1
    plog.close()
    (tmp_path / "t-0" / "producer-state.snapshot").unlink()  # rebuilt from the log alone
    reopened = PartitionLog.open(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    state = reopened.producers.get(5)
    assert state is not None and state.batches[-1].last_seq == 1
    reopened.close()


# -- fetch meanwhile, and crash safety of the swap ----------------------------------------------


def test_a_fetch_reading_an_old_segment_still_gets_its_bytes(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config())
    fill(plog, rounds=3, keys=8)
    found = plog.read(0, 1 << 20)
    assert found is not None
    before = found.read()
    inline_cleaner().clean_now(plog, NOW)
    assert not (tmp_path / "t-0" / "00000000000000000008.log").exists()
    assert found.read() == before  # the replaced file stays open for the slice


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", swap.STEPS)
def test_an_interrupted_swap_is_finished_or_undone_at_the_next_start(
    tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    expected = fill(plog, rounds=4, keys=12)
    plog.append(keyed([(b"key-1", b"tail")]))
    expected[b"key-1"] = Read(plog.log_end_offset - 1, b"key-1", b"tail")
    plog.flush()
    all_before = read_all(plog)[0]

    def crash_at(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(swap, "crash_point", crash_at)
    with pytest.raises(Crash):
        inline_cleaner().clean_now(plog, NOW)
    # the process "dies" here: nothing more of this PartitionLog runs
    names = os.listdir(directory)
    reopened = PartitionLog.open(directory, compact_config(), clean_shutdown=False)
    assert reopened.offline is None, (reopened.offline, names)
    records = read_all(reopened)[0]
    assert latest(records) == expected
    committed = swap.STEPS.index(step) >= swap.STEPS.index("log-swapped")
    assert (len(records) < len(all_before)) == committed
    assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    assert_verified(directory)
    reopened.close()


# -- the manager --------------------------------------------------------------------------------


@dataclass
class FakePartition:
    topic: str
    index: int
    log: PartitionLog


@pytest.mark.parametrize(
    "topic", ["changes", "_schemas", "__consumer_offsets", "__transaction_state"]
)
def test_due_logs_are_cleaned_internal_topics_too(tmp_path: Path, topic: str) -> None:
    # _schemas: see the registry store's doc; the other two: their modules' docs.
    plog = PartitionLog.open(tmp_path / f"{topic}-0", compact_config())
    fill(plog, rounds=3, keys=8)
    cleaned = asyncio.run(inline_cleaner().clean_due([FakePartition(topic, 0, plog)]))
    assert cleaned == 1
    assert len(read_all(plog)[0]) == 8


def test_a_log_below_the_dirty_ratio_is_not_due(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", compact_config(**{"min.cleanable.dirty.ratio": 0.9}))
    fill(plog, rounds=3, keys=8)
    cleaner = inline_cleaner()
    assert (
        asyncio.run(cleaner.clean_due([FakePartition("t", 0, plog)])) == 1
    )  # all dirty: ratio 1.0
    fill(plog, rounds=1, keys=8)  # a third of the log is dirty now: below 0.9
    assert asyncio.run(cleaner.clean_due([FakePartition("t", 0, plog)])) == 0
    assert len(read_all(plog)[0]) == 16


def test_the_sealed_segments_record_stops_vouching_for_replaced_segments_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleaned copy can have the size of the segment it replaces (an empty batch for an
    empty batch, one offset further): a start must not trust the old facts for it."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, compact_config())
    fill(plog, rounds=3, keys=8)
    sources = [s.base_offset for s in plog.segments[:-1]]
    assert set(sources) <= set(read_sealed_segments(directory))

    def crash_at(at: str) -> None:
        if at == "log-swapped":
            raise Crash(at)

    monkeypatch.setattr(swap, "crash_point", crash_at)
    with pytest.raises(Crash):
        inline_cleaner().clean_now(plog, NOW)
    assert not set(sources) & set(read_sealed_segments(directory))
