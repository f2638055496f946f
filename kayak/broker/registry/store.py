"""The embedded registry's ``_schemas``: written through the broker's own log.

Every change is one record batch written to ``_schemas`` through the broker's
:class:`~kayak.broker.log.LogWriter`, on disk (whatever ``--flush`` says) and readable by
fetches before it is applied (:meth:`~kayak.registry.store.RegistryStore.apply_record`) and
answered; on start the topic is replayed from the beginning. The state, the records and how
they apply are :mod:`kayak.registry.store`'s, shared with the standalone registry.

The topic is created with the first change, not at start: a broker whose registry is never
used lists no extra topic. The broker is ``_schemas``' only writer here, so nothing another
registry wrote needs reading before a change is decided.
"""

from __future__ import annotations

import contextlib
import logging
import time

from kayak.broker.catalog import TopicCatalog
from kayak.broker.log import LogWriter
from kayak.broker.log.replay import replay_records
from kayak.broker.topic import Partition
from kayak.errors import KafkaError, TopicExistsError
from kayak.protocol.records import build_record_batch
from kayak.registry import errors
from kayak.registry.store import TOPIC, RegistryStore, schema_key

log = logging.getLogger(__name__)

__all__ = ["TOPIC", "SchemaStore", "schema_key"]


class SchemaStore(RegistryStore):
    """The registry's state, durable in the broker's ``_schemas`` partition."""

    def __init__(self, catalog: TopicCatalog, writer: LogWriter) -> None:
        super().__init__()
        self._catalog = catalog
        self._partition: Partition | None = None
        self._writer = writer

    @classmethod
    def open(cls, catalog: TopicCatalog, writer: LogWriter) -> SchemaStore:
        """The store, with the state ``_schemas`` holds if it exists."""
        store = cls(catalog, writer)
        if catalog.get(TOPIC) is not None:
            try:
                store._partition = catalog.partition(TOPIC, 0)
                store._replay(store._partition)
            except KafkaError as exc:
                # The broker still serves every other partition; writes here fail clearly.
                log.error("schema registry state unavailable: %s", exc)
        return store

    def _topic_partition(self) -> Partition:
        """``_schemas``' only partition, creating the topic (on shard 0) the first time."""
        if self._partition is None:
            if self._catalog.get(TOPIC) is None:
                with contextlib.suppress(TopicExistsError):
                    # Not internal: like Confluent's, any Kafka client may list and read it.
                    self._catalog.create(TOPIC, 1, {"cleanup.policy": "compact"}, owners=[0])
            self._partition = self._catalog.partition(TOPIC, 0)
        return self._partition

    async def _refresh(self) -> None:
        """Nothing to read: the broker is ``_schemas``' only writer."""

    async def _commit(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """Append one batch, wait until it is on disk and readable (50001 if that fails),
        then apply it."""
        try:
            partition = self._topic_partition()
            batch = build_record_batch(values, keys=keys, timestamp=int(time.time() * 1000))
            first = partition.log.log_end_offset
            await self._writer.write(partition.log, batch, on_disk=True)
        except (KafkaError, OSError, ValueError) as exc:
            log.error("cannot write %s: %s", TOPIC, exc)
            raise errors.store_error(f"cannot write {TOPIC}: {exc}") from exc
        for index, (key, value) in enumerate(zip(keys, values, strict=True)):
            self.apply_record(key, value, first + index)

    def _replay(self, partition: Partition) -> None:
        """Rebuild the registry from ``_schemas``. A damaged batch (see ``replay_records``) or
        a record that is not the registry's is skipped with one warning; the rest is applied."""
        count = 0
        for record in replay_records(partition.log):
            value = None if record.value is None else bytes(record.value)
            key = None if record.key is None else bytes(record.key)
            count += self.apply_record(key, value, record.offset)
        self.log_restored(count)
