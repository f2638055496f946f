"""Idempotent-producer bookkeeping for one partition: sequences, duplicates, epochs, ids.

Kafka's broker keeps, per partition and producer id, the producer's epoch and the sequence
ranges and offsets of its last five appended batches (KIP-98). With them it

- answers a retried batch it already stored with the original offsets, storing nothing;
- refuses a gap or a reordering in the sequence (OUT_OF_ORDER_SEQUENCE_NUMBER, 45);
- fences a producer whose epoch went stale (INVALID_PRODUCER_EPOCH, 47).

On the produce path::

    results = table.check_all(headers)   # before writing anything; raises on the first bad batch
    ...                                  # append: the batches get their base offsets
    for header in appended_headers:
        table.update(header)

On open the table comes back from a snapshot (:meth:`ProducerStateTable.load`) plus a replay of
the batches after it (:meth:`ProducerStateTable.rebuild`), or from a replay alone.

A producer id the table has no state for (never seen here, or expired) may start at any
sequence: that is what Kafka does since 2.5 (KIP-360), so that an idempotent producer whose
state was dropped by ``producer.id.expiration.ms`` or retention can carry on instead of
failing with UNKNOWN_PRODUCER_ID. (Kafka 4.1+ refuses a non-zero first sequence only for
transactions-v2 producers, KAFKA-18202, which kayak does not speak.)

:class:`ProducerIdAllocator` hands out producer ids for InitProducerId, never one twice.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kayak.broker.log.files import write_atomically
from kayak.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    KayakError,
    OutOfOrderSequenceNumberError,
)
from kayak.protocol.records.scanner import BatchHeader

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
MAX_SEQUENCE = 2**31 - 1  # sequences are int32 and wrap from here to 0
MAX_EPOCH = 32767  # epochs are int16
BATCHES_TO_RETAIN = 5  # Kafka's NUM_BATCHES_TO_RETAIN, which max.in.flight <= 5 relies on
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms: one day
DEFAULT_ID_BLOCK_SIZE = 1000
SNAPSHOT_VERSION = 1


class ProducerStateFileError(KayakError):
    """A producer-state snapshot or producer-id counter file that cannot be trusted."""


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: its sequence range and where it landed."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class DuplicateBatch(NamedTuple):
    """A retried batch already in the log: answer success with these original values."""

    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerState(NamedTuple):
    """A read-only copy of what the table holds for one producer id."""

    producer_id: int
    epoch: int
    last_timestamp: int
    batches: tuple[BatchMetadata, ...]  # oldest first
    txn_first_offset: int = -1  # where its open transaction began here (-1: none open)
    coordinator_epoch: int = -1  # of the last transaction marker written for it


class CompletedTxn(NamedTuple):
    """A transaction that a marker just closed in this partition."""

    producer_id: int
    first_offset: int  # of its first batch here
    last_offset: int  # the marker's offset


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: ``base + delta``, wrapping after 2**31-1 to 0."""
    return (base_sequence + last_offset_delta) % (MAX_SEQUENCE + 1)


def next_sequence(sequence: int) -> int:
    """The sequence that must follow ``sequence`` (0 after NO_SEQUENCE and after 2**31-1)."""
    return (sequence + 1) % (MAX_SEQUENCE + 1)


@dataclass(slots=True)
class _Entry:
    """Mutable state of one producer id."""

    epoch: int
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    txn_first_offset: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> DuplicateBatch | None:
        # Kafka matches the exact (first, last) range in the same epoch: a retry re-sends the
        # very same batch, so a partial overlap is a different batch, i.e. out of order.
        if header.producer_epoch != self.epoch:
            return None
        first = header.base_sequence
        last = last_sequence(first, header.last_offset_delta)
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return DuplicateBatch(batch.first_offset, batch.last_offset, batch.max_timestamp)
        return None

    def freeze(self, producer_id: int) -> ProducerState:
        return ProducerState(
            producer_id, self.epoch, self.last_timestamp, tuple(self.batches),
            self.txn_first_offset, self.coordinator_epoch,
        )  # fmt: skip


