"""The transaction coordinator: one transactional id's producer epochs and transactions.

It follows Kafka's transaction protocol as clients of ``transaction.version`` 1 speak it
(KIP-98, with KIP-360's epoch bumps and KIP-447's group metadata): InitProducerId fences the
previous producer of an id, AddPartitionsToTxn / AddOffsetsToTxn open a transaction and name
its partitions, EndTxn decides it. The decision is durable in ``__transaction_state``
(PrepareCommit / PrepareAbort) before any marker is written; then each partition gets its
marker, then the id is CompleteCommit / CompleteAbort. A crash after the decision finishes
the markers at the next start; a crash before it leaves the transaction open, and its
timeout aborts it. Every state is written before it is acted on or answered, so what the
coordinator says survives a crash.

kayak does not advertise ``transaction.version`` 2 (KIP-890 part 2: an epoch bump per
transaction and partitions added implicitly by Produce v12): clients fall back to the v1
flow, which every client speaks, and the produce path's check that a transactional batch's
partition was added to its open transaction (KIP-890 part 1) closes the hanging-transaction
hole that v2 closes for clients that cannot use it.

Operations on one transactional id run one at a time (a lock per id), so an EndTxn writing
markers is never interleaved with an InitProducerId fencing the same producer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from kayak.broker.log.producer_state import MAX_EPOCH, ProducerIdAllocator
from kayak.broker.txn import crash_points
from kayak.broker.txn.markers import MarkerWriter
from kayak.broker.txn.records import TopicPartition, TxnMetadata, TxnState
from kayak.broker.txn.state_log import TransactionStateLog
from kayak.errors import (
    ConcurrentTransactionsError,
    InvalidPidMappingError,
    InvalidTxnStateError,
    InvalidTxnTimeoutError,
    ProducerFencedError,
)

log = logging.getLogger(__name__)

CONSUMER_OFFSETS = "__consumer_offsets"
DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """The transactions of the ids that hash to this shard."""

    def __init__(
        self,
        state_log: TransactionStateLog,
        producer_ids: ProducerIdAllocator,
        markers: MarkerWriter,
        *,
        offsets_partition_for: Callable[[str], int] = lambda group: 0,
        allocate_id: Callable[[], int] | None = None,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
    ) -> None:
        self._log = state_log
        self._ids = producer_ids
        self._allocate = allocate_id if allocate_id is not None else producer_ids.allocate
        self._markers = markers
        self._offsets_partition_for = offsets_partition_for
        self.max_timeout_ms = max_timeout_ms
        self._txns: dict[str, TxnMetadata] = state_log.replay()
        self._locks: dict[str, asyncio.Lock] = {}

    # -- reading ------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TxnMetadata | None:
        txn = self._txns.get(transactional_id)
        return None if txn is None else txn.copy()

    def transactions(self) -> list[TxnMetadata]:
        return [txn.copy() for txn in self._txns.values()]

    def check_produce(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> None:
        """Refuse a transactional batch whose partition its transaction does not hold
        (KIP-890 part 1): a late batch of a transaction already decided would otherwise open
        a transaction nobody ends. Ids coordinated by another shard are not checked here.

        As Kafka verifies: a producer id that is not the id's (INVALID_PRODUCER_ID_MAPPING),
        then an epoch that is not its current one (PRODUCER_FENCED: a zombie), then the
        transaction's state and partitions (INVALID_TXN_STATE)."""
        self._current(transactional_id, producer_id, epoch)
        txn = self._txns[transactional_id]
        if txn.state is not TxnState.ONGOING or (topic, partition) not in txn.partitions:
            raise InvalidTxnStateError(
                f"{topic}-{partition} is not part of an ongoing transaction of "
                f"{transactional_id!r} (state {txn.state.kafka_name})"
            )

    # -- the protocol -------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, int]:
        """The producer id and epoch for a new (or re-initialising) producer of the id.

        An open transaction of the previous producer is aborted first, with a bumped epoch
        that fences that producer everywhere its transaction wrote.
        """
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTxnTimeoutError(
                f"transaction timeout {timeout_ms} ms is outside (0, "
                f"transaction.max.timeout.ms={self.max_timeout_ms}]"
            )
        async with self._lock(transactional_id):
            txn = self._txns.get(transactional_id)
            if txn is None:
                fresh = TxnMetadata(
                    transactional_id, self._allocate(), 0, timeout_ms, last_update_ms=_now_ms()
                )
                await self._save(fresh)
                return fresh.producer_id, fresh.producer_epoch
            if txn.state.preparing:
                raise ConcurrentTransactionsError(
                    f"transaction of {transactional_id!r} is completing; retry"
                )
            if producer_id >= 0 and (producer_id, epoch) != (txn.producer_id, txn.producer_epoch):
                raise ProducerFencedError(
                    f"producer {producer_id} epoch {epoch} is not the current producer of "
                    f"{transactional_id!r}"
                )
            if txn.state is TxnState.ONGOING:
                txn = await self._finish(txn, commit=False, fence=True)
                if txn.state.preparing:  # markers pending: the abort is not over yet
                    raise ConcurrentTransactionsError(
                        f"aborting the open transaction of {transactional_id!r}; retry"
                    )
            bumped = txn.copy()
            bumped.producer_id, bumped.producer_epoch = self._bump(txn)
            bumped.timeout_ms = timeout_ms
            bumped.state, bumped.partitions, bumped.start_ms = TxnState.EMPTY, set(), -1
            bumped.last_update_ms = _now_ms()
            await self._save(bumped)
            return bumped.producer_id, bumped.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """Make ``partitions`` part of the producer's transaction, opening one if needed."""
        wanted = set(partitions)
        async with self._lock(transactional_id):
            txn = self._current(transactional_id, producer_id, epoch)
            if txn.state.preparing:
                raise ConcurrentTransactionsError(
                    f"transaction of {transactional_id!r} is completing; retry"
                )
            if txn.state is TxnState.ONGOING and wanted <= txn.partitions:
                return
            opened = txn.copy()
            if opened.state is not TxnState.ONGOING:
                opened.state, opened.partitions = TxnState.ONGOING, set()
                opened.start_ms = _now_ms()
            opened.partitions |= wanted
            opened.last_update_ms = _now_ms()
            await self._save(opened)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> None:
        """Make the group's offsets partition part of the transaction (AddOffsetsToTxn)."""
        partition = (CONSUMER_OFFSETS, self._offsets_partition_for(group))
        await self.add_partitions(transactional_id, producer_id, epoch, [partition])

    async def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> None:
        """Commit or abort the producer's transaction (EndTxn); a retry of one already
        completed the same way succeeds again."""
        async with self._lock(transactional_id):
            txn = self._current(transactional_id, producer_id, epoch)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if txn.state is TxnState.ONGOING:
                await self._finish(txn, commit)
            elif txn.state is done:
                return
            elif txn.state.preparing:
                raise ConcurrentTransactionsError(
                    f"transaction of {transactional_id!r} is completing; retry"
                )
            else:
                raise InvalidTxnStateError(
                    f"cannot {'commit' if commit else 'abort'} {transactional_id!r}: it is "
                    f"{txn.state.kafka_name}"
                )

    # -- background ---------------------------------------------------------------------

    async def resume(self) -> None:
        """Finish the markers of every transaction decided but not completed (at start, and
        later for markers that failed)."""
        for transactional_id, txn in list(self._txns.items()):
            if not txn.state.preparing:
                continue
            async with self._lock(transactional_id):
                current = self._txns.get(transactional_id)
                if current is not None and current.state.preparing:
                    await self._write_markers_and_complete(current)

    async def abort_timed_out(self, now_ms: int | None = None) -> list[str]:
        """Abort (fencing their producers) transactions open longer than their timeout."""
        now = _now_ms() if now_ms is None else now_ms
        aborted = []
        for transactional_id, txn in list(self._txns.items()):
            if txn.state is not TxnState.ONGOING or now < txn.start_ms + txn.timeout_ms:
                continue
            async with self._lock(transactional_id):
                current = self._txns.get(transactional_id)
                if current is None or current.state is not TxnState.ONGOING:
                    continue
                log.info(
                    "aborting transaction of %r: open for more than %d ms",
                    transactional_id,
                    current.timeout_ms,
                )
                await self._finish(current, commit=False, fence=True)
                aborted.append(transactional_id)
        return aborted

    # -- internals ----------------------------------------------------------------------

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise InvalidPidMappingError(
                f"producer {producer_id} is not the producer of {transactional_id!r}"
            )
        if txn.producer_epoch != epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {epoch} of {transactional_id!r} was fenced by "
                f"epoch {txn.producer_epoch}"
            )
        return txn

    def _bump(self, txn: TxnMetadata) -> tuple[int, int]:
        if txn.producer_epoch >= MAX_EPOCH:
            return self._allocate(), 0
        return txn.producer_id, txn.producer_epoch + 1

    async def _save(self, txn: TxnMetadata) -> None:
        await self._log.write(txn)
        self._txns[txn.transactional_id] = txn

    async def _finish(self, txn: TxnMetadata, commit: bool, fence: bool = False) -> TxnMetadata:
        """Decide ``txn`` (durably), write its markers, complete it. ``fence`` bumps the
        epoch first, so the markers fence the producer that still thinks it is open."""
        prepared = txn.copy()
        if fence and prepared.producer_epoch < MAX_EPOCH:
            prepared.producer_epoch += 1
        prepared.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        prepared.last_update_ms = _now_ms()
        await self._save(prepared)
        crash_points.crash_point(crash_points.PREPARED)
        return await self._write_markers_and_complete(prepared)

    async def _write_markers_and_complete(self, prepared: TxnMetadata) -> TxnMetadata:
        commit = prepared.state is TxnState.PREPARE_COMMIT
        failed = await self._markers.write(
            sorted(prepared.partitions), prepared.producer_id, prepared.producer_epoch, commit
        )
        if failed:
            # The decision is durable: the markers are retried (resume) until they are in.
            names = ", ".join(f"{t}-{p}: {exc.message}" for (t, p), exc in failed.items())
            log.warning(
                "transaction of %r: markers pending for %s", prepared.transactional_id, names
            )
            return prepared
        done = prepared.copy()
        done.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        done.partitions, done.start_ms, done.last_update_ms = set(), -1, _now_ms()
        await self._save(done)
        crash_points.crash_point(crash_points.COMPLETED)
        return done
