"""The cluster's topics: names, stable ids, configs, and which shard owns each partition.

One JSON file (``topics.json``) is the cluster map every shard shares: topics with their ids,
config overrides, and per partition the owning shard and its leader epoch. Every change is a
read-modify-write under an exclusive ``flock``, so concurrent shards never lose each other's
updates; shards reread the file when its modification time changes.

A shard opens logs only for the partitions it owns (``DATA_DIR/TOPIC-PARTITION/``, as Kafka
lays them out); asking it for any other partition is NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.files import exclusive_lock, fsync_directory, write_atomically
from kayak.errors import (
    ConfigError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    NotLeaderOrFollowerError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

CATALOG_FILE = "topics.json"
LOCK_FILE = "topics.lock"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
MAX_PARTITIONS = 10_000
NO_LEADER = -1  # the partition is being handed from one shard to another


def check_topic_name(name: str) -> None:
    """Kafka's topic naming rules, raised as INVALID_TOPIC_EXCEPTION."""
    if name in (".", "..") or not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"{name!r} is not a legal topic name: 1-249 of [a-zA-Z0-9._-], not '.' or '..'"
        )


@dataclass(eq=False)
class Partition:
    """A partition this shard owns: its log and whoever waits for data to arrive in it."""

    topic: str
    index: int
    log: PartitionLog
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def data_arrived(self) -> None:
        """Wake every long-polling fetch waiting on this partition."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait_for_data(self) -> asyncio.Future[None]:
        """A future that completes at the next append."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        # A long poll that times out cancels its waiter; forget it so idle partitions
        # do not collect one per poll.
        waiter.add_done_callback(self._forget)
        return waiter

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)


