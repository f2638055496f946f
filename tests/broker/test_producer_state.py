"""ProducerStateTable and ProducerIdAllocator against real record batches and real files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import kayak.broker.log.producer_state as producer_state
from kayak.broker.log.producer_state import (
    MAX_EPOCH,
    MAX_SEQUENCE,
    BatchMetadata,
    DuplicateBatch,
    ProducerIdAllocator,
    ProducerStateFileError,
    ProducerStateTable,
    last_sequence,
    next_sequence,
)
from kayak.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceNumberError,
)
from kayak.protocol.records import (
    BatchHeader,
    ControlRecordType,
    assign_offsets,
    build_control_batch,
    build_record_batch,
    scan_batches,
    set_base_offset,
)

T0 = 1_700_000_000_000
PID = 7


def raw(count: int = 1, *, pid: int = PID, epoch: int = 0, seq: int = 0, ts: int = T0) -> bytes:
    """A produced batch as a client sends it (base offset 0)."""
    values = [b"v%d" % i for i in range(count)]
    return build_record_batch(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=ts
    )


def hdr(data: bytes) -> BatchHeader:
    (header,) = list(scan_batches(data))
    return header


class FakeLog:
    """What PartitionLog.append will do: check every batch, assign offsets, then update."""

    def __init__(self) -> None:
        self.table = ProducerStateTable()
        self.headers: list[BatchHeader] = []
        self.end = 0

    def append(self, *batches: bytes) -> list[BatchHeader]:
        buf = bytearray(b"".join(batches))
        results = self.table.check_all(list(scan_batches(buf)))
        assert results == [None] * len(batches)
        self.end = assign_offsets(buf, self.end)
        appended = list(scan_batches(buf))
        for header in appended:
            self.table.update(header)
        self.headers.extend(appended)
        return appended


def outcome(table: ProducerStateTable, header: BatchHeader) -> object:
    """check()'s answer or the class of its error, for comparing two tables."""
    try:
        return table.check(header)
    except (OutOfOrderSequenceNumberError, InvalidProducerEpochError) as exc:
        return type(exc)


# -- sequence arithmetic ---------------------------------------------------------------------


def test_sequences_wrap_after_int32_max() -> None:
    assert last_sequence(0, 0) == 0
    assert last_sequence(10, 4) == 14
    assert last_sequence(MAX_SEQUENCE - 2, 2) == MAX_SEQUENCE
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 1
    assert next_sequence(MAX_SEQUENCE) == 0
    assert next_sequence(-1) == 0
    assert next_sequence(41) == 42


# -- check and update ------------------------------------------------------------------------


def test_in_order_batches_are_accepted_and_recorded() -> None:
    log = FakeLog()
    log.append(raw(3, seq=0, ts=T0))
    log.append(raw(1, seq=3, ts=T0 + 1), raw(2, seq=4, ts=T0 + 2))
    state = log.table.get(PID)
    assert state is not None
    assert state.epoch == 0
    assert state.last_timestamp == T0 + 2
    assert state.batches == (
        BatchMetadata(0, 2, 0, 2, T0),
        BatchMetadata(3, 3, 3, 3, T0 + 1),
        BatchMetadata(4, 5, 4, 5, T0 + 2),
    )
    assert log.table.next_offset == 6
    assert log.table.check(hdr(raw(1, seq=6))) is None


def test_update_uses_the_offsets_the_broker_assigned() -> None:
    table = ProducerStateTable()
    buf = bytearray(raw(4, seq=0))
    assert table.check(hdr(buf)) is None
    set_base_offset(buf, 1000)  # as the broker does on append
    table.update(hdr(buf))
    assert table.check(hdr(raw(4, seq=0))) == DuplicateBatch(1000, 1003, T0)
    assert table.next_offset == 1004


def test_retry_of_each_of_the_last_five_batches_gets_its_original_offsets() -> None:
    log = FakeLog()
    log.append(raw(2, seq=0, ts=T0))  # will fall out of the window
    sent = [(raw(i + 1, seq=seq, ts=T0 + 10 * i), seq) for i, seq in enumerate([2, 3, 5, 8, 12])]
    appended = [log.append(data)[0] for data, _ in sent]
    before = log.table.state()
    for (data, _), header in zip(sent, appended, strict=True):
        assert log.table.check(hdr(data)) == DuplicateBatch(
            header.base_offset, header.last_offset, header.max_timestamp
        )
    assert log.table.state() == before  # a duplicate stores nothing
    # the sixth-most-recent batch is forgotten: its retry is out of order, as in Kafka
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(2, seq=0, ts=T0)))


