"""The registry's state in the ``_schemas`` topic of any Kafka cluster, through kayak's client.

At start the topic is created if missing (compacted, one partition, replicated to
min(3, brokers), ``min.insync.replicas`` one less than that) and read to its end. One
consumer then follows it for as long as the registry runs, applying every record (its own
and other registries') in log order; nothing else changes the state. A change is produced
(``acks=all``, idempotent) and answered only once that reader has applied it: the answer is
what the log says, so registries sharing the topic agree on every id and version (see
:mod:`kayak.registry.store` for how a change decided on a stale state is rejected and
decided again). Before deciding a change the store reads to the topic's current end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from kayak.client import Admin, Consumer, NewTopic, OffsetSpec, Producer, TopicPartition
from kayak.client.config import admin_share
from kayak.errors import KafkaError, KayakError, TopicExistsError, UnknownTopicOrPartitionError
from kayak.registry import errors
from kayak.registry.store import TOPIC, RegistryStore

log = logging.getLogger(__name__)

# How long a change (or a read to the end) may take before the client gets a 50001.
_STORE_TIMEOUT_S = 30.0
_POLL_MS = 500
_RETRY_S = 1.0  # after a failed poll, before the reader polls again


class StoreUnavailableError(KayakError):
    """``_schemas`` cannot be created, read or is not shaped like the registry's."""


def topic_settings(brokers: int) -> tuple[int, dict[str, str]]:
    """The replication factor and configs of a new ``_schemas`` on ``brokers`` brokers."""
    replication = max(1, min(3, brokers))
    # One replica may be down and writes still go on, while a write still reaches two
    # replicas wherever there are two.
    min_insync = max(1, replication - 1)
    return replication, {"cleanup.policy": "compact", "min.insync.replicas": str(min_insync)}


