"""Committed offsets kept durably in the internal ``__consumer_offsets`` topic.

Records use Kafka's own schemas (an int16 version, then ``OffsetCommitKey`` v1 /
``OffsetCommitValue`` v3; a null value deletes), so the topic reads like Kafka's. Memory
holds the current map, rebuilt by replaying the topic on start. A commit is acknowledged only
after its record went through group commit, i.e. is on disk; only then does memory (what
OffsetFetch answers) show it.

Compaction, without a log cleaner: once the topic has grown to ``compact_factor`` times the
size of what is still live (and past ``compact_floor_bytes``), the commit that crossed the line
runs one compaction after its own record is durable:

1. roll: a new segment starts at offset ``S``;
2. copy: every live entry is appended again after ``S``, in as many batches as needed, each
   under the topic's ``max.message.bytes``, each synced before the next is built;
3. prefix truncation: the log start offset becomes ``S`` and the older segments are deleted.

Only one compaction runs at a time. Other commits go on meanwhile (the copy yields at every
sync), and are not lost: a key written after the roll already has a record after ``S`` and
is not copied again, so a copy never lands after a newer commit of its key; a commit appended
before the roll but not yet acknowledged is copied with its new value, not memory's older one.

Why a crash (even ``kill -9``) at any point replays to the same committed offsets: replay
applies records in log order, so a key's value is that of its last record, and each step
keeps every key's last value. The roll writes nothing. A copy batch holds, for keys not
written since the roll, a duplicate of each key's last record; a crash after some batches
leaves the old segments whole plus duplicates. Truncation starts only once every copy is on
disk, so then every live key has its last record at or after ``S``; a key whose last record
is before ``S`` is deleted or was never live, and losing that record changes nothing. The new
log start is checkpointed (atomically) before any segment is deleted, so a crash in the middle
of the truncation replays from ``S``, with every live entry there. A failed compaction (a
full disk, say) is logged and retried once the log has grown further; it never fails the
commit that started it, whose own record was durable before the compaction began.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from dataclasses import dataclass, field

from kayak.broker.catalog import Partition, TopicCatalog
from kayak.broker.group.offsets import CommittedOffset, OffsetStoreError
from kayak.broker.log import GroupCommit, PartitionLog
from kayak.broker.log.replay import replay_records
from kayak.errors import ErrorCode, KafkaError, KayakError, TopicExistsError
from kayak.protocol.messages.group_coordinator.offset_commit_key import OffsetCommitKey
from kayak.protocol.messages.group_coordinator.offset_commit_value import OffsetCommitValue
from kayak.protocol.primitives import INT16
from kayak.protocol.records import build_record_batch
from kayak.protocol.records.record import BATCH_HEADER_SIZE, Record

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
KEY_VERSION, VALUE_VERSION = 1, 3
GROUP_METADATA_KEY_VERSION = 2
# What decoding a key or value that is not an offset commit of ours can raise: anything can be
# in the topic (written by an older kayak, another tool, or a client before produces to it
# were refused), and one such record must not stop the broker from starting.
_UNDECODABLE = (KayakError, struct.error, ValueError, IndexError, OverflowError)
# Rewrite the live entries once the topic is this much larger than them (and past a floor).
# Read when a store is made: a test may lower them first.
COMPACT_FACTOR, COMPACT_FLOOR_BYTES = 4, 8 * 1024 * 1024
# Bytes of a live entry in a compacted log beyond its group, topic and metadata strings:
# the fixed key and value fields and the record framing (a slight overestimate, so that a
# freshly compacted log never looks due for compaction again).
_ENTRY_FIXED_BYTES = 48

Key = tuple[str, int]  # (topic, partition) within a group
Slot = tuple[str, str, int]  # (group, topic, partition): one key of the topic


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


def _entry_bytes(slot: Slot, committed: CommittedOffset) -> int:
    """About what one live entry takes in a compacted log (never much less)."""
    return _ENTRY_FIXED_BYTES + len(slot[0]) + len(slot[1]) + len(committed.metadata)


@dataclass(slots=True)
class _Compaction:
    """One compaction under way: where its copies start and what it still has to copy."""

    start: int  # the offset of the roll; everything before it goes at the end
    slots: list[Slot]  # the live keys when it started, copied in this order
    cursor: int = 0  # slots[:cursor] are copied (or skipped)
    written: set[Slot] = field(default_factory=set)  # appended since the roll: not copied
    batches: int = 0


class ConsumerOffsetsTopic:
    """An offset store (see :class:`~kayak.broker.group.offsets.OffsetStore`) on a topic."""

    def __init__(
        self,
        catalog: TopicCatalog,
        commit: GroupCommit,
        node_id: int = 0,
        shard_count: int = 1,
        *,
        compact_factor: int | None = None,
        compact_floor_bytes: int | None = None,
    ) -> None:
        # One partition per shard, owned by that shard: a group's offsets live with its
        # coordinator.
        if catalog.get(TOPIC) is None:
            with contextlib.suppress(TopicExistsError):
                catalog.create(TOPIC, shard_count, {"cleanup.policy": "compact"}, internal=True,
                               owners=list(range(shard_count)))  # fmt: skip
        # Offline (damaged on disk): the broker still starts; commits here fail until repaired.
        self._partition: Partition = catalog.partition(TOPIC, node_id, online=False)
        self._commit = commit
        self._factor = COMPACT_FACTOR if compact_factor is None else compact_factor
        self._floor = COMPACT_FLOOR_BYTES if compact_floor_bytes is None else compact_floor_bytes
        self._groups: dict[str, dict[Key, CommittedOffset]] = {}  # acknowledged only
        # Running totals of _groups, so that deciding to compact costs nothing per commit.
        self._live_entries = 0
        self._live_bytes = 0
        # Appended, not yet acknowledged: (write number, value or None for a deletion) of each
        # key's latest write. A compaction copies these, not memory's older values.
        self._pending: dict[Slot, tuple[int, CommittedOffset | None]] = {}
        self._writes = 0
        self._compaction: _Compaction | None = None
        self._retry_at_bytes = 0  # after a failed compaction: wait for the log to grow
        self.compactions = 0  # compactions started, for tests and metrics
        self._replay()

    @property
    def live_entries(self) -> int:
        """How many (group, topic, partition) commits are live."""
        return self._live_entries

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
        if self._compaction_due():
            await self._compact_logging_failure()

    async def delete_group(self, group: str) -> None:
        slots = [(group, topic, partition) for topic, partition in self._groups.get(group, {})]
        # A first commit still on its way to disk must not come back after the deletion.
        slots += [
            slot
            for slot, (_, value) in self._pending.items()
            if slot[0] == group and value is not None
        ]
        if slots:
            await self._write([(slot, None) for slot in dict.fromkeys(slots)])

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """Tombstones for these (topic, partition) commits of ``group`` (OffsetDelete);
        pending first commits count, as in :meth:`delete_group`."""
        committed = self._groups.get(group, {})
        slots = [
            (group, topic, partition)
            for topic, partition in dict.fromkeys(partitions)
            if (topic, partition) in committed or (group, topic, partition) in self._pending
        ]
        if slots:
            await self._write([(slot, None) for slot in slots])

    async def _write(self, entries: list[tuple[Slot, CommittedOffset | None]]) -> None:
        """Append ``entries`` as one batch; once on disk, memory shows them."""
        keys = [encode_key(*slot) for slot, _ in entries]
        values = [None if value is None else encode_value(value) for _, value in entries]
        plog = self._partition.log
        try:
            plog.append(build_record_batch(values, keys=keys, timestamp=_now_ms()))
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot append to {TOPIC}", exc) from exc
        self._writes += 1
        write = self._writes
        for slot, value in entries:
            self._pending[slot] = (write, value)
            if self._compaction is not None:
                self._compaction.written.add(slot)
        acknowledged = False
        try:
            await self._sync(plog)
            acknowledged = True
        finally:
            self._settle(entries, write, acknowledged)

    async def _sync(self, plog: PartitionLog) -> None:
        try:
            await self._commit.sync(plog)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot sync {TOPIC}", exc) from exc

    def _settle(
        self, entries: list[tuple[Slot, CommittedOffset | None]], write: int, acknowledged: bool
    ) -> None:
        for slot, value in entries:
            if self._pending.get(slot, (None, None))[0] != write:
                continue  # a later write of this key is pending: it decides what memory shows
            del self._pending[slot]
            if acknowledged:
                self._set(slot, value)

    def _set(self, slot: Slot, value: CommittedOffset | None) -> None:
        """Make memory (and its running totals) show ``value`` for ``slot``."""
        group, topic, partition = slot
        entries = self._groups.get(group)
        old = entries.pop((topic, partition), None) if entries is not None else None
        if old is not None:
            self._live_entries -= 1
            self._live_bytes -= _entry_bytes(slot, old)
        if value is not None:
            self._groups.setdefault(group, {})[(topic, partition)] = value
            self._live_entries += 1
            self._live_bytes += _entry_bytes(slot, value)
        elif entries is not None and not entries:
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
            for record in replay_records(plog):
                count += self._replay_record(plog.directory.name, record)
        except KafkaError as exc:
            # The log itself cannot be walked further (not one bad record): serving what was
            # read so far would move committed offsets back, so refuse instead.
            self._groups.clear()
            self._live_entries = self._live_bytes = 0
            plog.take_offline(f"replaying {TOPIC} failed: {exc}")
            return
        if count:
            log.info(
                "restored %d offsets of %d groups from %d records",
                self._live_entries,
                len(self._groups),
                count,
            )

    def _replay_record(self, partition: str, record: Record) -> int:
        """Apply one record; 1 if it was an offset commit or deletion, else 0."""
        try:
            if record.key is None:
                raise ValueError("it has no key")
            return self._apply(record.key, record.value)
        except _UNDECODABLE as exc:
            log.warning("%s offset %d: skipping a record that is not an offset commit: %s",
                        partition, record.offset, exc)  # fmt: skip
            return 0

    def _apply(self, key: bytes, value: bytes | None) -> int:
        key_version = INT16.unpack_from(key)[0]
        if key_version == GROUP_METADATA_KEY_VERSION:
            return 0  # Kafka's group metadata: membership is rebuilt by rejoining
        if key_version not in (0, 1):
            raise ValueError(f"unknown key version {key_version}")
        decoded = OffsetCommitKey.decode(key[2:], key_version)
        slot = (decoded.group, decoded.topic, decoded.partition)
        if value is None:
            self._set(slot, None)
            return 1
        v = OffsetCommitValue.decode(value[2:], INT16.unpack_from(value)[0])
        self._set(slot, CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp))
        return 1

    # -- compaction ---------------------------------------------------------------------

    def _compaction_due(self) -> bool:
        if self._compaction is not None:
            return False
        threshold = max(self._floor, self._factor * self._live_bytes, self._retry_at_bytes)
        return self._partition.log.size_in_bytes >= threshold

    async def _compact_logging_failure(self) -> None:
        try:
            await self.compact()
        except OffsetStoreError as exc:
            # Nothing is lost (see the module docstring); try again after more growth.
            self._retry_at_bytes = self._partition.log.size_in_bytes + self._floor
            log.warning(
                "compaction of %s failed (%s), will retry later: %s", TOPIC, exc.cause.name, exc
            )

    async def compact(self) -> bool:
        """Rewrite the live entries after a roll and cut off everything before them.

        Returns False, doing nothing, while another compaction runs. Raises
        :class:`OffsetStoreError` if a step fails; the log then still replays correctly.
        """
        if self._compaction is not None:
            return False
        plog = self._partition.log
        self.compactions += 1
        started = time.monotonic()
        # Roll and take the list of live keys with no await in between: every write from
        # here on is after the roll and is recorded in ``written``.
        try:
            compaction = self._start_compaction(plog)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot roll {TOPIC}", exc) from exc
        try:
            while batch := self._next_copy_batch(compaction, plog.config.max_message_bytes):
                await self._copy(plog, batch)
                compaction.batches += 1
            self._truncate(plog, compaction.start)
        finally:
            self._compaction = None
        self._retry_at_bytes = 0
        log.info(
            "compacted %s: %d live entries in %d batches from offset %d (%d bytes) in %.2fs",
            TOPIC,
            len(compaction.slots),
            compaction.batches,
            compaction.start,
            plog.size_in_bytes,
            time.monotonic() - started,
        )
        return True

    def _start_compaction(self, plog: PartitionLog) -> _Compaction:
        plog.roll()
        live = [(g, t, p) for g, entries in self._groups.items() for t, p in entries]
        live += [slot for slot, (_, value) in self._pending.items() if value is not None]
        compaction = _Compaction(plog.log_end_offset, list(dict.fromkeys(live)))
        self._compaction = compaction
        log.info(
            "compacting %s: %d live entries, %d bytes, copies from offset %d",
            TOPIC,
            len(compaction.slots),
            plog.size_in_bytes,
            compaction.start,
        )
        return compaction

    def _live_value(self, slot: Slot) -> CommittedOffset | None:
        """The value of ``slot``'s last record: a pending write's, else memory's."""
        pending = self._pending.get(slot)
        if pending is not None:
            return pending[1]
        return self._groups.get(slot[0], {}).get((slot[1], slot[2]))

    def _next_copy_batch(self, compaction: _Compaction, max_bytes: int) -> bytes | None:
        """The next batch of live entries not written since the roll, at most ``max_bytes``."""
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        size = BATCH_HEADER_SIZE
        while compaction.cursor < len(compaction.slots):
            slot = compaction.slots[compaction.cursor]
            value = None if slot in compaction.written else self._live_value(slot)
            if value is None:  # rewritten or deleted since the roll: nothing to copy
                compaction.cursor += 1
                continue
            key, encoded = encode_key(*slot), encode_value(value)
            record_bytes = _record_size(len(keys), key, encoded)
            if size + record_bytes > max_bytes:
                if keys:
                    break
                raise OffsetStoreError(
                    f"the entry of group {slot[0]} for {slot[1]}-{slot[2]} cannot fit a batch "
                    f"of max.message.bytes {max_bytes}",
                    ErrorCode.MESSAGE_TOO_LARGE,
                )
            keys.append(key)
            values.append(encoded)
            size += record_bytes
            compaction.cursor += 1
        if not keys:
            return None
        return build_record_batch(values, keys=keys, timestamp=_now_ms())

    async def _copy(self, plog: PartitionLog, batch: bytes) -> None:
        try:
            plog.append(batch)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot copy live entries of {TOPIC}", exc) from exc
        await self._sync(plog)  # on disk before truncation; commits run meanwhile

    def _truncate(self, plog: PartitionLog, start: int) -> None:
        try:
            plog.delete_records_before(start)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError.wrapping(f"cannot truncate {TOPIC}", exc) from exc


def _record_size(offset_delta: int, key: bytes, value: bytes) -> int:
    """Bytes of a v2 record with one timestamp for its whole batch (delta 0), no headers."""
    body = (
        2  # attributes, timestamp delta
        + _varint_size(offset_delta)
        + _varint_size(len(key))
        + len(key)
        + _varint_size(len(value))
        + len(value)
        + 1  # header count
    )
    return _varint_size(body) + body


def _varint_size(n: int) -> int:
    zigzag, size = (n << 1) ^ (n >> 63), 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _now_ms() -> int:
    return int(time.time() * 1000)