def test_duplicate_needs_the_exact_sequence_range() -> None:
    log = FakeLog()
    log.append(raw(3, seq=0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(2, seq=0)))  # same first sequence, different last
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(2, seq=1)))


def test_gap_is_out_of_order_and_message_names_everything() -> None:
    log = FakeLog()
    log.append(raw(3, seq=0, epoch=4))
    with pytest.raises(OutOfOrderSequenceNumberError) as info:
        log.table.check(hdr(raw(1, seq=5, epoch=4)))
    message = str(info.value)
    assert f"producer {PID}" in message
    assert "epoch 4" in message
    assert "expected sequence 3" in message
    assert "received 5" in message
    assert info.value.code == 45


def test_stale_epoch_is_fenced_even_for_an_exact_retry() -> None:
    log = FakeLog()
    log.append(raw(1, epoch=2, seq=0))
    log.append(raw(1, epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpochError) as info:
        log.table.check(hdr(raw(1, epoch=2, seq=1)))
    assert info.value.code == 47
    with pytest.raises(InvalidProducerEpochError):
        log.table.check(hdr(raw(1, epoch=2, seq=0)))  # was stored, but under the old epoch


def test_new_epoch_must_start_at_sequence_zero() -> None:
    log = FakeLog()
    log.append(raw(2, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceNumberError, match="expected sequence 0"):
        log.table.check(hdr(raw(1, epoch=1, seq=2)))
    assert log.table.check(hdr(raw(1, epoch=5, seq=0))) is None  # epochs may skip
    log.append(raw(1, epoch=1, seq=0))
    state = log.table.get(PID)
    assert state is not None
    assert (state.epoch, [b.first_seq for b in state.batches]) == (1, [0])
    assert log.table.check(hdr(raw(1, epoch=1, seq=1))) is None


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    log = FakeLog()
    log.append(raw(3, seq=MAX_SEQUENCE - 2))  # unknown producer: any start is accepted
    with pytest.raises(OutOfOrderSequenceNumberError, match="expected sequence 0"):
        log.table.check(hdr(raw(1, seq=MAX_SEQUENCE)))
    log.append(raw(1, seq=0))
    log.append(raw(2, seq=1))
    # a batch that itself spans the wrap
    log2 = FakeLog()
    log2.append(raw(1, seq=MAX_SEQUENCE - 2))
    (spanning,) = log2.append(raw(4, seq=MAX_SEQUENCE - 1))
    assert log2.table.check(hdr(raw(1, seq=2))) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        log2.table.check(hdr(raw(1, seq=3)))
    assert log2.table.check(hdr(raw(4, seq=MAX_SEQUENCE - 1))) == DuplicateBatch(
        spanning.base_offset, spanning.last_offset, T0
    )


def test_non_idempotent_batches_are_not_checked_or_recorded() -> None:
    log = FakeLog()
    log.append(raw(3, seq=0))
    plain = build_record_batch([b"a", b"b"], timestamp=T0)
    assert hdr(plain).producer_id == -1
    assert log.table.check(hdr(plain)) is None
    log.append(plain, plain)
    assert list(log.table.state()) == [PID]
    assert log.table.next_offset == 7
    assert log.table.check(hdr(raw(1, seq=3))) is None  # the producer's chain is untouched


def test_unknown_producer_may_start_at_any_sequence_then_must_continue() -> None:
    # Kafka >= 2.5 (KIP-360): no state means any first sequence is accepted.
    log = FakeLog()
    assert log.table.check(hdr(raw(2, pid=99, epoch=3, seq=42))) is None
    log.append(raw(2, pid=99, epoch=3, seq=42))
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(1, pid=99, epoch=3, seq=45)))
    assert log.table.check(hdr(raw(1, pid=99, epoch=3, seq=44))) is None


def test_idempotent_batch_needs_a_valid_epoch_and_sequence() -> None:
    table = ProducerStateTable()
    with pytest.raises(InvalidRecordError, match="sequence -1"):
        table.check(hdr(raw(1, seq=-1)))
    with pytest.raises(InvalidRecordError, match="epoch -1"):
        table.check(hdr(raw(1, epoch=-1, seq=0)))