class _Cursor(NamedTuple):
    """What the next batch of a producer is checked against."""

    epoch: int  # NO_PRODUCER_EPOCH when the table has no state for the producer
    last_seq: int  # NO_SEQUENCE when no data batch of this epoch is known


_UNKNOWN = _Cursor(NO_PRODUCER_EPOCH, NO_SEQUENCE)


class ProducerStateTable:
    """Per-producer epochs and last batches of one partition.

    Not thread-safe: the partition's append path (which already serialises appends) owns it.
    ``next_offset`` is the offset just past the last batch the table has taken in;
    ``snapshot_offset`` is that offset as of the last :meth:`snapshot` or :meth:`load`
    (0 if neither happened): replay the log from there.
    """

    def __init__(self) -> None:
        self._producers: dict[int, _Entry] = {}
        # Open transactions: producer id -> offset of its first batch here. The oldest bounds
        # the last stable offset; few are open at a time, so a min() over them is cheap.
        self.ongoing: dict[int, int] = {}
        self.next_offset = 0
        self.snapshot_offset = 0

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def get(self, producer_id: int) -> ProducerState | None:
        """A copy of one producer's state, or None if the table has none."""
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.freeze(producer_id)

    def state(self) -> dict[int, ProducerState]:
        """A copy of every producer's state, by producer id."""
        return {pid: entry.freeze(pid) for pid, entry in self._producers.items()}

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    # -- before an append ------------------------------------------------------------------

    def check(self, header: BatchHeader) -> DuplicateBatch | None:
        """Validate one produced batch before it is appended; changes nothing.

        Returns None if the batch may be appended, or the original placement of the same
        batch if it is a retry of one of the producer's last five. Raises
        :class:`~kayak.errors.InvalidProducerEpochError` for a stale epoch,
        :class:`~kayak.errors.OutOfOrderSequenceNumberError` for any other sequence, and
        :class:`~kayak.errors.InvalidRecordError` for a batch with a producer id but a
        negative epoch or sequence. Batches without a producer id (-1) are not checked.
        """
        return self.check_all([header])[0]

    def check_all(self, headers: Sequence[BatchHeader]) -> list[DuplicateBatch | None]:
        """Validate a whole produce request's batches, in order; changes nothing.

        Each batch is checked as if the earlier batches of the request had been appended, so
        a request whose second batch continues its first passes, and one with any bad batch
        raises before anything is stored. Duplicates are looked for only among batches
        already in the log: a batch repeated within one request is out of order.
        """
        pending: dict[int, _Cursor] = {}
        results: list[DuplicateBatch | None] = []
        for header in headers:
            results.append(self._check_one(header, pending))
        return results

    def _check_one(self, header: BatchHeader, pending: dict[int, _Cursor]) -> DuplicateBatch | None:
        pid = header.producer_id
        if pid < 0:  # Kafka's hasProducerId(): no idempotence, nothing to check
            return None
        _check_fields(header)
        entry = self._producers.get(pid)
        cursor = pending.get(pid)
        if cursor is None:
            if entry is not None and not header.is_control:
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return duplicate  # stores nothing, so later batches see no change
            cursor = _Cursor(entry.epoch, entry.last_seq) if entry is not None else _UNKNOWN
        _check_sequence(header, cursor)
        pending[pid] = _advance(cursor, header)
        return None

    # -- after an append -------------------------------------------------------------------

    def update(self, header: BatchHeader, coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record a batch that was just appended (its base offset is the real one).

        Also what replaying the log does, so nothing is validated here. A batch without a
        producer id only moves ``next_offset``. A transactional data batch opens its
        producer's transaction (if none is open); a control batch (a marker) closes it and
        returns what it closed.
        """
        self.next_offset = max(self.next_offset, header.next_offset)
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = _Entry(header.producer_epoch)
        elif header.producer_epoch != entry.epoch:
            # A new epoch restarts the sequence: the old epoch's batches can never match again.
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = header.max_timestamp
        if header.is_control:  # a transaction marker carries an epoch but no sequence
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            first_offset = self.ongoing.pop(pid, -1)
            entry.txn_first_offset = -1
            if first_offset < 0:
                return None
            return CompletedTxn(pid, first_offset, header.base_offset)
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = self.ongoing[pid] = header.base_offset
        first = header.base_sequence
        entry.batches.append(
            BatchMetadata(
                first,
                last_sequence(first, header.last_offset_delta),
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        return None

    def rebuild(
        self,
        headers: Iterable[BatchHeader],
        on_completed: Callable[[BatchHeader, CompletedTxn], None] | None = None,
    ) -> None:
        """Replay the log's batches, oldest first, on top of the current state.

        Batches that end before ``next_offset`` are skipped, so after :meth:`load` the whole
        active segment may be passed even if the snapshot already covers part of it. Each
        transaction a replayed marker closes is handed to ``on_completed``.
        """
        for header in headers:
            if header.last_offset < self.next_offset:
                continue
            completed = self.update(header)
            if completed is not None and on_completed is not None:
                on_completed(header, completed)

    # -- expiry ----------------------------------------------------------------------------

    def expire(
        self, now_ms: int, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Forget producers idle for at least ``producer_id_expiration_ms``; return their ids.

        Idle is measured from the max timestamp of the producer's last batch, as Kafka does
        (``now - lastTimestamp >= producer.id.expiration.ms``).
        """
        # A producer with a transaction open here is kept: its marker must still close it.
        expired = [
            pid
            for pid, entry in self._producers.items()
            if now_ms - entry.last_timestamp >= producer_id_expiration_ms
            and pid not in self.ongoing
        ]
        for pid in expired:
            del self._producers[pid]
        return expired

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self, path: Path, durable: bool = True) -> None:
        """Write the whole table to ``path`` atomically (temp file, fsync, rename).

        ``durable=False`` skips the fsyncs: a snapshot a power loss takes back is rebuilt
        from the log, so only the one written at a clean shutdown needs them.

        All retained batches are kept (Kafka keeps only the last one per producer), so a
        retry of any of the last five is still recognised after a restart.
        """
        document = {
            "version": SNAPSHOT_VERSION,
            "offset": self.next_offset,
            "producers": [
                {
                    "producer_id": pid,
                    "epoch": entry.epoch,
                    "last_timestamp": entry.last_timestamp,
                    "batches": [list(batch) for batch in entry.batches],
                    "txn_first_offset": entry.txn_first_offset,
                    "coordinator_epoch": entry.coordinator_epoch,
                }
                for pid, entry in sorted(self._producers.items())
            ],
        }
        write_atomically(path, json.dumps(document, separators=(",", ":")) + "\n", durable)
        self.snapshot_offset = self.next_offset

    @classmethod
    def load(cls, path: Path) -> ProducerStateTable:
        """A table as written by :meth:`snapshot`; replay the log from ``snapshot_offset``.

        Raises FileNotFoundError if there is no snapshot and :class:`ProducerStateFileError`
        if it cannot be parsed; either way, rebuild from the log instead.
        """
        text = path.read_text()
        try:
            document = json.loads(text)
            table = cls._from_document(document)
        except (ValueError, TypeError, KeyError) as exc:
            raise ProducerStateFileError(
                f"{path}: unreadable producer-state snapshot: {exc}"
            ) from exc
        return table

    @classmethod
    def _from_document(cls, document: Any) -> ProducerStateTable:
        if _int(document["version"]) != SNAPSHOT_VERSION:
            raise ValueError(f"unknown snapshot version {document['version']!r}")
        table = cls()
        table.next_offset = table.snapshot_offset = _int(document["offset"])
        for item in document["producers"]:
            entry = _Entry(_int(item["epoch"]), _int(item["last_timestamp"]))
            for fields in item["batches"]:
                values = [_int(value) for value in fields]
                entry.batches.append(BatchMetadata(*values))
            # Both absent from snapshots written before transactions.
            entry.txn_first_offset = _int(item.get("txn_first_offset", -1))
            entry.coordinator_epoch = _int(item.get("coordinator_epoch", -1))
            pid = _int(item["producer_id"])
            table._producers[pid] = entry
            if entry.txn_first_offset >= 0:
                table.ongoing[pid] = entry.txn_first_offset
        return table