@dataclass(eq=False)
class Topic:
    """A topic as the cluster map describes it, plus this shard's open partitions."""

    name: str
    topic_id: uuid.UUID
    config: LogConfig
    overrides: dict[str, str]
    owners: list[int]  # shard (node id) per partition, NO_LEADER while handed over
    epochs: list[int]  # leader epoch per partition, bumped at every move
    internal: bool = False
    handoffs: dict[int, int] = field(default_factory=dict)  # partition -> target shard
    open: dict[int, Partition] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.owners)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.topic_id),
            "configs": self.overrides,
            "owners": self.owners,
            "epochs": self.epochs,
            "internal": self.internal,
            "handoffs": {str(p): s for p, s in self.handoffs.items()},
        }


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
        self._mtime_ns = -1
        self._clean_shutdown = False

    # -- the shared file ----------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self.data_dir / CATALOG_FILE

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the cluster map's lock and have the latest version of it loaded."""
        with exclusive_lock(self.data_dir / LOCK_FILE):
            self._load(force=True)
            yield

    def _save(self) -> None:
        document = {"topics": {t.name: t.to_json() for t in self._topics.values()}}
        write_atomically(self.path, json.dumps(document, indent=1))
        self._mtime_ns = self.path.stat().st_mtime_ns

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
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return False
        if mtime == self._mtime_ns and not force:
            return False
        self._mtime_ns = mtime
        saved = json.loads(self.path.read_text())["topics"]
        for name in [n for n in self._topics if n not in saved]:
            self._forget(self._topics[name], remove_data=True)
        for name, entry in saved.items():
            self._merge(name, entry)
        return True

    def _merge(self, name: str, entry: dict[str, Any]) -> None:
        topic = self._topics.get(name)
        if topic is None or str(topic.topic_id) != entry["id"]:
            if topic is not None:
                self._forget(topic, remove_data=True)
            overrides = entry["configs"]
            topic = Topic(
                name,
                uuid.UUID(entry["id"]),
                LogConfig.from_properties(overrides, self.defaults),
                overrides,
                [],
                [],
                bool(entry.get("internal", False)),
            )
            self._topics[name], self._by_id[topic.topic_id] = topic, topic
        elif topic.overrides != entry["configs"]:
            topic.overrides = entry["configs"]
            topic.config = LogConfig.from_properties(topic.overrides, self.defaults)
            for partition in topic.open.values():
                partition.log.config = topic.config
        topic.owners = list(entry["owners"])
        topic.epochs = list(entry.get("epochs", [0] * len(topic.owners)))
        topic.handoffs = {int(p): int(s) for p, s in entry.get("handoffs", {}).items()}

    def _forget(self, topic: Topic, remove_data: bool) -> None:
        del self._topics[topic.name]
        self._by_id.pop(topic.topic_id, None)
        doomed: list[Path] = []
        for partition in topic.open.values():
            partition.data_arrived()
            partition.log.close()
            if remove_data:
                doomed.append(_mark_for_deletion(partition.log.directory))
        if doomed:
            # The renames are durable before anything is removed: a crash from here on leaves
            # only directories the next start knows it may delete.
            fsync_directory(self.data_dir)
            for directory in doomed:
                shutil.rmtree(directory, ignore_errors=True)
        topic.open.clear()

    # -- opening ------------------------------------------------------------------------

    def open(self, clean_shutdown: bool) -> None:
        """Load the map and open (recovering if needed) the logs this shard owns."""
        self._clean_shutdown = clean_shutdown
        self._load(force=True)
        opened = 0
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
                self._complete_handoff(topic.name, index, target)
            for index in [i for i in topic.open if topic.owners[i] != self.node_id]:
                closing = topic.open.pop(index)
                closing.data_arrived()
                closing.log.close()

    def _complete_handoff(self, name: str, index: int, target: int) -> None:
        with self._locked():
            topic = self._topics.get(name)
            if topic is None or topic.handoffs.get(index) != target:
                return
            del topic.handoffs[index]
            topic.owners[index] = target
            topic.epochs[index] += 1
            self._save()
        log.info("handed %s-%d to shard %d", name, index, target)

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
        if topic is None or not 0 <= index < topic.partition_count:
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

    # -- changes ------------------------------------------------------------------------

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
        check_topic_name(name)
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"{num_partitions} partitions: must be between 1 and {MAX_PARTITIONS}"
            )
        overrides = dict(configs or {})
        config = self._config(overrides)
        with self._locked():
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            placed = owners or [i % self.shard_count for i in range(num_partitions)]
            topic = Topic(name, uuid.uuid4(), config, overrides, placed, [0] * num_partitions,
                          internal)  # fmt: skip
            if validate_only:
                return topic
            self._topics[name], self._by_id[topic.topic_id] = topic, topic
            self._save()
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def _config(self, overrides: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(overrides, self.defaults)
        except ConfigError as exc:
            raise InvalidConfigurationError(str(exc)) from exc

    def delete(self, name: str) -> None:
        """Delete a topic; each shard removes the data of the partitions it owned."""
        with self._locked():
            topic = self._topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            self._forget(topic, remove_data=True)
            self._save()
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow a topic to ``total`` partitions (never shrink, as in Kafka)."""
        with self._locked():
            topic = self._topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if not topic.partition_count < total <= MAX_PARTITIONS:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {topic.partition_count} partitions; {total} is not more"
                )
            if validate_only:
                return
            for index in range(topic.partition_count, total):
                topic.owners.append(index % self.shard_count)
                topic.epochs.append(0)
            self._save()

    def alter_configs(
        self, name: str, overrides: dict[str, str], validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (AlterConfigs semantics: not merged)."""
        config = self._config(overrides)
        with self._locked():
            topic = self._topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if validate_only:
                return
            topic.overrides, topic.config = dict(overrides), config
            for partition in topic.open.values():
                partition.log.config = config
            self._save()

    def request_handoff(self, name: str, index: int, target: int) -> None:
        """Ask the owner of ``name-index`` to hand it to shard ``target`` (see :meth:`refresh`)."""
        with self._locked():
            topic = self._topics.get(name)
            if topic is None or not 0 <= index < topic.partition_count:
                raise UnknownTopicOrPartitionError(f"{name}-{index} does not exist")
            if topic.internal:
                raise InvalidPartitionsError(f"{name} is internal; its partitions do not move")
            if topic.owners[index] == target:
                return
            topic.handoffs[index] = target
            self._save()

    def close(self) -> bool:
        """Close every open log; False if any was offline or failed to close cleanly."""
        clean = True
        for partition in self.partitions():
            partition.data_arrived()
            clean = partition.log.close() and clean
        return clean


DELETE_SUFFIX = "-delete"
# What _mark_for_deletion makes, and nothing else: a user's "backup-delete" folder stays.
_MARKED_FOR_DELETION = re.compile(r".+-\d+\.[0-9a-f]{32}-delete")


def _mark_for_deletion(directory: Path) -> Path:
    """Rename a partition directory to ``NAME-IDX.<id>-delete`` (Kafka's spelling); the new
    path, or the old one when the directory is already gone."""
    marked = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
    try:
        directory.rename(marked)
    except FileNotFoundError:
        return directory
    return marked


def remove_orphans(data_dir: Path, catalog: TopicCatalog) -> None:
    """Finish deletions a crash interrupted, and touch nothing else.

    Only directories a topic deletion renamed (``…-delete``) are removed. A directory that
    looks like a partition of a topic the map does not know (a user's folder, or a topic whose
    map entry was lost) is left alone and named in one warning.
    """
    unknown: list[str] = []
    for child in sorted(data_dir.iterdir()):
        if not child.is_dir():
            continue
        if _MARKED_FOR_DELETION.fullmatch(child.name):
            log.info("removing %s: a deleted topic's data", child)
            shutil.rmtree(child, ignore_errors=True)
            continue
        name, _, index = child.name.rpartition("-")
        if index.isdigit() and name and name not in catalog and any(child.glob("*.log")):
            unknown.append(child.name)
    if unknown:
        log.warning(
            "%s: left alone %d director%s that look like partitions of topics kayak does not "
            "know: %s",
            data_dir, len(unknown), "y" if len(unknown) == 1 else "ies", ", ".join(unknown),
        )  # fmt: skip