def test_check_never_changes_the_table() -> None:
    log = FakeLog()
    log.append(raw(2, seq=0))
    before, offset = log.table.state(), log.table.next_offset
    log.table.check(hdr(raw(1, seq=2)))  # accepted
    log.table.check(hdr(raw(2, seq=0)))  # duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(1, seq=9)))
    log.table.check(hdr(raw(1, pid=55, seq=3)))  # unknown producer
    assert (log.table.state(), log.table.next_offset) == (before, offset)


# -- check_all: a whole produce request --------------------------------------------------------


def test_check_all_sees_earlier_batches_of_the_request() -> None:
    log = FakeLog()
    log.append(raw(2, seq=0))
    request = [hdr(raw(2, seq=2)), hdr(raw(1, seq=4)), hdr(raw(3, pid=8, seq=0))]
    assert log.table.check_all(request) == [None, None, None]
    # the second batch alone would be out of order: only the first one makes it valid
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(request[1])


def test_check_all_with_a_bad_second_batch_raises_and_leaves_state_unchanged() -> None:
    log = FakeLog()
    log.append(raw(2, seq=0))
    before, offset = log.table.state(), log.table.next_offset
    with pytest.raises(OutOfOrderSequenceNumberError, match="expected sequence 4, received 5"):
        log.table.check_all([hdr(raw(2, seq=2)), hdr(raw(1, seq=5))])
    with pytest.raises(InvalidProducerEpochError):
        log.table.check_all([hdr(raw(1, epoch=1, seq=0)), hdr(raw(1, epoch=0, seq=2))])
    assert (log.table.state(), log.table.next_offset) == (before, offset)
    assert log.table.check(hdr(raw(2, seq=2))) is None


def test_check_all_does_not_treat_a_batch_repeated_within_the_request_as_duplicate() -> None:
    log = FakeLog()
    log.append(raw(1, seq=0))
    # Its offsets are not known yet; Kafka also looks for duplicates only in the log.
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check_all([hdr(raw(1, seq=1)), hdr(raw(1, seq=1))])


def test_check_all_reports_duplicates_per_batch() -> None:
    log = FakeLog()
    first, second = log.append(raw(1, seq=0, ts=T0), raw(2, seq=1, ts=T0 + 5))
    assert log.table.check_all([hdr(raw(1, seq=0, ts=T0)), hdr(raw(2, seq=1, ts=T0 + 5))]) == [
        DuplicateBatch(first.base_offset, first.last_offset, T0),
        DuplicateBatch(second.base_offset, second.last_offset, T0 + 5),
    ]


def test_check_all_holds_an_unknown_producer_to_its_own_first_batch() -> None:
    table = ProducerStateTable()
    assert table.check_all([hdr(raw(1, seq=10)), hdr(raw(1, seq=11))]) == [None, None]
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check_all([hdr(raw(1, seq=10)), hdr(raw(1, seq=12))])


# -- transaction markers -----------------------------------------------------------------------


