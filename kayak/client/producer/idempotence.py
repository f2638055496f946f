"""The idempotent producer's bookkeeping: its producer id and epoch, and per-partition sequences.

With ``enable.idempotence`` the broker stores each batch once and in order (KIP-98): every batch
carries the producer id, its epoch and the sequence number of its first record; the broker
refuses a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and answers a batch it already has with the
original offsets. The producer's side of the bargain, kept here:

- one producer id and epoch from InitProducerId, asked of any broker at start;
- per partition, the next sequence to hand out, given to a batch the first time it is drained,
  so sequences follow the order batches are sent in; a retried batch keeps its sequence;
- at most five batches in flight per partition (the broker remembers the last five), and a
  retried batch goes out only when nothing else of its partition is in flight, so it lands
  before the batches that followed it;
- a partition's first batch of an epoch goes alone: a broker that has stored nothing of ours
  takes any sequence, so batches behind a refused first one would be stored before it;
- when the broker has lost track of us (UNKNOWN_PRODUCER_ID), or a batch's sequence can no
  longer be filled in (a sequenced batch failed for good, or the broker refuses the batch we
  expect to come next), the epoch is bumped (KIP-360): sending pauses until nothing is in
  flight, InitProducerId gives a new epoch (or, from brokers older than InitProducerId v3, a
  new producer id), and every unacknowledged batch is numbered again from 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kayak.client.backoff import BackoffStrategy, Deadline
from kayak.client.cluster import Cluster
from kayak.client.producer.batch import PartitionQueue, ProducerBatch
from kayak.errors import (
    KafkaError,
    KafkaTimeoutError,
    KayakError,
    UnsupportedVersionError,
    error_for_code,
)
from kayak.protocol.messages import InitProducerIdRequest
from kayak.protocol.messages.init_producer_id_response import InitProducerIdResponse

log = logging.getLogger(__name__)

__all__ = ["MAX_IN_FLIGHT_PER_PARTITION", "SEQUENCE_WRAP", "IdempotenceManager"]

MAX_IN_FLIGHT_PER_PARTITION = 5
"""The broker keeps the last five batches per producer to recognise retries."""

SEQUENCE_WRAP = 2**31
"""Sequences are int32 and wrap from 2**31 - 1 to 0."""

# Java asks for the longest timeout: an idempotent producer has no transactions to time out.
_NO_TRANSACTION_TIMEOUT_MS = 2**31 - 1
# InitProducerId v3 (Kafka 2.5, KIP-360) takes the current id and epoch and bumps the epoch.
_BUMP_VERSION = 3


class IdempotenceManager:
    """The producer id and epoch, and the sequence rules of the idempotent producer.

    The transactional producer's :class:`~.transactions.TransactionManager` extends it; the
    hooks below (``batch_opened``, ``may_drain``) are where transactions step in.
    """

    transactional = False

    def __init__(self, cluster: Cluster, backoff: BackoffStrategy) -> None:
        self._cluster = cluster
        self._backoff = backoff
        self.producer_id = -1
        self.producer_epoch = -1
        self.bump_reason: str | None = None
        """Why the epoch must be bumped; None when it need not be."""

    @property
    def can_send(self) -> bool:
        """False until there is a producer id, and while an epoch bump is pending."""
        return self.producer_id >= 0 and self.bump_reason is None

    def batch_opened(self, queue: PartitionQueue) -> None:
        """A batch was opened for ``queue`` (transactions add its partition first)."""

    def may_drain(self, queue: PartitionQueue) -> bool:
        """Whether ``queue``'s batches may be sent now (transactions: once it was added)."""
        return True

    def batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch failed for good (transactions: so does the transaction). The idempotent
        producer's answer, an epoch bump, is the sender's to schedule."""

    # -- producer id ---------------------------------------------------------------------------

    async def initialize(self, deadline: Deadline) -> None:
        """Get a producer id and epoch (InitProducerId), retrying until ``deadline``."""
        self.producer_id, self.producer_epoch = await self._init_producer_id(deadline, bump=False)
        log.debug("producer id %d, epoch %d", self.producer_id, self.producer_epoch)

    def request_bump(self, reason: str) -> None:
        """Ask for a new epoch before anything else is sent (see the module docstring)."""
        if self.bump_reason is None:
            log.info("bumping the idempotent producer's epoch: %s", reason)
            self.bump_reason = reason

    async def bump(self, queues: Iterable[PartitionQueue], deadline: Deadline) -> None:
        """Get a new epoch (or producer id) and renumber every unacknowledged batch from 0.

        Call only when no batch is in flight: an answer to a batch of the old epoch must not
        arrive after the sequences were reset.
        """
        self.producer_id, self.producer_epoch = await self._init_producer_id(deadline, bump=True)
        for queue in queues:
            queue.reset_sequences()
        log.info("producer id %d now at epoch %d", self.producer_id, self.producer_epoch)
        self.bump_reason = None

    async def _init_producer_id(self, deadline: Deadline, *, bump: bool) -> tuple[int, int]:
        attempt = 0
        while True:
            try:
                return await self._ask_for_producer_id(bump)
            except KayakError as exc:
                if not _retriable(exc) or deadline.expired:
                    if isinstance(exc, KafkaTimeoutError | KafkaError) and _retriable(exc):
                        raise KafkaTimeoutError(
                            f"could not get a producer id for the idempotent producer: {exc}"
                        ) from exc
                    raise
                log.debug("InitProducerId failed, retrying: %s", exc)
            await asyncio.sleep(min(self._backoff.delay(attempt), deadline.remaining()))
            attempt += 1

    async def _ask_for_producer_id(self, bump: bool) -> tuple[int, int]:
        connection = await self._cluster.any_connection()
        try:
            version = connection.version_for(InitProducerIdRequest)
        except UnsupportedVersionError:
            raise UnsupportedVersionError(
                f"the broker at {connection.host}:{connection.port} does not support "
                "InitProducerId (Kafka 0.11+), which the idempotent producer needs; set "
                "enable.idempotence=false to produce to it"
            ) from None
        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=_NO_TRANSACTION_TIMEOUT_MS
        )
        if bump and version >= _BUMP_VERSION and self.producer_id >= 0:
            request.producer_id, request.producer_epoch = self.producer_id, self.producer_epoch
        response: InitProducerIdResponse = await connection.request(request, version)
        if response.error_code and request.producer_id >= 0:
            # The broker would not bump this epoch (it fenced or forgot the id): start afresh.
            log.info("epoch bump refused (error %d); asking for a new producer id",
                     response.error_code)  # fmt: skip
            request.producer_id = request.producer_epoch = -1
            response = await connection.request(request, version)
        if response.error_code:
            cls = error_for_code(response.error_code)
            raise cls(f"InitProducerId: {cls.default_message}")
        return response.producer_id, response.producer_epoch

    # -- sequences ------------------------------------------------------------------------------

    def assign_sequence(self, queue: PartitionQueue, batch: ProducerBatch) -> None:
        """Give ``batch`` the partition's next sequence numbers under the current epoch."""
        batch.set_producer_state(self.producer_id, self.producer_epoch, queue.next_sequence)
        queue.next_sequence = (queue.next_sequence + batch.record_count) % SEQUENCE_WRAP

    @staticmethod
    def acknowledged(queue: PartitionQueue, batch: ProducerBatch) -> None:
        """The broker stored ``batch``: its last sequence is the partition's last acked one."""
        queue.last_acked_sequence = (batch.base_sequence + batch.record_count - 1) % SEQUENCE_WRAP

    @staticmethod
    def is_next_expected(queue: PartitionQueue, batch: ProducerBatch) -> bool:
        """True if every batch before ``batch`` in its partition was acknowledged, so the broker
        refusing it as out of order means the broker lost our sequence (not a gap we will
        fill by retrying an earlier batch)."""
        return batch.base_sequence == (queue.last_acked_sequence + 1) % SEQUENCE_WRAP


def _retriable(exc: KayakError) -> bool:
    return bool(getattr(exc, "retriable", False))
