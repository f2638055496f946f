"""Committed offsets kept durably in the internal ``__consumer_offsets`` topic.

Records use Kafka's own schemas (an int16 version, then ``OffsetCommitKey`` v1 /
``OffsetCommitValue`` v3; a null value deletes), so the topic reads like Kafka's. Memory
holds the current map, rebuilt by replaying the topic on start. A commit is acknowledged only
after its record went through group commit, i.e. is on disk.

The topic is kept small without a log cleaner: once it grows well beyond what is still live,
the live entries are appended again as one batch and everything before them is cut away by
prefix truncation. A crash between the two steps leaves duplicates that replay identically.
"""

from __future__ import annotations

import contextlib
import logging
import time

from kayak.broker.catalog import Partition, TopicCatalog
from kayak.broker.group.offsets import CommittedOffset, OffsetStoreError
from kayak.broker.log import GroupCommit
from kayak.errors import KafkaError, TopicExistsError
from kayak.protocol.messages.group_coordinator.offset_commit_key import OffsetCommitKey
from kayak.protocol.messages.group_coordinator.offset_commit_value import OffsetCommitValue
from kayak.protocol.primitives import INT16
from kayak.protocol.records import build_record_batch, parse_batches

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
KEY_VERSION, VALUE_VERSION = 1, 3
# Rewrite the live entries once the topic is this much larger than them (and past a floor).
COMPACT_FACTOR, COMPACT_FLOOR_BYTES = 4, 8 * 1024 * 1024

Key = tuple[str, int]


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


class ConsumerOffsetsTopic:
    """An offset store (see :class:`~kayak.broker.group.offsets.OffsetStore`) on a topic."""

    def __init__(
        self, catalog: TopicCatalog, commit: GroupCommit, node_id: int = 0, shard_count: int = 1
    ) -> None:
        # One partition per shard, owned by that shard: a group's offsets live with its
        # coordinator.
        if catalog.get(TOPIC) is None:
            with contextlib.suppress(TopicExistsError):
                catalog.create(TOPIC, shard_count, {"cleanup.policy": "compact"}, internal=True,
                               owners=list(range(shard_count)))  # fmt: skip
        self._partition: Partition = catalog.partition(TOPIC, node_id)
        self._commit = commit
        self._groups: dict[str, dict[Key, CommittedOffset]] = {}
        self._replay()

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
        key = encode_key(group, topic, partition)
        await self._append([key], [encode_value(committed)])
        self._groups.setdefault(group, {})[(topic, partition)] = committed
        await self._maybe_compact()

    async def delete_group(self, group: str) -> None:
        entries = self._groups.get(group)
        if not entries:
            self._groups.pop(group, None)
            return
        keys = [encode_key(group, t, p) for t, p in entries]
        await self._append(keys, [None] * len(keys))
        del self._groups[group]

    async def _append(self, keys: list[bytes], values: list[bytes | None]) -> None:
        plog = self._partition.log
        try:
            plog.append(build_record_batch(values, keys=keys, timestamp=int(time.time() * 1000)))
            await self._commit.sync(plog)
        except (KafkaError, OSError) as exc:
            raise OffsetStoreError(f"cannot write {TOPIC}: {exc}") from exc

    # -- replay and compaction ----------------------------------------------------------

    def _replay(self) -> None:
        plog = self._partition.log
        offset, count = plog.log_start_offset, 0
        while (found := plog.read(offset, 4 * 1024 * 1024)) is not None:
            batches = list(parse_batches(found.read()))
            for batch in batches:
                for record in batch:
                    if record.offset >= offset and record.key is not None:
                        self._apply(record.key, record.value)
                        count += 1
            offset = batches[-1].next_offset
        if count:
            log.info("restored offsets of %d groups from %d records", len(self._groups), count)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        if INT16.unpack_from(key)[0] not in (0, 1):
            return  # group metadata records: membership is rebuilt by rejoining
        decoded = OffsetCommitKey.decode(key[2:], INT16.unpack_from(key)[0])
        slot = (decoded.topic, decoded.partition)
        if value is None:
            self._groups.get(decoded.group, {}).pop(slot, None)
            return
        version = INT16.unpack_from(value)[0]
        v = OffsetCommitValue.decode(value[2:], version)
        committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
        self._groups.setdefault(decoded.group, {})[slot] = committed

    async def _maybe_compact(self) -> None:
        plog = self._partition.log
        live = sum(len(entries) for entries in self._groups.values()) * 128
        if plog.size_in_bytes < max(COMPACT_FLOOR_BYTES, COMPACT_FACTOR * live):
            return
        keys, values = [], []
        for group, entries in self._groups.items():
            for (topic, partition), committed in entries.items():
                keys.append(encode_key(group, topic, partition))
                values.append(encode_value(committed))
        # The live entries start a segment of their own, so every older segment can go.
        plog.roll()
        start = plog.log_end_offset
        if keys:
            await self._append(keys, list(values))
        plog.delete_records_before(start)
        log.info("compacted %s to %d live entries", TOPIC, len(keys))