def test_control_batch_moves_the_epoch_without_a_sequence() -> None:
    log = FakeLog()
    log.append(raw(3, epoch=0, seq=0))
    marker = bytearray(
        build_control_batch(ControlRecordType.ABORT, producer_id=PID, producer_epoch=1)
    )
    set_base_offset(marker, log.end)
    log.table.update(hdr(marker))
    state = log.table.get(PID)
    assert state is not None
    assert (state.epoch, state.batches) == (1, ())
    assert log.table.check(hdr(raw(1, epoch=1, seq=0))) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.table.check(hdr(raw(1, epoch=1, seq=3)))
    # a marker carries no sequence: only its epoch is checked
    same = build_control_batch(ControlRecordType.COMMIT, producer_id=PID, producer_epoch=1)
    newer = build_control_batch(ControlRecordType.COMMIT, producer_id=PID, producer_epoch=2)
    assert log.table.check_all([hdr(same), hdr(newer), hdr(raw(1, epoch=2, seq=0))]) == [
        None,
        None,
        None,
    ]
    with pytest.raises(InvalidProducerEpochError):  # the request's marker fenced epoch 1
        log.table.check_all([hdr(newer), hdr(raw(1, epoch=1, seq=0))])
    stale = build_control_batch(ControlRecordType.COMMIT, producer_id=PID, producer_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        log.table.check(hdr(stale))


# -- rebuild and snapshots ---------------------------------------------------------------------


def busy_log() -> FakeLog:
    log = FakeLog()
    ts = T0
    for epoch in (0, 1):
        for seq in range(0, 14, 2):
            for pid in (1, 2, 3):
                ts += 7
                log.append(raw(2, pid=pid, epoch=epoch, seq=seq, ts=ts))
    log.append(build_record_batch([b"plain"], timestamp=ts))
    return log


def probes(log: FakeLog) -> list[BatchHeader]:
    """Retries of everything sent, next batches, gaps, stale and new epochs."""
    found = [h._replace(base_offset=0) for h in log.headers]
    for pid in (1, 2, 3, 4):
        for epoch in (0, 1, 2):
            found += [hdr(raw(2, pid=pid, epoch=epoch, seq=seq)) for seq in (0, 14, 15)]
    return found


def test_rebuild_from_the_log_gives_the_live_answers() -> None:
    log = busy_log()
    rebuilt = ProducerStateTable()
    rebuilt.rebuild(log.headers)
    assert rebuilt.state() == log.table.state()
    assert rebuilt.next_offset == log.table.next_offset == log.end
    answers = [outcome(log.table, h) for h in probes(log)]
    assert answers == [outcome(rebuilt, h) for h in probes(log)]
    assert DuplicateBatch in {type(a) for a in answers}  # the probes exercise every path
    assert {OutOfOrderSequenceNumberError, InvalidProducerEpochError, None} <= set(answers)


def test_rebuild_skips_batches_the_table_already_has() -> None:
    log = busy_log()
    twice = ProducerStateTable()
    twice.rebuild(log.headers[:20])
    twice.rebuild(log.headers)  # overlaps the first 20
    assert twice.state() == log.table.state()
    twice.rebuild(log.headers[-4:])  # all applied already: replaying them changes nothing
    assert twice.state() == log.table.state()


def test_snapshot_load_round_trip(tmp_path: Path) -> None:
    log = busy_log()
    path = tmp_path / "producer-state.snapshot"
    log.table.snapshot(path)
    assert log.table.snapshot_offset == log.end
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    loaded = ProducerStateTable.load(path)
    assert loaded.state() == log.table.state()
    assert loaded.snapshot_offset == loaded.next_offset == log.end
    assert [outcome(loaded, h) for h in probes(log)] == [outcome(log.table, h) for h in probes(log)]


def test_load_then_replay_of_the_tail_matches_the_live_table(tmp_path: Path) -> None:
    log = busy_log()
    path = tmp_path / "producer-state.snapshot"
    log.table.snapshot(path)
    covered = len(log.headers)
    log.append(raw(2, pid=1, epoch=1, seq=14, ts=T0 + 10**6))
    log.append(raw(1, pid=9, epoch=0, seq=0, ts=T0 + 10**6 + 1))
    tail_only = ProducerStateTable.load(path)
    tail_only.rebuild(h for h in log.headers if h.base_offset >= tail_only.snapshot_offset)
    whole = ProducerStateTable.load(path)
    whole.rebuild(log.headers)  # what is already covered is skipped
    assert tail_only.state() == whole.state() == log.table.state()
    assert len(log.headers) == covered + 2
    assert 9 in whole and 9 not in ProducerStateTable.load(path)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        '{"version": 2, "offset": 0, "producers": []}',
        '{"version": 1, "offset": true, "producers": []}',
        '{"version": 1, "offset": 0}',
        '{"version": 1, "offset": 0, "producers": [{"producer_id": 1, "epoch": 0, '
        '"last_timestamp": 0, "batches": [[0, 0, 0]]}]}',
        "[1, 2]",
    ],
)
def test_unreadable_snapshot_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "producer-state.snapshot"
    path.write_text(content)
    with pytest.raises(ProducerStateFileError):
        ProducerStateTable.load(path)


def test_missing_snapshot_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ProducerStateTable.load(tmp_path / "nothing")


