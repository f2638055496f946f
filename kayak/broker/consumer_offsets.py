"""Committed offsets kept durably in the internal ``__consumer_offsets`` topic.

Records use Kafka's own schemas (an int16 version, then ``OffsetCommitKey`` v1 /
``OffsetCommitValue`` v3; a null value deletes), so the topic reads like Kafka's. Memory
holds the current map, rebuilt by replaying the topic on start. A commit is acknowledged only
once its record, written through the broker's :class:`~kayak.broker.log.LogWriter`, is on disk
and readable in the topic, whatever ``--flush`` says: Kafka keeps the group coordinator's
state on replicas, a single node only has its disk. Only then does memory (what OffsetFetch
answers) show it.

Compaction is the log cleaner's (:mod:`kayak.broker.log.cleaner`), as for any topic with
``cleanup.policy=compact``; the topic has Kafka's ``offsets.topic.segment.bytes`` (100 MiB)
segments. Replay gives the same committed offsets before and after any cleaning, because:

- the cleaner keeps each key's last record, at its own offset, and replay applies records in
  offset order, so the last record of a key still decides its value;
- a tombstone is kept ``delete.retention.ms`` after the cleaning that first reached it, and
  once it goes, every older record of its key went before it (nothing is left to delete);
- the records of an aborted transaction are dropped by the cleaner (replay would have
  dropped them at the ABORT marker), and a marker is kept as long as its transaction has any
  record left (Kafka's rules), so a committed transaction's offsets still meet their COMMIT;
- offsets committed in a transaction count at its COMMIT marker only if their record comes
  after the record of the offset already committed (Kafka's ``recordOffset`` rule), and a
  tombstone drops the pending transactional offsets of its key written before it. Without
  these two rules, removing an older record (the cleaner's job) could change which value
  wins: with them, the winner depends only on the last records of each key, which the
  cleaner keeps. The live path applies the same rules, so memory never differs from replay.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time

from kayak.broker.catalog import TopicCatalog
from kayak.broker.group.offsets import CommittedOffset, OffsetStoreError
from kayak.broker.log import AppendResult, LogWriter, PartitionLog
from kayak.broker.log.producer_state import next_sequence
from kayak.broker.log.replay import replay_batches
from kayak.broker.topic import Partition
from kayak.errors import KafkaError, KayakError, TopicExistsError
from kayak.protocol.messages.group_coordinator.group_metadata_key import GroupMetadataKey
from kayak.protocol.messages.group_coordinator.group_metadata_value import GroupMetadataValue
from kayak.protocol.messages.group_coordinator.offset_commit_key import OffsetCommitKey
from kayak.protocol.messages.group_coordinator.offset_commit_value import OffsetCommitValue
from kayak.protocol.primitives import INT16
from kayak.protocol.records import build_record_batch
from kayak.protocol.records.batch import parse_control_record
from kayak.protocol.records.record import ControlRecordType, Record
from kayak.protocol.records.scanner import BatchHeader

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
KEY_VERSION, VALUE_VERSION = 1, 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3  # what Kafka 3.x and 4.x write for a classic group
# Kafka's settings of the topic where they matter for cleaning: compacted, in segments of
# offsets.topic.segment.bytes (100 MiB), so that the cleaner gets sealed segments to clean
# long before the 1 GiB default would roll one.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
# What decoding a key or value that is not an offset commit of ours can raise: anything can be
# in the topic (written by an older kayak, another tool, or a client before produces to it
# were refused), and one such record must not stop the broker from starting.
_UNDECODABLE = (KayakError, struct.error, ValueError, IndexError, OverflowError)

Key = tuple[str, int]  # (topic, partition) within a group
Slot = tuple[str, str, int]  # (group, topic, partition): one key of the topic
# A transaction's offsets until its marker: per key, (offset of its record, value).
TxnOffsets = dict[Slot, tuple[int, CommittedOffset | None]]


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return INT16.pack(KEY_VERSION) + OffsetCommitKey(group, topic, partition).encode(KEY_VERSION)


def encode_value(committed: CommittedOffset) -> bytes:
    value = OffsetCommitValue(
        offset=committed.offset,
        leader_epoch=committed.leader_epoch,
        metadata=committed.metadata,
        commit_timestamp=committed.commit_timestamp,
    )
    return INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def encode_group_key(group: str) -> bytes:
    return INT16.pack(GROUP_METADATA_KEY_VERSION) + GroupMetadataKey(group).encode(
        GROUP_METADATA_KEY_VERSION
    )


def encode_group_value(snapshot: GroupMetadataValue) -> bytes:
    return INT16.pack(GROUP_METADATA_VALUE_VERSION) + snapshot.encode(GROUP_METADATA_VALUE_VERSION)


def decode_group_value(value: bytes) -> GroupMetadataValue:
    return GroupMetadataValue.decode(value[2:], INT16.unpack_from(value)[0])


def open_internal_topic(
    catalog: TopicCatalog, name: str, shard_count: int, configs: dict[str, str]
) -> None:
    """Create internal topic ``name`` with ``configs`` (one partition per shard, owned by
    that shard), or give an existing one the settings of ``configs`` it lacks: a data
    directory from before they were set gets them, an override someone chose stays."""
    topic = catalog.get(name)
    if topic is None:
        with contextlib.suppress(TopicExistsError):
            catalog.create(name, shard_count, dict(configs), internal=True,
                           owners=list(range(shard_count)))  # fmt: skip
        return
    missing = {k: v for k, v in configs.items() if k not in topic.overrides}
    if not missing:
        return
    try:
        catalog.alter_configs(name, {**topic.overrides, **missing})
    except KafkaError as exc:  # the topic still works with what it has
        log.warning("%s: cannot add the settings %s: %s", name, missing, exc)
        return
    log.info("%s: added the settings %s", name, missing)


class ConsumerOffsetsTopic:
    """An offset store (see :class:`~kayak.broker.group.offsets.OffsetStore`) on a topic."""

    def __init__(
        self, catalog: TopicCatalog, writer: LogWriter, node_id: int = 0, shard_count: int = 1
    ) -> None:
        # One partition per shard, owned by that shard: a group's offsets live with its
        # coordinator.
        open_internal_topic(catalog, TOPIC, shard_count, TOPIC_CONFIGS)
        # Offline (damaged on disk): the broker still starts; commits here fail until repaired.
        self._partition: Partition = catalog.partition(TOPIC, node_id, online=False)
        self._writer = writer
        self._groups: dict[str, dict[Key, CommittedOffset]] = {}  # acknowledged only
        # The offset of the record each value in _groups comes from (Kafka's recordOffset).
        self._record_offsets: dict[Slot, int] = {}
        # Appended, not yet acknowledged: (write number, value or None for a deletion) of each
        # key's latest write, so that an older write settling late never shows over it.
        self._pending: dict[Slot, tuple[int, CommittedOffset | None]] = {}
        self._writes = 0
        # Offsets committed inside open transactions, by producer id, until their marker.
        self._txn_pending: dict[int, TxnOffsets] = {}
        self._snapshots: dict[str, GroupMetadataValue] = {}  # each group's last stored generation
        self._replay()

    @property
    def live_entries(self) -> int:
        """How many (group, topic, partition) commits are live."""
        return len(self._record_offsets)

    # -- reading ------------------------------------------------------------------------

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self._groups.get(group, {}).get((topic, partition))

    def fetch_all(self, group: str) -> dict[Key, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        """Groups with committed offsets (they exist even with no members)."""
        return list(self._groups)

    # -- writing ------------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int,
        metadata: str,
        commit_timestamp: int,
    ) -> None:
        committed = CommittedOffset(offset, leader_epoch, metadata, commit_timestamp)
        await self._write([((group, topic, partition), committed)])

    async def delete_group(self, group: str) -> None:
        slots = [(group, topic, partition) for topic, partition in self._groups.get(group, {})]
        # A first commit still on its way to disk, or one of an open transaction, must not
        # come back after the deletion (as Kafka, which also deletes pending offsets).
        slots += [slot for slot in self._uncommitted_slots() if slot[0] == group]
        if slots:
            await self._write([(slot, None) for slot in dict.fromkeys(slots)])
        if self._snapshots.pop(group, None) is not None:
            await self._append_and_sync([encode_group_key(group)], [None])

    async def store_group(self, group: str, snapshot: GroupMetadataValue) -> None:
        # Known as stored from the append on: a deletion meanwhile must write its tombstone
        # after this record, or a restart would bring the deleted group back.
        self._snapshots[group] = snapshot
        await self._append_and_sync([encode_group_key(group)], [encode_group_value(snapshot)])

    def stored_groups(self) -> dict[str, GroupMetadataValue]:
        return dict(self._snapshots)

    async def _append_and_sync(self, keys: list[bytes], values: list[bytes | None]) -> None:
        self._append(keys, values)
        await self._sync(self._partition.log)

    def _append(self, keys: list[bytes], values: list[bytes | None]) -> AppendResult:
        """Append one batch of ``keys``/``values``; durable once :meth:`_sync` returns."""
        try:
            return self._writer.append(
                self._partition.log, build_record_batch(values, keys=keys, timestamp=_now_ms())
            )
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot append to {TOPIC}", exc) from exc

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """Tombstones for these (topic, partition) commits of ``group`` (OffsetDelete);
        pending commits count, as in :meth:`delete_group`."""
        committed = self._groups.get(group, {})
        uncommitted = set(self._uncommitted_slots())
        slots = [
            (group, topic, partition)
            for topic, partition in dict.fromkeys(partitions)
            if (topic, partition) in committed or (group, topic, partition) in uncommitted
        ]
        if slots:
            await self._write([(slot, None) for slot in slots])

    def _uncommitted_slots(self) -> list[Slot]:
        """Keys with a commit not yet acknowledged or held by an open transaction."""
        slots = [slot for slot, (_, value) in self._pending.items() if value is not None]
        return slots + [slot for pending in self._txn_pending.values() for slot in pending]

    async def _write(self, entries: list[tuple[Slot, CommittedOffset | None]]) -> None:
        """Append ``entries`` as one batch; once on disk, memory shows them."""
        keys = [encode_key(*slot) for slot, _ in entries]
        values = [None if value is None else encode_value(value) for _, value in entries]
        plog = self._partition.log
        appended = self._append(keys, values)
        self._writes += 1
        write = self._writes
        for slot, value in entries:
            self._pending[slot] = (write, value)
        acknowledged = False
        try:
            await self._sync(plog)
            acknowledged = True
        finally:
            self._settle(entries, write, appended.base_offset, acknowledged)

    async def _sync(self, plog: PartitionLog) -> None:
        try:
            await self._writer.durable(plog, on_disk=True)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot sync {TOPIC}", exc) from exc

    def _settle(
        self,
        entries: list[tuple[Slot, CommittedOffset | None]],
        write: int,
        base_offset: int,
        acknowledged: bool,
    ) -> None:
        for i, (slot, value) in enumerate(entries):
            if self._pending.get(slot, (None, None))[0] != write:
                continue  # a later write of this key is pending: it decides what memory shows
            del self._pending[slot]
            if acknowledged:
                self._apply_record(slot, value, base_offset + i)

    def _apply_record(self, slot: Slot, value: CommittedOffset | None, record_offset: int) -> None:
        """A (non-transactional) record of ``slot`` at ``record_offset`` is durable: as
        Kafka's replay, a tombstone also drops the slot's transactional offsets written
        before it."""
        if value is None:
            for pending in self._txn_pending.values():
                if pending.get(slot, (record_offset,))[0] < record_offset:
                    del pending[slot]
        self._set(slot, value, record_offset)

    def _set(self, slot: Slot, value: CommittedOffset | None, record_offset: int) -> None:
        """Make memory show ``value`` for ``slot``, unless what it shows comes from a later
        record (a transaction whose COMMIT was applied before this write settled)."""
        if self._record_offsets.get(slot, -1) > record_offset:
            return
        group, topic, partition = slot
        entries = self._groups.get(group)
        if value is not None:
            self._groups.setdefault(group, {})[(topic, partition)] = value
            self._record_offsets[slot] = record_offset
            return
        self._record_offsets.pop(slot, None)
        if entries is not None:
            entries.pop((topic, partition), None)
            if not entries:
                del self._groups[group]

    # -- replay -------------------------------------------------------------------------

    def _replay(self) -> None:
        """Rebuild memory from the topic. A record that is not an offset commit, or a damaged
        batch, is skipped with one warning; the broker starts with everything else."""
        plog = self._partition.log
        if plog.offline is not None:
            log.error("committed offsets in %s unavailable: %s", TOPIC, plog.offline)
            return
        count = 0
        try:
            for header, records in replay_batches(plog):
                count += self._replay_batch(plog.directory.name, header, records)
        except KafkaError as exc:
            # The log itself cannot be walked further (not one bad record): serving what was
            # read so far would move committed offsets back, so refuse instead.
            self._groups.clear()
            self._record_offsets.clear()
            plog.take_offline(f"replaying {TOPIC} failed: {exc}")
            return
        if count or self._snapshots:
            log.info(
                "restored %d offsets of %d groups from %d records, and %d groups' members",
                self.live_entries,
                len(self._groups),
                count,
                len(self._snapshots),
            )

    def _replay_batch(self, partition: str, header: BatchHeader, records: list[Record]) -> int:
        """Apply one batch: a transaction's offsets wait for its marker, as when written."""
        if header.is_control:
            if records:
                marker = parse_control_record(records[0], header.base_offset)
                self.marker_written(0, header.producer_id, marker.type is ControlRecordType.COMMIT)
            return 0
        pending = None
        if header.is_transactional and records:
            pending = self._txn_pending.setdefault(header.producer_id, {})
        return sum(self._replay_record(partition, record, pending) for record in records)

    def _replay_record(self, partition: str, record: Record, pending: TxnOffsets | None) -> int:
        """Apply one record; 1 if it was an offset commit or deletion, else 0."""
        try:
            if record.key is None:
                raise ValueError("it has no key")
            return self._apply(record.key, record.value, record.offset, pending)
        except _UNDECODABLE as exc:
            log.warning("%s offset %d: skipping a record that is not an offset commit: %s",
                        partition, record.offset, exc)  # fmt: skip
            return 0

    def _apply(
        self, key: bytes, value: bytes | None, record_offset: int, pending: TxnOffsets | None
    ) -> int:
        key_version = INT16.unpack_from(key)[0]
        if key_version == GROUP_METADATA_KEY_VERSION:
            group = GroupMetadataKey.decode(key[2:], key_version).group
            if value is None:
                self._snapshots.pop(group, None)
            else:
                self._snapshots[group] = decode_group_value(value)
            return 0
        if key_version not in (0, 1):
            raise ValueError(f"unknown key version {key_version}")
        decoded = OffsetCommitKey.decode(key[2:], key_version)
        slot = (decoded.group, decoded.topic, decoded.partition)
        committed = None
        if value is not None:
            v = OffsetCommitValue.decode(value[2:], INT16.unpack_from(value)[0])
            committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
        if pending is not None:
            pending[slot] = (record_offset, committed)
        else:
            self._apply_record(slot, committed, record_offset)
        return 1

    # -- transactions (TxnOffsetCommit) -------------------------------------------------

    async def commit_transactional(
        self,
        group: str,
        producer_id: int,
        epoch: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> None:
        """Append offsets committed inside a transaction; they count once its COMMIT marker
        is written here (:meth:`marker_written`), and never if it aborts."""
        plog = self._partition.log
        state = plog.producers.get(producer_id)
        sequence = 0
        if state is not None and state.epoch == epoch and state.batches:
            sequence = next_sequence(state.batches[-1].last_seq)
        slots = [((group, topic, partition), value) for topic, partition, value in offsets]
        batch = build_record_batch(
            [encode_value(value) for _, value in slots],
            keys=[encode_key(*slot) for slot, _ in slots],
            timestamp=_now_ms(), producer_id=producer_id, producer_epoch=epoch,
            base_sequence=sequence, is_transactional=True,
        )  # fmt: skip
        try:
            appended = self._writer.append(plog, batch)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot append to {TOPIC}", exc) from exc
        pending = self._txn_pending.setdefault(producer_id, {})
        for i, (slot, value) in enumerate(slots):
            pending[slot] = (appended.base_offset + i, value)
        await self._sync(plog)

    def marker_written(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker is durable in the topic: its offsets count (each unless a
        later record of its key already counts), or are dropped."""
        pending = self._txn_pending.pop(producer_id, None)
        if pending and commit:
            for slot, (record_offset, value) in pending.items():
                self._set(slot, value, record_offset)

    def pending_transactional(self, group: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset for this partition (KIP-447: a
        read_committed consumer waits for it, UNSTABLE_OFFSET_COMMIT)."""
        slot = (group, topic, partition)
        return any(slot in pending for pending in self._txn_pending.values())


def _now_ms() -> int:
    return int(time.time() * 1000)
