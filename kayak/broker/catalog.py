"""The broker's topics: names, stable topic ids, partitions and per-topic configs.

Partition logs live where Kafka puts them (``DATA_DIR/TOPIC-PARTITION/``); the list of topics
with their ids and config overrides is one small JSON file replaced atomically on change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.files import write_atomically
from kayak.errors import (
    ConfigError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

CATALOG_FILE = "topics.json"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
MAX_PARTITIONS = 10_000


def check_topic_name(name: str) -> None:
    """Kafka's topic naming rules, raised as INVALID_TOPIC_EXCEPTION."""
    if name in (".", "..") or not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"{name!r} is not a legal topic name: 1-249 of [a-zA-Z0-9._-], not '.' or '..'"
        )


@dataclass(eq=False)
class Partition:
    """One partition of a topic: its log and whoever waits for data to arrive in it."""

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
    name: str
    topic_id: uuid.UUID
    config: LogConfig
    overrides: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)
    internal: bool = False


class TopicCatalog:
    """Every topic the broker has, loaded from and saved to the data directory."""

    def __init__(self, data_dir: Path, defaults: LogConfig) -> None:
        self.data_dir = data_dir
        self.defaults = defaults
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}

    # -- loading ------------------------------------------------------------------------

    def open(self, clean_shutdown: bool) -> None:
        """Load the topic list and open (recovering if needed) every partition log."""
        path = self.data_dir / CATALOG_FILE
        if not path.exists():
            return
        saved = json.loads(path.read_text())
        for name, entry in saved["topics"].items():
            config = LogConfig.from_properties(entry["configs"], self.defaults)
            topic = Topic(name, uuid.UUID(entry["id"]), config, entry["configs"])
            topic.internal = bool(entry.get("internal", False))
            for index in range(entry["partitions"]):
                plog = PartitionLog.open(self._partition_dir(name, index), config, clean_shutdown)
                topic.partitions.append(Partition(name, index, plog))
            self._add(topic)
        log.info("opened %d topics from %s", len(self._topics), self.data_dir)

    def _save(self) -> None:
        topics = {
            t.name: {
                "id": str(t.topic_id),
                "partitions": len(t.partitions),
                "configs": t.overrides,
                "internal": t.internal,
            }
            for t in self._topics.values()
        }
        write_atomically(self.data_dir / CATALOG_FILE, json.dumps({"topics": topics}, indent=1))

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    def _add(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    # -- lookups ------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[Topic]:
        return list(self._topics.values())

    def partition(self, name: str, index: int) -> Partition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION."""
        topic = self._topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            raise UnknownTopicOrPartitionError(f"{name}-{index} does not exist")
        return topic.partitions[index]

    def partitions(self) -> list[Partition]:
        return [p for t in self._topics.values() for p in t.partitions]

    # -- changes ------------------------------------------------------------------------

    def create(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str] | None = None,
        internal: bool = False,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic (TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, ... on bad input)."""
        check_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"{num_partitions} partitions: must be between 1 and {MAX_PARTITIONS}"
            )
        overrides = dict(configs or {})
        config = self._config(overrides)
        topic = Topic(name, uuid.uuid4(), config, overrides, internal=internal)
        if validate_only:
            return topic
        for index in range(num_partitions):
            plog = PartitionLog.open(self._partition_dir(name, index), config)
            topic.partitions.append(Partition(name, index, plog))
        self._add(topic)
        self._save()
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def _config(self, overrides: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(overrides, self.defaults)
        except ConfigError as exc:
            raise InvalidConfigurationError(str(exc)) from exc

    def delete(self, name: str) -> None:
        """Delete a topic and its data."""
        topic = self._topics.pop(name, None)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        del self._by_id[topic.topic_id]
        self._save()
        for partition in topic.partitions:
            partition.data_arrived()
            partition.log.close()
            shutil.rmtree(partition.log.directory, ignore_errors=True)
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow a topic to ``total`` partitions (never shrink, as in Kafka)."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if not len(topic.partitions) < total <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {len(topic.partitions)} partitions; {total} is not more"
            )
        if validate_only:
            return
        for index in range(len(topic.partitions), total):
            plog = PartitionLog.open(self._partition_dir(name, index), topic.config)
            topic.partitions.append(Partition(name, index, plog))
        self._save()

    def alter_configs(
        self, name: str, overrides: dict[str, str], validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (AlterConfigs semantics: not merged)."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        config = self._config(overrides)
        if validate_only:
            return
        topic.overrides, topic.config = dict(overrides), config
        for partition in topic.partitions:
            partition.log.config = config
        self._save()

    def close(self) -> None:
        for partition in self.partitions():
            partition.data_arrived()
            partition.log.close()
