"""``__transaction_state``: where the transaction coordinator keeps its decisions.

Every state change of a transactional id (a new epoch, partitions added, prepare commit or
abort, complete) is one record, durable before the coordinator acts on it or answers; a start
replays the topic to the latest record of each id. The log cleaner compacts it to those
latest records (and tombstones, for ``delete.retention.ms``), so a replay after any cleaning
finds the same states. One partition per shard, owned by that shard, as with
``__consumer_offsets``: an id's transactions live with its coordinator.
"""

from __future__ import annotations

import logging
import struct
import time

from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import open_internal_topic
from kayak.broker.log import LogWriter
from kayak.broker.log.replay import replay_records
from kayak.broker.topic import Partition
from kayak.broker.txn.records import (
    TOPIC,
    TxnMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kayak.errors import CoordinatorNotAvailableError, KafkaError, KayakError
from kayak.protocol.records import build_record_batch

log = logging.getLogger(__name__)

_UNDECODABLE = (KayakError, struct.error, ValueError, UnicodeDecodeError)
# Kafka's settings of the topic where they matter for cleaning (the log cleaner keeps each
# id's latest state): compacted, in segments of transaction.state.log.segment.bytes.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


class TransactionStateLog:
    """This shard's partition of ``__transaction_state``."""

    def __init__(
        self, catalog: TopicCatalog, writer: LogWriter, node_id: int = 0, shard_count: int = 1
    ) -> None:
        open_internal_topic(catalog, TOPIC, shard_count, TOPIC_CONFIGS)
        self._partition: Partition = catalog.partition(TOPIC, node_id, online=False)
        self._writer = writer

    async def write(self, txn: TxnMetadata) -> None:
        """Append ``txn``'s state and wait until it is durable."""
        plog = self._partition.log
        batch = build_record_batch(
            [encode_value(txn)],
            keys=[encode_key(txn.transactional_id)],
            timestamp=int(time.time() * 1000),
        )
        try:
            # On disk whatever --flush says: the coordinator's decisions must survive a crash.
            await self._writer.write(plog, batch, on_disk=True)
        except (KafkaError, OSError) as exc:
            raise CoordinatorNotAvailableError(f"cannot write {TOPIC}: {exc}") from exc

    def replay(self) -> dict[str, TxnMetadata]:
        """The latest state of every transactional id in the topic."""
        plog = self._partition.log
        if plog.offline is not None:
            log.error("transaction state in %s unavailable: %s", TOPIC, plog.offline)
            return {}
        found: dict[str, TxnMetadata] = {}
        for record in replay_records(plog):
            try:
                if record.key is None:
                    raise ValueError("it has no key")
                transactional_id = decode_key(record.key)
                if record.value is None:
                    found.pop(transactional_id, None)
                else:
                    found[transactional_id] = decode_value(transactional_id, record.value)
            except _UNDECODABLE as exc:
                log.warning(
                    "%s offset %d: skipping a record that is not a transaction state: %s",
                    TOPIC,
                    record.offset,
                    exc,
                )
        return found

    @property
    def online(self) -> bool:
        return self._partition.log.offline is None