def _int(value: Any) -> int:
    # json gives bools for true/false, which are ints to isinstance: refuse them explicitly.
    if type(value) is not int:
        raise TypeError(f"expected an integer, found {value!r}")
    return value


def _check_fields(header: BatchHeader) -> None:
    # Kafka's LogValidator refuses these before producer state is even consulted.
    if header.producer_epoch < 0:
        raise InvalidRecordError(
            f"batch of producer {header.producer_id} has invalid epoch {header.producer_epoch}"
        )
    if header.base_sequence < 0 and not header.is_control:
        raise InvalidRecordError(
            f"batch of producer {header.producer_id} has invalid sequence {header.base_sequence}"
        )


def _check_sequence(header: BatchHeader, cursor: _Cursor) -> None:
    """Raise if ``header`` may not follow ``cursor`` (duplicates are already ruled out)."""
    pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
    if cursor.epoch == NO_PRODUCER_EPOCH:
        return  # no state for this producer: any epoch and sequence (KIP-360, Kafka >= 2.5)
    if epoch < cursor.epoch:
        raise InvalidProducerEpochError(
            f"producer {pid} sent epoch {epoch}, older than its current epoch {cursor.epoch}"
        )
    if header.is_control:
        return
    if epoch > cursor.epoch:
        if first != 0:
            raise OutOfOrderSequenceNumberError(
                f"producer {pid} epoch {epoch}: expected sequence 0 (a new epoch, after "
                f"{cursor.epoch}, starts at 0), received {first}"
            )
        return
    expected = next_sequence(cursor.last_seq)
    if first != expected:
        raise OutOfOrderSequenceNumberError(
            f"producer {pid} epoch {epoch}: expected sequence {expected}, received {first}"
        )