class ClusterSchemaStore(RegistryStore):
    """The registry's state, kept in ``_schemas`` of the cluster ``properties`` reach.

    ``properties`` are Kafka client properties (``bootstrap.servers``, security, ...); the
    share every client takes (:func:`~kayak.client.config.admin_share`) is used by the admin
    client, the producer and the consumer alike, the rest is ignored. ``topic`` replaces
    ``_schemas`` (Confluent's ``kafkastore.topic``): kayak's broker keeps ``_schemas`` for its
    own registry and refuses clients' writes there.
    """

    def __init__(self, properties: Mapping[str, str], topic: str = TOPIC) -> None:
        super().__init__()
        self.topic = topic
        self._partition = TopicPartition(topic, 0)
        self._properties = admin_share(dict(properties))
        ignored = sorted(set(properties) - set(self._properties))
        if ignored:
            log.warning("ignoring %s: only settings every client takes apply", ", ".join(ignored))
        # The admin client asks for the topic's end: on a connection of its own, not queued
        # behind the reader's long-polling fetches.
        self._admin: Admin | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self._applied = 0  # the offset of the next record to apply
        self._progress = asyncio.Condition()

    async def start(self) -> None:
        """Create ``_schemas`` if missing, read it to its end, and start following it."""
        try:
            self._admin = Admin(self._properties)
            await self._admin.start()
            await self._ensure_topic(self._admin)
            consumer = Consumer({
                **self._properties,
                "enable.auto.commit": "false",
                "auto.offset.reset": "earliest",
            })  # fmt: skip
            self._consumer = consumer
            await consumer.start()
            consumer.assign([self._partition])
            consumer.seek_to_beginning(self._partition)
            producer = Producer({
                **self._properties, "acks": "all", "enable.idempotence": "true", "linger.ms": "0",
            })  # fmt: skip
            self._producer = producer
            await producer.start()
            end = await self._end_offset()
            count = 0
            while self._applied < end:
                count += await self._read_once()
            self.log_restored(count)
        except BaseException:
            await self.close()
            raise
        self._reader = asyncio.create_task(self._follow(), name=f"{self.topic}-reader")
        await self.secure_ids()

    async def close(self) -> None:
        self._stopping = True
        if self._reader is not None:
            self._reader.cancel()
            # The reader also stops on its own at its next turn (_stopping), should the
            # cancellation be lost inside the consumer's poll.
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for client in (self._producer, self._consumer, self._admin):
            if client is not None:
                await client.close()
        self._producer, self._consumer, self._admin = None, None, None

    async def _ensure_topic(self, admin: Admin) -> None:
        """Create the topic unless it exists (looked up first: a user who may not create
        topics can still use one made for it); refuse one with more than one partition."""
        try:
            described = (await admin.describe_topics([self.topic]))[self.topic]
        except UnknownTopicOrPartitionError:
            await self._create_topic(admin)
            described = (await admin.describe_topics([self.topic]))[self.topic]
        if described.partition_count != 1:
            raise StoreUnavailableError(
                f"{self.topic} has {described.partition_count} partitions: the registry needs one"
            )

    async def _create_topic(self, admin: Admin) -> None:
        cluster = await admin.describe_cluster()
        replication, configs = topic_settings(len(cluster.brokers))
        try:
            await admin.create_topics([NewTopic(self.topic, 1, replication, configs)])
        except TopicExistsError:
            return  # another registry was first
        except KafkaError as exc:
            # kayak's broker keeps _schemas for its embedded registry and refuses this.
            raise StoreUnavailableError(
                f"cannot create {self.topic}: {exc} (if the cluster keeps {self.topic} for "
                "its own registry, choose another topic)"
            ) from None
        log.info("created %s (replication factor %d)", self.topic, replication)

    # -- reading the topic ------------------------------------------------------------------

    async def _end_offset(self) -> int:
        assert self._admin is not None
        ends = await self._admin.list_offsets({self._partition: OffsetSpec.LATEST})
        return ends[self._partition].offset

    async def _read_once(self) -> int:
        """Apply what one poll brings; the number of the registry's records among it."""
        assert self._consumer is not None
        batches = await self._consumer.getmany(self._partition, timeout_ms=_POLL_MS)
        count = 0
        for record in batches.get(self._partition, []):
            key = None if record.key is None else bytes(record.key)
            value = None if record.value is None else bytes(record.value)
            count += self.apply_record(key, value, record.offset)
            self._applied = record.offset + 1
        # Past compacted-away offsets and transaction markers, which no record shows.
        self._applied = max(self._applied, await self._consumer.position(self._partition))
        async with self._progress:
            self._progress.notify_all()
        return count

    async def _follow(self) -> None:
        """Apply records as they come, for as long as the registry runs."""
        while not self._stopping:
            try:
                await self._read_once()
            except KayakError as exc:
                log.warning("reading %s: %s; retrying", self.topic, exc)
                await asyncio.sleep(_RETRY_S)

    async def _applied_up_to(self, end: int) -> None:
        """Wait until every record before offset ``end`` has been applied (50001 if that
        takes longer than the store's timeout)."""
        try:
            async with asyncio.timeout(_STORE_TIMEOUT_S), self._progress:
                await self._progress.wait_for(lambda: self._applied >= end)
        except TimeoutError:
            raise errors.store_error(
                f"{self.topic} was not read up to offset {end} within {_STORE_TIMEOUT_S:.0f} s"
            ) from None

    # -- RegistryStore ------------------------------------------------------------------

    async def _refresh(self) -> None:
        try:
            end = await self._end_offset()
        except KayakError as exc:
            raise errors.store_error(f"cannot read {self.topic}: {exc}") from exc
        await self._applied_up_to(end)

    async def _commit(self, keys: list[bytes], values: list[bytes | None]) -> None:
        if self._producer is None:
            raise errors.store_error("the registry is not running")
        try:
            async with asyncio.timeout(_STORE_TIMEOUT_S):
                stored = await self._producer.send_batch(self.topic, values, keys, partition=0)
                last = (await stored)[-1].offset
        except (KayakError, TimeoutError) as exc:
            log.error("cannot write %s: %s", self.topic, exc)
            raise errors.store_error(f"cannot write {self.topic}: {exc}") from exc
        await self._applied_up_to(last + 1)