def test_snapshot_is_json_keeping_all_retained_batches(tmp_path: Path) -> None:
    log = FakeLog()
    for seq in range(7):
        log.append(raw(1, seq=seq))
    path = tmp_path / "s"
    log.table.snapshot(path)
    document = json.loads(path.read_text())
    assert document["offset"] == 7
    (producer,) = document["producers"]
    assert [b[0] for b in producer["batches"]] == [2, 3, 4, 5, 6]


# -- expiry ------------------------------------------------------------------------------------


def test_expire_drops_producers_idle_for_the_expiration_time() -> None:
    log = FakeLog()
    log.append(raw(1, pid=1, seq=0, ts=T0))
    log.append(raw(1, pid=2, seq=0, ts=T0 + 1000))
    exp = 60_000
    assert log.table.expire(T0 + exp - 1, exp) == []
    assert log.table.expire(T0 + 1000 + exp - 1, exp) == [1]
    assert 1 not in log.table and 2 in log.table
    assert log.table.expire(T0 + 1000 + exp, exp) == [2]  # the boundary counts, as in Kafka
    assert len(log.table) == 0
    # with its state gone, the producer is unknown again: any sequence is accepted
    assert log.table.check(hdr(raw(1, pid=1, seq=57))) is None


def test_expire_defaults_to_one_day() -> None:
    log = FakeLog()
    log.append(raw(1, seq=0, ts=T0))
    assert log.table.expire(T0 + 86_400_000 - 1) == []
    assert log.table.expire(T0 + 86_400_000) == [PID]


# -- producer ids ------------------------------------------------------------------------------