def _advance(cursor: _Cursor, header: BatchHeader) -> _Cursor:
    """The cursor once ``header`` (already checked) is appended."""
    if not header.is_control:
        return _Cursor(
            header.producer_epoch, last_sequence(header.base_sequence, header.last_offset_delta)
        )
    if header.producer_epoch == cursor.epoch:
        return cursor
    return _Cursor(header.producer_epoch, NO_SEQUENCE)


class ProducerIdAllocator:
    """Hands out increasing producer ids that stay unique across restarts and crashes.

    Ids are reserved in blocks: the end of the current block is written (atomically) before
    its first id is handed out, so one write serves ``block_size`` ids, and a restart resumes
    at the persisted block end, skipping whatever of the old block was never handed out.
    Thread-safe.
    """

    def __init__(self, path: Path, block_size: int = DEFAULT_ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.path = path
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = self._block_end = self._read()

    def _read(self) -> int:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return 0
        try:
            value = int(text.strip())
        except ValueError:
            value = -1
        if value < 0:
            # Guessing could hand out an id twice, which would merge two producers' state.
            raise ProducerStateFileError(f"{self.path}: unreadable producer id counter {text!r}")
        return value

    @property
    def next_id(self) -> int:
        """The id :meth:`allocate` will return next."""
        return self._next

    def allocate(self) -> int:
        """A producer id never handed out before by this path's allocators."""
        with self._lock:
            return self._allocate_locked()

    def _allocate_locked(self) -> int:
        if self._next >= self._block_end:
            block_end = self._next + self.block_size
            # Persist the reservation before any id of the block leaves this object.
            write_atomically(self.path, f"{block_end}\n")
            self._block_end = block_end
        producer_id = self._next
        self._next += 1
        return producer_id

    def bump_epoch(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """The (producer id, epoch) to answer an InitProducerId that names its current ones.

        KIP-360 (InitProducerId v3+): the epoch goes up by one; once it would pass 32767 the
        producer gets a fresh id with epoch 0. An id this allocator never handed out (say,
        from a broker whose data was wiped) also gets a fresh id: bumping it would let a
        later :meth:`allocate` give the same id to a second producer.

        Kafka bumps this way only for transactional ids; an InitProducerId without one always
        gets ``(allocate(), 0)`` there, whatever id and epoch it names. Clients cope with both.
        """
        if producer_id < 0 or not 0 <= epoch <= MAX_EPOCH:
            raise ValueError(f"invalid producer id {producer_id} / epoch {epoch} to bump")
        with self._lock:
            if epoch >= MAX_EPOCH or producer_id >= self._next:
                return self._allocate_locked(), 0
        return producer_id, epoch + 1
