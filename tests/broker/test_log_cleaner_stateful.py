"""A stateful property test of the log cleaner: random keyed records, tombstones, transactions
ended by COMMIT or ABORT markers, segment rolls, cleanings as time passes, restarts (clean
and after a crash) and cleanings killed at each step of a segment swap, against a model of
what was written.

After every step: every key's latest committed record is readable at its original offset;
every record read is one that was written at that offset; offsets only grow. After a
cleaning, below where it ended, nothing is served that Kafka's cleaner would have removed: a
record some later committed record of its key supersedes, or a record of an aborted
transaction.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kayak.broker.log import PartitionLog
from kayak.broker.log.cleaner import swap
from kayak.broker.log.cleaner.offset_map import SLOT_SIZE
from tests.broker.log_cleaner_support import (
    Read,
    assert_verified,
    compact_config,
    inline_cleaner,
    keyed,
    read_all,
)

KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])
VALUES = st.one_of(st.none(), st.binary(min_size=1, max_size=40))
PIDS = st.sampled_from([101, 102])
RETENTION_MS = 1000


class KilledHere(Exception):
    """Stands for SIGKILL at a step of a swap."""


class CleanerMachine(RuleBasedStateMachine):
    """The model: what was written at each offset, and what is committed."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kayak-cleaner-"))
        self.directory = self.tmp / "t-0"
        self.config = compact_config(**{"delete.retention.ms": RETENTION_MS,
                                        "segment.bytes": 1024})  # fmt: skip
        self.plog = PartitionLog.open(self.directory, self.config)
        self.now = int(time.time() * 1000)
        self.written: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> (key, value)
        self.latest: dict[bytes, int] = {}  # key -> offset of its latest committed record
        self.aborted: set[int] = set()  # offsets of aborted records
        self.open_txns: dict[int, list[int]] = {}  # pid -> offsets written in its transaction
        self.sequences: dict[int, int] = {}
        self.cleaner = inline_cleaner()

    @initialize(dedupe_slots=st.sampled_from([3, 8, 1000]))
    def choose_map(self, dedupe_slots: int) -> None:
        self.cleaner = inline_cleaner(dedupe_bytes=dedupe_slots * SLOT_SIZE)

    def teardown(self) -> None:
        try:
            if self.plog.offline is None:
                assert_verified(self.directory)
            self.plog.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- writing --------------------------------------------------------------------------------

    @rule(pairs=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=4))
    def produce(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        result = self.plog.append(keyed(pairs, timestamp=self.now))
        for i, (key, value) in enumerate(pairs):
            self.written[result.base_offset + i] = (key, value)
            self.latest[key] = result.base_offset + i

    @rule(pid=PIDS, pairs=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3))
    def produce_in_transaction(self, pid: int, pairs: list[tuple[bytes, bytes | None]]) -> None:
        sequence = self.sequences.get(pid, 0)
        result = self.plog.append(keyed(pairs, timestamp=self.now, producer_id=pid,
                                        producer_epoch=0, base_sequence=sequence,
                                        is_transactional=True))  # fmt: skip
        self.sequences[pid] = sequence + len(pairs)
        offsets = self.open_txns.setdefault(pid, [])
        for i, pair in enumerate(pairs):
            self.written[result.base_offset + i] = pair
            offsets.append(result.base_offset + i)

    @precondition(lambda self: bool(self.open_txns))
    @rule(data=st.data(), commit=st.booleans())
    def end_transaction(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.open_txns)))
        self.plog.append_marker(pid, 0, commit=commit, coordinator_epoch=0)
        for offset in self.open_txns.pop(pid):
            key = self.written[offset][0]
            if not commit:
                self.aborted.add(offset)
            elif offset > self.latest.get(key, -1):
                # Compaction goes by offsets: a later plain record of the key stays the latest.
                self.latest[key] = offset

    @rule()
    def roll(self) -> None:
        self.plog.roll()

    @rule(ms=st.sampled_from([0, 10, RETENTION_MS // 2, RETENTION_MS * 2]))
    def clean(self, ms: int) -> None:
        self.now += ms
        self.plog.roll()  # the active segment is never cleaned: seal what there is
        result = self.cleaner.clean_now(self.plog, self.now)
        if result is None:
            return
        records = read_all(self.plog)[0]
        end = min(result.end_offset, self.plog.last_stable_offset)
        for record in records:
            if record.offset >= end:
                continue
            assert record.offset not in self.aborted, f"aborted {record} served below {end}"
            later = [
                o
                for o, (k, _) in self.written.items()
                if k == record.key and record.offset < o < end and self._committed(o)
            ]
            assert not later, f"{record} is superseded by offsets {later} below {end}"  # fmt: skip

    @rule(step=st.sampled_from(swap.STEPS))
    def cleaning_killed_mid_swap(self, step: str) -> None:
        """A cleaning whose process dies at ``step`` of a swap, then a start."""
        self.plog.roll()
        self.plog.flush()

        def crash(at: str) -> None:
            if at == step:
                raise KilledHere(at)

        original, swap.crash_point = swap.crash_point, crash
        try:
            self.cleaner.clean_now(self.plog, self.now)
        except KilledHere:
            pass
        finally:
            swap.crash_point = original
        # Nothing more of this process's PartitionLog runs: a start recovers the directory.
        self.plog = PartitionLog.open(self.directory, self.config, clean_shutdown=False)
        assert self.plog.offline is None, self.plog.offline

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        if not crash:
            self.plog.close()
        else:
            self.plog.flush()  # a kill -9 keeps what reached the page cache
        self.plog = PartitionLog.open(self.directory, self.config, clean_shutdown=not crash)
        assert self.plog.offline is None, self.plog.offline

    def _committed(self, offset: int) -> bool:
        if offset in self.aborted:
            return False
        return not any(offset in offsets for offsets in self.open_txns.values())

    # -- what must hold -------------------------------------------------------------------------

    @invariant()
    def every_latest_committed_record_is_served_and_nothing_else(self) -> None:
        records = read_all(self.plog)[0]
        for record in records:
            assert self.written.get(record.offset) == (record.key, record.value), record
        served = {r.offset: r for r in records}
        for key, offset in self.latest.items():
            value = self.written[offset][1]
            if value is None:
                continue  # a tombstone may go once past its delete horizon
            assert served.get(offset) == Read(offset, key, value), (key, offset)


CleanerMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCleanerMachine = CleanerMachine.TestCase
