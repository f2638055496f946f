"""The cluster's topics: names, stable ids, configs, and which shard owns each partition.

One JSON file (``topics.json``) is the cluster map every shard shares: topics with their ids,
config overrides, and per partition the owning shard and its leader epoch. Every change is a
read-modify-write under an exclusive ``flock`` (see :mod:`kayak.broker.catalog_store`), so
concurrent shards never lose each other's updates; shards reread the file when it changes.

Changes are group-committed: the ``async`` methods (what request handlers use) queue their
edits, and one writer applies everything queued so far in an executor thread with one write
and one ``fsync``, while the event loop keeps serving; edits queued meanwhile ride the next
write. A change is answered only once it is durable. The synchronous methods (start-up,
tools) commit on the caller's thread.

A shard opens logs only for the partitions it owns (``DATA_DIR/TOPIC-PARTITION/``, as Kafka
lays them out); asking it for any other partition is NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kayak.broker import catalog_edits
from kayak.broker.catalog_store import (
    CATALOG_FILE,
    CatalogStore,
    Edit,
    Entry,
    FilePlan,
    Snapshot,
    Written,
    mark_for_deletion,
    remove_orphans,
)
from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.files import fsync_directory
from kayak.broker.log.partition_open import deferred_directory_syncs
from kayak.broker.topic import (
    NewTopic,
    Partition,
    Topic,
    check_partition_count,
    check_topic_name,
)
from kayak.errors import (
    ConfigError,
    InvalidConfigurationError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)

__all__ = ["CATALOG_FILE", "TopicCatalog", "remove_orphans"]

log = logging.getLogger(__name__)


class _Deletion:
    """The edit deleting ``topic``, whose logs this shard has already closed."""

    def __init__(self, topic: Topic, node_id: int) -> None:
        self.topic = topic
        self._edit = catalog_edits.delete(topic.name, str(topic.topic_id), node_id)

    def __call__(self, topics: dict[str, Entry], plan: FilePlan) -> object:
        return self._edit(topics, plan)


class TopicCatalog:
    """The cluster map as one shard sees it, and the logs of the partitions it owns."""

    def __init__(
        self,
        data_dir: Path,
        defaults: LogConfig,
        node_id: int = 0,
        shard_count: int = 1,
        visible_after_flush: bool = False,
    ) -> None:
        self.data_dir = data_dir
        # Reads see only what is on disk (the broker's flush modes that sync before acks).
        self.visible_after_flush = visible_after_flush
        self.defaults = defaults
        self.node_id = node_id
        self.shard_count = shard_count
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._store = CatalogStore(data_dir)
        self._version = -1  # of the document last merged into _topics
        self._stat: tuple[int, int, int] | None = None  # topics.json's, when last merged
        self._clean_shutdown = False
        self._queue: list[tuple[Edit, asyncio.Future[object]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- the shared file ----------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._store.path

    def follow(self) -> None:
        """Reread the map if another shard changed it (one stat when nothing changed)."""
        if self.shard_count > 1:
            self._load()

    def reload(self) -> None:
        """Reread the cluster map from disk (for tools that only read it)."""
        self._load(force=True)

    def _load(self, force: bool = False) -> bool:
        """Reread the map if it changed; True if it did."""
        try:
            stat = self._store.stat()
        except FileNotFoundError:
            return False
        if stat == self._stat and not force:
            return False
        snapshot = self._store.read()
        self._stat = stat  # taken before the read: a change in between is seen next time
        self._adopt(snapshot, force=force)
        return True

    def _adopt(
        self,
        snapshot: Snapshot,
        changed: frozenset[str] | None = None,
        base_version: int | None = None,
        force: bool = False,
    ) -> bool:
        """Make ``_topics`` agree with ``snapshot``, unless a newer one is already merged.

        With ``changed`` and the ``base_version`` it was applied to being what is merged now,
        only those topics are looked at (one commit of this process: no other writer came in
        between); otherwise every topic is.
        """
        if snapshot.version < self._version or (snapshot.version == self._version and not force):
            return False
        saved = snapshot.topics
        if changed is not None and base_version == self._version:
            for name in changed:
                entry = saved.get(name)
                if entry is not None:
                    self._merge(name, entry)
                elif (gone := self._topics.get(name)) is not None:
                    self._forget(gone)
        else:
            for name in [n for n in self._topics if n not in saved]:
                self._forget(self._topics[name])
            for name, entry in saved.items():
                self._merge(name, entry)
        self._version = snapshot.version
        return True

    def _adopt_written(self, written: Written) -> None:
        if self._adopt(written.snapshot, written.changed, written.base_version):
            self._stat = written.stat

    def _merge(self, name: str, entry: Entry) -> None:
        topic = self._topics.get(name)
        if topic is None or str(topic.topic_id) != entry["id"]:
            if topic is not None:
                self._forget(topic)
            topic = self._topic_from(name, entry)
            self._topics[name], self._by_id[topic.topic_id] = topic, topic
            return
        if topic.overrides != entry["configs"]:
            topic.overrides = dict(entry["configs"])
            topic.config = LogConfig.from_properties(topic.overrides, self.defaults)
            for partition in topic.open.values():
                partition.log.config = topic.config
        topic.owners = list(entry["owners"])
        topic.epochs = list(entry.get("epochs", [0] * len(topic.owners)))
        topic.handoffs = {int(p): int(s) for p, s in entry.get("handoffs", {}).items()}

    def _topic_from(self, name: str, entry: Entry) -> Topic:
        overrides = dict(entry["configs"])
        owners = list(entry["owners"])
        return Topic(
            name,
            uuid.UUID(entry["id"]),
            LogConfig.from_properties(overrides, self.defaults),
            overrides,
            owners,
            list(entry.get("epochs", [0] * len(owners))),
            bool(entry.get("internal", False)),
            {int(p): int(s) for p, s in entry.get("handoffs", {}).items()},
        )

    def _forget(self, topic: Topic) -> None:
        """Drop a topic the map no longer holds; remove what this shard kept of it unless
        this shard's own deletion already did."""
        del self._topics[topic.name]
        self._by_id.pop(topic.topic_id, None)
        opened = self._close_partitions(topic)
        if topic.deleting:
            return
        owned = {i for i, owner in enumerate(topic.owners) if owner == self.node_id}
        directories = [self.data_dir / f"{topic.name}-{i}" for i in sorted(owned | opened)]
        doomed = [marked for d in directories if (marked := mark_for_deletion(d)) is not None]
        if doomed:
            # The renames are durable before anything is removed: a crash from here on leaves
            # only directories the next start knows it may delete.
            fsync_directory(self.data_dir)
            for directory in doomed:
                shutil.rmtree(directory, ignore_errors=True)

    @staticmethod
    def _close_partitions(topic: Topic) -> set[int]:
        opened = set(topic.open)
        for partition in topic.open.values():
            partition.data_arrived()
            partition.log.close()
        topic.open.clear()
        return opened

    # -- committing changes -------------------------------------------------------------

    def _commit_now(self, edits: Sequence[Edit]) -> list[object]:
        """Commit on this thread (blocking): start-up, tools, tests."""
        written = self._store.commit(edits)
        self._settle(edits, written.results)
        self._adopt_written(written)
        return written.results

    async def _commit(self, edits: Sequence[Edit]) -> list[object]:
        """Queue ``edits`` for the writer and wait until they are durable (or failed)."""
        if not edits:
            return []
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in edits]
        self._queue.extend(zip(edits, futures, strict=True))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_queued(), name="kayak-catalog-writer")
        return [await asyncio.shield(future) for future in futures]

    async def _write_queued(self) -> None:
        """Commit everything queued, one batch per write, until the queue is empty."""
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kayak-catalog")
        while self._queue:
            batch, self._queue = self._queue, []
            edits = [edit for edit, _ in batch]
            try:
                written = await loop.run_in_executor(self._executor, self._store.commit, edits)
            except Exception as exc:  # the lock file could not be opened, or a bug
                log.exception("cannot update %s", self.path)
                results: list[object] = [KafkaStorageError(f"updating {self.path}: {exc}")]
                results *= len(edits)
                self._settle(edits, results)
            else:
                results = written.results
                self._settle(edits, results)
                self._adopt_written(written)
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    @staticmethod
    def _settle(edits: Sequence[Edit], results: Sequence[object]) -> None:
        """A deletion that failed leaves its topic usable again (its logs reopen lazily)."""
        for edit, result in zip(edits, results, strict=True):
            if isinstance(edit, _Deletion) and isinstance(result, KafkaError):
                edit.topic.deleting = False

    # -- opening ------------------------------------------------------------------------

    def open(self, clean_shutdown: bool) -> None:
        """Load the map and open (recovering if needed) the logs this shard owns."""
        self._clean_shutdown = clean_shutdown
        self._load(force=True)
        opened = 0
        with deferred_directory_syncs():  # one journal commit for all new first segments
            for topic in self._topics.values():
                for index, owner in enumerate(topic.owners):
                    if owner == self.node_id:
                        self._open_partition(topic, index)
                        opened += 1
        log.info("opened %d topics (%d partitions here) from %s", len(self._topics), opened,
                 self.data_dir)  # fmt: skip

    def _open_partition(self, topic: Topic, index: int) -> Partition:
        directory = self.data_dir / f"{topic.name}-{index}"
        plog = PartitionLog.open(
            directory, topic.config, self._clean_shutdown, self.visible_after_flush
        )
        plog.leader_epoch = topic.epochs[index] if index < len(topic.epochs) else 0
        partition = Partition(topic.name, index, plog)
        plog.on_visible = partition.data_arrived
        topic.open[index] = partition
        return partition

    async def refresh(self, commit: Any = None) -> None:
        """Pick up changes other shards made: new topics, deletions, partition handoffs.

        A partition this shard owns and that is being handed to another shard is drained
        (pending syncs awaited), closed, and only then given to its new owner, so two shards
        never append to the same files.
        """
        self._load()
        for topic in list(self._topics.values()):
            for index, target in list(topic.handoffs.items()):
                partition = topic.open.pop(index, None)
                if partition is None:
                    continue
                if commit is not None:
                    await commit.sync(partition.log)
                partition.data_arrived()
                partition.log.close()
                await self._commit([catalog_edits.complete_handoff(topic.name, index, target)])
                log.info("handed %s-%d to shard %d", topic.name, index, target)
            for index in [i for i in topic.open if topic.owners[i] != self.node_id]:
                closing = topic.open.pop(index)
                closing.data_arrived()
                closing.log.close()

    # -- lookups ------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[Topic]:
        return list(self._topics.values())

    def partition(self, name: str, index: int, online: bool = True) -> Partition:
        """A partition this shard owns (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER).

        An offline one raises KAFKA_STORAGE_ERROR unless ``online`` is False.
        """
        topic = self._topics.get(name)
        if topic is None or topic.deleting or not 0 <= index < topic.partition_count:
            raise UnknownTopicOrPartitionError(f"{name}-{index} does not exist")
        partition = topic.open.get(index)
        if partition is not None:
            if online:
                partition.log.check_online()
            return partition
        if topic.owners[index] != self.node_id or index in topic.handoffs:
            raise NotLeaderOrFollowerError(
                f"{name}-{index} is led by shard {topic.owners[index]}, not {self.node_id}"
            )
        partition = self._open_partition(topic, index)
        if online:
            partition.log.check_online()
        return partition

    def partitions(self) -> list[Partition]:
        """Every partition this shard has open."""
        return [p for t in self._topics.values() for p in t.open.values()]

    # -- changes: what request handlers call (group-committed) --------------------------

    async def create_topics(
        self, wanted: Sequence[NewTopic], validate_only: bool = False
    ) -> list[Topic | KafkaError]:
        """Create topics (one durable write for all of them, shared with concurrent
        requests); per topic the new :class:`Topic` or the error that refused it."""
        results: list[Topic | KafkaError | None] = []
        edits: list[Edit] = []
        for new in wanted:
            try:
                edits.append(self._creation(new.name, new.num_partitions, new.configs,
                                            validate_only=validate_only))  # fmt: skip
                results.append(None)
            except KafkaError as exc:
                results.append(exc)
        committed = iter(await self._commit(edits))
        names = iter(n.name for n, r in zip(wanted, results, strict=True) if r is None)
        outcome = [
            result if result is not None else self._created(next(names), next(committed))
            for result in results
        ]
        _log_created([t for t in outcome if isinstance(t, Topic)], validate_only)
        return outcome

    async def delete_topics(self, names: Sequence[str]) -> list[KafkaError | None]:
        """Delete topics (renamed away first, removed once the map no longer holds them)."""
        results: list[KafkaError | None] = []
        edits: list[Edit] = []
        for name in names:
            try:
                edits.append(self._deletion(name))
                results.append(None)
            except KafkaError as exc:
                results.append(exc)
        committed = iter(await self._commit(edits))
        outcome: list[KafkaError | None] = []
        for result in results:
            if result is None:
                done = next(committed)
                result = done if isinstance(done, KafkaError) else None
            outcome.append(result)
        for name, result in zip(names, outcome, strict=True):
            if result is None:
                log.info("deleted topic %s", name)
        return outcome

    async def create_partitions(
        self, wanted: Sequence[tuple[str, int]], validate_only: bool = False
    ) -> list[KafkaError | None]:
        """Grow topics to the given totals (never shrink, as in Kafka); per topic the error."""
        growths = [self._growth(name, total, validate_only) for name, total in wanted]
        return [r if isinstance(r, KafkaError) else None for r in await self._commit(growths)]

    async def alter_topic_configs(
        self, name: str, overrides: dict[str, str], validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (AlterConfigs semantics: not merged)."""
        self._config(overrides)
        (result,) = await self._commit([catalog_edits.reconfigure(name, overrides, validate_only)])
        if isinstance(result, KafkaError):
            raise result

    # -- changes: the same, committed on the caller's thread (start-up, tools) ----------

    def create(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str] | None = None,
        internal: bool = False,
        validate_only: bool = False,
        owners: list[int] | None = None,
    ) -> Topic:
        """Create a topic, spreading its partitions over the shards round-robin."""
        edit = self._creation(name, num_partitions, configs or {}, internal, validate_only,
                              owners)  # fmt: skip
        (result,) = self._commit_now([edit])
        created = self._created(name, result)
        if isinstance(created, KafkaError):
            raise created
        _log_created([created], validate_only)
        return created

    def delete(self, name: str) -> None:
        """Delete a topic; each shard removes the data of the partitions it owned."""
        _raised(self._commit_now([self._deletion(name)])[0])
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow a topic to ``total`` partitions (never shrink, as in Kafka)."""
        _raised(self._commit_now([self._growth(name, total, validate_only)])[0])

    def alter_configs(
        self, name: str, overrides: dict[str, str], validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (AlterConfigs semantics: not merged)."""
        self._config(overrides)
        _raised(self._commit_now([catalog_edits.reconfigure(name, overrides, validate_only)])[0])

    def request_handoff(self, name: str, index: int, target: int) -> None:
        """Ask the owner of ``name-index`` to hand it to shard ``target`` (see :meth:`refresh`)."""
        _raised(self._commit_now([catalog_edits.request_handoff(name, index, target)])[0])

    # -- the edits ----------------------------------------------------------------------

    def _creation(
        self,
        name: str,
        count: int,
        configs: dict[str, str],
        internal: bool = False,
        validate_only: bool = False,
        owners: list[int] | None = None,
    ) -> Edit:
        """Validate what needs no map (name, count, configs) and return the creating edit."""
        check_topic_name(name)
        check_partition_count(count)
        overrides = dict(configs)
        self._config(overrides)
        placed = list(owners or [i % self.shard_count for i in range(count)])
        return catalog_edits.create(name, overrides, placed, internal, validate_only, self.node_id)

    def _created(self, name: str, result: object) -> Topic | KafkaError:
        if isinstance(result, KafkaError):
            return result
        assert isinstance(result, dict)
        topic = self._topics.get(name)
        if topic is None or str(topic.topic_id) != result["id"]:
            return self._topic_from(name, result)  # validate_only, or deleted meanwhile
        return topic

    def _deletion(self, name: str) -> _Deletion:
        """Close the topic's logs here (no append may race the rename) and return the edit."""
        topic = self._topics.get(name)
        if topic is None or topic.deleting:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        topic.deleting = True
        self._close_partitions(topic)
        return _Deletion(topic, self.node_id)

    def _growth(self, name: str, total: int, validate_only: bool) -> Edit:
        return catalog_edits.grow(name, total, validate_only, self.shard_count, self.node_id)

    def _config(self, overrides: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(overrides, self.defaults, from_user=True)
        except ConfigError as exc:
            raise InvalidConfigurationError(str(exc)) from exc

    def close(self) -> bool:
        """Close every open log; False if any was offline or failed to close cleanly.

        A catalog write in progress finishes first (it is durable or it failed)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        clean = True
        for partition in self.partitions():
            partition.data_arrived()
            clean = partition.log.close() and clean
        return clean


def _raised(result: object) -> object:
    if isinstance(result, KafkaError):
        raise result
    return result


# One CreateTopics may create thousands of topics: a log line each was a third of its time.
_TOPICS_LOGGED_BY_NAME = 10


def _log_created(topics: list[Topic], validate_only: bool) -> None:
    if validate_only or not topics:
        return
    if len(topics) <= _TOPICS_LOGGED_BY_NAME:
        for topic in topics:
            log.info("created topic %s with %d partitions", topic.name, topic.partition_count)
        return
    log.info(
        "created %d topics (%s ... %s) with %d partitions in all",
        len(topics),
        topics[0].name,
        topics[-1].name,
        sum(topic.partition_count for topic in topics),
    )