def test_allocator_hands_out_increasing_ids_and_reserves_a_block(tmp_path: Path) -> None:
    path = tmp_path / "producer-ids"
    allocator = ProducerIdAllocator(path)
    assert not path.exists()  # nothing is reserved until an id is asked for
    assert [allocator.allocate() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert path.read_text() == "1000\n"


def test_allocator_writes_once_per_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[str] = []
    real = producer_state.write_atomically

    def counting(path: Path, text: str) -> None:
        writes.append(text)
        real(path, text)

    monkeypatch.setattr(producer_state, "write_atomically", counting)
    allocator = ProducerIdAllocator(tmp_path / "ids", block_size=4)
    assert [allocator.allocate() for _ in range(10)] == list(range(10))
    assert writes == ["4\n", "8\n", "12\n"]


def test_allocator_never_repeats_an_id_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "producer-ids"
    seen: list[int] = []
    for count in (3, 0, 1000, 1, 2500, 7):
        allocator = ProducerIdAllocator(path)  # a "restart", possibly after a crash
        seen += [allocator.allocate() for _ in range(count)]
    assert seen == sorted(set(seen))
    assert seen[:4] == [0, 1, 2, 1000]  # the rest of the first block is skipped, not reused


def test_allocator_is_thread_safe(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path / "ids", block_size=7)
    results: list[list[int]] = [[] for _ in range(8)]

    def worker(out: list[int]) -> None:
        out.extend(allocator.allocate() for _ in range(300))

    threads = [threading.Thread(target=worker, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for out in results for i in out]
    assert sorted(ids) == list(range(2400))


@pytest.mark.parametrize("content", ["", "abc", "-5\n", "1.5"])
def test_allocator_refuses_an_unreadable_counter(tmp_path: Path, content: str) -> None:
    path = tmp_path / "ids"
    path.write_text(content)
    with pytest.raises(ProducerStateFileError):
        ProducerIdAllocator(path)


def test_allocator_rejects_an_empty_block(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ProducerIdAllocator(tmp_path / "ids", block_size=0)


def test_bump_epoch_increments_then_moves_to_a_new_id(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path / "ids")
    pid = allocator.allocate()
    assert allocator.bump_epoch(pid, 0) == (pid, 1)
    assert allocator.bump_epoch(pid, MAX_EPOCH - 1) == (pid, MAX_EPOCH)
    new_pid, epoch = allocator.bump_epoch(pid, MAX_EPOCH)
    assert (epoch, new_pid > pid) == (0, True)
    assert allocator.allocate() == new_pid + 1  # the new id was really allocated


def test_bump_epoch_of_an_id_never_handed_out_allocates_a_fresh_one(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path / "ids")
    assert allocator.bump_epoch(5000, 3) == (0, 0)
    assert allocator.bump_epoch(0, 3) == (0, 4)


@pytest.mark.parametrize(("pid", "epoch"), [(-1, 0), (0, -1), (0, MAX_EPOCH + 1)])
def test_bump_epoch_rejects_invalid_arguments(tmp_path: Path, pid: int, epoch: int) -> None:
    allocator = ProducerIdAllocator(tmp_path / "ids")
    allocator.allocate()
    with pytest.raises(ValueError):
        allocator.bump_epoch(pid, epoch)


# -- random interleavings against a plain model ---------------------------------------------


class Model:
    """Kafka's rules written the plain way: whole histories instead of bounded deques."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}
        # per producer, the appended batches of its current epoch: (first, last, header)
        self.batches: dict[int, list[tuple[int, int, BatchHeader]]] = {}

    def expect(self, header: BatchHeader) -> object:
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        last = (first + header.last_offset_delta) % 2**31
        if pid not in self.epochs:
            return None
        if epoch < self.epochs[pid]:
            return InvalidProducerEpochError
        if epoch > self.epochs[pid]:
            return None if first == 0 else OutOfOrderSequenceNumberError
        for f, la, h in self.batches[pid][-5:]:
            if (f, la) == (first, last):
                return DuplicateBatch(h.base_offset, h.last_offset, h.max_timestamp)
        expected = (self.batches[pid][-1][1] + 1) % 2**31 if self.batches[pid] else 0
        return None if first == expected else OutOfOrderSequenceNumberError

    def appended(self, header: BatchHeader) -> None:
        pid, epoch = header.producer_id, header.producer_epoch
        if self.epochs.get(pid) != epoch:
            self.epochs[pid], self.batches[pid] = epoch, []
        last = (header.base_sequence + header.last_offset_delta) % 2**31
        self.batches[pid].append((header.base_sequence, last, header))


actions = st.lists(
    st.tuples(
        st.sampled_from(["next", "next", "next", "retry", "retry", "gap", "bump", "stale"]),
        st.integers(1, 2),  # producer id
        st.integers(1, 8),  # records, how far back to retry, or the size of a gap
    ),
    min_size=5,
    max_size=80,
)


@settings(max_examples=100, deadline=None)
@given(actions, st.sampled_from([0, 1000, MAX_SEQUENCE - 4]))
def test_random_interleavings_follow_the_model_and_survive_restarts(
    steps: list[tuple[str, int, int]], start_seq: int
) -> None:
    log, model = FakeLog(), Model()
    epoch = dict.fromkeys((1, 2), 0)
    next_seq = dict.fromkeys((1, 2), start_seq)
    sent: dict[int, list[bytes]] = {1: [], 2: []}
    for i, (action, pid, n) in enumerate(steps):
        ts = T0 + i
        if action == "bump":
            epoch[pid] += 1
            next_seq[pid] = 0
            continue
        if action == "retry":
            if not sent[pid]:
                continue
            data = sent[pid][-min(n, len(sent[pid]))]
        elif action == "gap":
            data = raw(1, pid=pid, epoch=epoch[pid], seq=(next_seq[pid] + n) % 2**31, ts=ts)
        elif action == "stale":
            data = raw(1, pid=pid, epoch=max(epoch[pid] - 1, 0), seq=next_seq[pid], ts=ts)
        else:
            data = raw(n, pid=pid, epoch=epoch[pid], seq=next_seq[pid], ts=ts)
        header = hdr(data)
        expected = model.expect(header)
        event(f"{action}: {getattr(expected, '__name__', type(expected).__name__)}")
        assert outcome(log.table, header) == expected
        if expected is None:
            (appended,) = log.append(data)
            model.appended(appended)
            sent[pid].append(data)
            if header.producer_epoch == epoch[pid]:
                last = last_sequence(header.base_sequence, header.last_offset_delta)
                next_seq[pid] = next_sequence(last)
    rebuilt = ProducerStateTable()
    rebuilt.rebuild(log.headers)
    assert rebuilt.state() == log.table.state()
    for pid, batches in sent.items():
        for data in batches:
            assert outcome(rebuilt, hdr(data)) == outcome(log.table, hdr(data))
        assert outcome(rebuilt, hdr(raw(1, pid=pid, epoch=epoch[pid], seq=next_seq[pid]))) == (
            outcome(log.table, hdr(raw(1, pid=pid, epoch=epoch[pid], seq=next_seq[pid])))
        )
