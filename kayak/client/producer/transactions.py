"""The transactional producer's side of Kafka transactions (KIP-98), as Kafka's Java producer
and librdkafka do it.

With ``transactional.id`` the producer is idempotent (:mod:`.idempotence`) and, on top:

- ``init_transactions()`` finds the transaction coordinator of its transactional id
  (FindCoordinator, key type 1) and gets a producer id and epoch from it (InitProducerId with
  the transactional id and ``transaction.timeout.ms``). That fences any older producer of the
  same id and aborts a transaction it left open; on a later call the current id and epoch are
  passed along (KIP-360), so the coordinator bumps our own epoch rather than a stranger's.
- ``begin_transaction()`` is local. The first batch to each partition in a transaction waits
  until the coordinator has added the partition (AddPartitionsToTxn, all new partitions in
  one request); batches are marked transactional and Produce requests carry the id.
- ``send_offsets_to_transaction()`` adds the group to the transaction (AddOffsetsToTxn, to
  the transaction coordinator) and commits the offsets through the group coordinator
  (TxnOffsetCommit, with the consumer's generation, member id and group instance id, KIP-447,
  so a zombie member of an older generation is refused): they become visible on commit.
- ``commit_transaction()`` flushes, then EndTxn(commit); ``abort_transaction()`` fails what was
  not sent yet (:class:`~kayak.errors.TransactionAbortedError`), waits for what is in flight,
  then EndTxn(abort). A transaction that added nothing ends without EndTxn.

Errors are sorted as the Java producer sorts them. *Abortable*: the transaction cannot commit,
but ``abort_transaction()`` recovers (a record that could not be delivered, a topic or group
not authorized, a group that moved on, TRANSACTION_ABORTABLE, the coordinator having lost our
producer id); calls raise :class:`~kayak.errors.TransactionAbortRequiredError` until the abort,
which also bumps the epoch if a sequenced batch failed (sequences restart at 0). *Fatal*: the
producer is done (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH which old coordinators send for
it, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, INVALID_TXN_STATE from
the coordinator, UNSUPPORTED_VERSION, UNSUPPORTED_FOR_MESSAGE_FORMAT, anything unexpected):
every call raises that error again. Calls out of order (sending before ``begin_transaction()``,
committing twice) raise ``InvalidTxnStateError`` naming the problem and change nothing, like
Java's ``IllegalStateException``. COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS,
NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (coordinator looked up again) are retried with
backoff until the call's timeout.

**transaction.version (KIP-890).** kayak speaks the first transaction protocol everywhere:
explicit AddPartitionsToTxn (v3 at most, the client form), Produce up to v11 and EndTxn up to
v4, so the coordinator treats it as a transaction.version 1 client. That works against every
broker with transactions: Kafka 0.11 to 3.x, Kafka 4.x with transaction.version 2 finalized
(the coordinator picks the protocol per client by the EndTxn version; KIP-890 part 1's
server-side verification is satisfied because partitions are always added before the first
Produce), and brokers that do not advertise the feature at all (kayak's own). Version 2's
gains, no AddPartitionsToTxn round trip and an epoch bump per transaction, would need
Produce v12 / EndTxn v5 and a finalized feature to check before use; the v1 flow is what
librdkafka 2.x still sends too.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from kayak.client.backoff import BackoffStrategy, Deadline
from kayak.client.cluster import Cluster
from kayak.client.producer.batch import PartitionQueue, ProducerBatch
from kayak.client.producer.txn_coordinator import (
    CONCURRENT_TRANSACTIONS_BACKOFF,
    COORDINATOR_MOVED,
    CoordinatorRequests,
    Retry,
    check_transactions_supported,
)
from kayak.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kayak.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaTimeoutError,
    KayakError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    UnsupportedForMessageFormatError,
    UnsupportedVersionError,
    error_for_code,
)
from kayak.protocol.messages import (
    AddPartitionsToTxnRequest,
)
from kayak.protocol.records.record import NO_SEQUENCE

log = logging.getLogger(__name__)

__all__ = ["TransactionManager", "TxnState", "check_transactions_supported"]

_E = ErrorCode
_FENCED = frozenset({_E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH})
_ABORTABLE = frozenset({
    _E.TOPIC_AUTHORIZATION_FAILED, _E.GROUP_AUTHORIZATION_FAILED, _E.OPERATION_NOT_ATTEMPTED,
    _E.UNKNOWN_PRODUCER_ID, _E.INVALID_PRODUCER_ID_MAPPING, _E.TRANSACTION_ABORTABLE,
    _E.UNKNOWN_MEMBER_ID, _E.ILLEGAL_GENERATION, _E.FENCED_INSTANCE_ID,
    _E.REBALANCE_IN_PROGRESS, _E.INVALID_COMMIT_OFFSET_SIZE, _E.OFFSET_METADATA_TOO_LARGE,
})  # fmt: skip
# After these the coordinator has no valid producer state for us: the abort bumps the epoch.
_NEEDS_BUMP = frozenset({_E.UNKNOWN_PRODUCER_ID, _E.INVALID_PRODUCER_ID_MAPPING})

# A record's failure that ends the producer rather than the transaction. INVALID_PRODUCER_EPOCH
# from a partition leader is not one (KIP-588): the coordinator may have bumped the epoch to
# abort a timed-out transaction; the abort then tells a fenced producer (PRODUCER_FENCED).
_FATAL_BATCH_ERRORS = (
    ProducerFencedError,
    UnsupportedVersionError,
    UnsupportedForMessageFormatError,
    error_for_code(_E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    error_for_code(_E.CLUSTER_AUTHORIZATION_FAILED),
)


class TxnState(enum.Enum):
    """Where the transactional producer is (Java's ``TransactionManager.State``)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class TransactionManager(CoordinatorRequests):
    """Producer id, epoch and sequences (inherited) plus the transaction's state and requests."""

    transactional = True

    def __init__(
        self,
        cluster: Cluster,
        backoff: BackoffStrategy,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
    ) -> None:
        super().__init__(
            cluster,
            backoff,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        self.state = TxnState.UNINITIALIZED
        self._added: set[PartitionQueue] = set()
        self._pending: dict[PartitionQueue, None] = {}  # waiting for AddPartitionsToTxn
        self._adding: asyncio.Task[None] | None = None
        self._started = False  # the coordinator knows of this transaction (something added)
        self._abortable: KayakError | None = None
        self._fatal: KayakError | None = None
        self._needs_bump = False
        self.closing = False  # the producer is closing: no more waiting for the coordinator
        self._ending: asyncio.Task[None] | None = None  # EndTxn, kept across a timed-out call
        self._queues: Callable[[], Iterable[PartitionQueue]] = lambda: ()
        self._drop_unsent: Callable[[Callable[[ProducerBatch], BaseException]], object] = (
            lambda error_for: None
        )

    def attach(
        self,
        queues: Callable[[], Iterable[PartitionQueue]],
        drop_unsent: Callable[[Callable[[ProducerBatch], BaseException]], object],
    ) -> None:
        """Give the manager the accumulator's partition queues and a way to fail every batch
        not sent yet (the accumulator is made after the manager)."""
        self._queues = queues
        self._drop_unsent = drop_unsent

    # -- what the accumulator and sender ask ---------------------------------------------------

    @property
    def can_send(self) -> bool:
        return self.producer_id >= 0 and self.bump_reason is None and self.state in _SENDING

    @property
    def can_abort(self) -> bool:
        """True while there is a transaction that ``abort_transaction()`` would end."""
        return self._fatal is None and self.state in (
            TxnState.IN_TRANSACTION,
            TxnState.COMMITTING,
            TxnState.ABORTABLE_ERROR,
            TxnState.ABORTING,
        )

    def batch_opened(self, queue: PartitionQueue) -> None:
        """A batch was opened for ``queue``: add its partition to the transaction first."""
        if queue in self._added or queue in self._pending:
            return
        self._pending[queue] = None
        if self._adding is None or self._adding.done():
            self._adding = asyncio.ensure_future(self._add_partitions())

    def may_drain(self, queue: PartitionQueue) -> bool:
        return queue in self._added

    def batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch of this transaction failed: the transaction (or producer) with it."""
        if batch.base_sequence != NO_SEQUENCE:
            # Its sequence numbers will never be stored: later batches would leave a gap.
            self._needs_bump = True
        if self.state in (TxnState.ABORTING, TxnState.FATAL_ERROR) or isinstance(
            error, TransactionAbortedError
        ):
            return
        if isinstance(error, _FATAL_BATCH_ERRORS):
            self._become_fatal(error, later=True)
        else:
            self._become_abortable(error if isinstance(error, KayakError) else KayakError(error))

    # -- checks --------------------------------------------------------------------------------

    def check_can_send(self) -> None:
        """Raise unless a record may be sent now (called by ``send`` for every record)."""
        if self.state is TxnState.IN_TRANSACTION:
            return
        self._raise_if_failed()
        if self.state is TxnState.UNINITIALIZED:
            raise InvalidTxnStateError(
                f"the producer has transactional.id {self.transactional_id!r}: call "
                "init_transactions() once, then begin_transaction() before sending"
            )
        if self.state is TxnState.READY:
            raise InvalidTxnStateError(
                f"the producer has transactional.id {self.transactional_id!r}, so every record "
                "belongs to a transaction: call begin_transaction() before sending"
            )
        raise InvalidTxnStateError(
            f"cannot send while the transaction is {self.state.value}: wait for it to end, "
            "then begin_transaction()"
        )

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._abortable is not None:
            raise TransactionAbortRequiredError(
                f"the transaction failed ({self._abortable}): call abort_transaction(), then "
                "begin a new one",
                self._abortable,
            )

    def _require(self, what: str, *states: TxnState) -> None:
        if self.state in states:
            return
        self._raise_if_failed()
        hint = {
            TxnState.UNINITIALIZED: "call init_transactions() first",
            TxnState.READY: "no transaction is open: call begin_transaction() first",
            TxnState.IN_TRANSACTION: "a transaction is open: commit or abort it first",
            TxnState.COMMITTING: "the transaction is being committed: retry commit_transaction()",
            TxnState.ABORTING: "the transaction is being aborted: retry abort_transaction()",
        }.get(self.state, f"the transaction is {self.state.value}")
        raise InvalidTxnStateError(f"cannot {what}: {hint}")

    # -- state changes -------------------------------------------------------------------------

    def _become_abortable(self, error: KayakError) -> TransactionAbortRequiredError:
        if self._abortable is None and self.state is not TxnState.FATAL_ERROR:
            log.warning("transaction of %r must be aborted: %s", self.transactional_id, error)
            self._abortable = error
            self.state = TxnState.ABORTABLE_ERROR
            # Records not sent yet will not be: fail them now, so flush() and commit end.
            asyncio.get_running_loop().call_soon(self._drop_unsent, self._aborted_error)
        return TransactionAbortRequiredError(
            f"the transaction must be aborted: {error}", self._abortable or error
        )

    def _become_fatal(self, error: KayakError, *, later: bool = False) -> KayakError:
        if self._fatal is None:
            log.error("transactional producer %r cannot go on: %s", self.transactional_id, error)
            self._fatal = error
            self.state = TxnState.FATAL_ERROR

            def fail(_batch: ProducerBatch) -> BaseException:
                return error

            if later:  # called back from inside the accumulator: fail the rest afterwards
                asyncio.get_running_loop().call_soon(self._drop_unsent, fail)
            else:
                self._drop_unsent(fail)
        return self._fatal

    def _aborted_error(self, batch: ProducerBatch) -> BaseException:
        cause = f": {self._abortable}" if self._abortable is not None else ""
        return TransactionAbortedError(
            f"{batch.record_count} records for {batch.topic}-{batch.partition} were not sent: "
            f"their transaction was aborted{cause}"
        )

    def _error_for(self, code: int, what: str, message: str | None = None) -> KayakError:
        """The exception for a coordinator's answer that is not retried; moves the state."""
        cls = error_for_code(code)
        text = f"{what}: {message or cls.default_message}"
        if code in _FENCED:
            return self._become_fatal(_fenced(text))
        if code in _ABORTABLE and self.state is not TxnState.UNINITIALIZED:
            if code in _NEEDS_BUMP:
                self._needs_bump = True
            return self._become_abortable(cls(text))
        return self._become_fatal(cls(text))

    # -- life cycle of a transaction -----------------------------------------------------------

    async def initialize(self, deadline: Deadline) -> None:
        """init_transactions(): producer id and epoch from the transaction coordinator."""
        if self.state is not TxnState.UNINITIALIZED:
            self._raise_if_failed()
            raise InvalidTxnStateError("init_transactions() was called already: call it once")
        await self._coordinator_call("InitProducerId", deadline, self._init_once)
        self.state = TxnState.READY
        log.info("transactional id %r: producer id %d, epoch %d", self.transactional_id,
                 self.producer_id, self.producer_epoch)  # fmt: skip

    def begin(self) -> None:
        self._require("begin_transaction()", TxnState.READY)
        self._added.clear()
        self._pending.clear()
        self._started = False
        self.state = TxnState.IN_TRANSACTION

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata,
        deadline: Deadline,
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit. A timeout makes the transaction abortable
        (whether the offsets are part of it is not known)."""
        self._require("send_offsets_to_transaction()", TxnState.IN_TRANSACTION)
        try:
            await self._coordinator_call(
                "AddOffsetsToTxn", deadline, lambda c: self._add_offsets_once(c, group.group_id)
            )
            self._started = True
            await self._group_call(
                group.group_id, deadline, lambda c: self._txn_commit_once(c, offsets, group)
            )
        except KafkaTimeoutError as exc:
            raise self._become_abortable(exc) from exc

    async def commit(
        self, flush: Callable[[float | None], Awaitable[None]], deadline: Deadline
    ) -> None:
        """Flush, then EndTxn(commit). After a ``KafkaTimeoutError`` call again to go on."""
        if self.state is TxnState.COMMITTING and self._ending is not None:
            await self._await_ending(deadline)
            return
        self._require("commit_transaction()", TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        self.state = TxnState.COMMITTING
        await flush(deadline.remaining())
        self._raise_if_failed()  # a record failed: the transaction must be aborted
        self._ending = asyncio.ensure_future(self._end(True))
        await self._await_ending(deadline)

    async def abort(
        self, in_flight: Callable[[], list[asyncio.Future[None]]], deadline: Deadline
    ) -> None:
        """Drop unsent batches, wait for those in flight, EndTxn(abort), bump if need be."""
        if self._fatal is not None:
            raise self._fatal
        if self.state is TxnState.COMMITTING and self._ending is not None:
            raise InvalidTxnStateError(
                "cannot abort_transaction(): the commit is already with the coordinator "
                "(commit_transaction() timed out): call commit_transaction() again"
            )
        if self.state is TxnState.ABORTING and self._ending is not None:
            await self._await_ending(deadline)
            return
        self._require(
            "abort_transaction()",
            TxnState.IN_TRANSACTION,
            TxnState.COMMITTING,
            TxnState.ABORTABLE_ERROR,
            TxnState.ABORTING,
        )
        self.state = TxnState.ABORTING
        self._drop_unsent(self._aborted_error)
        waiters = in_flight()
        if waiters:
            _, pending = await asyncio.wait(waiters, timeout=deadline.remaining())
            if pending:
                raise KafkaTimeoutError(
                    f"abort_transaction: {len(pending)} batches still in flight after the "
                    "timeout; call abort_transaction() again"
                )
        self._ending = asyncio.ensure_future(self._end(False))
        await self._await_ending(deadline)

    async def _end(self, committed: bool) -> None:
        """EndTxn, if the coordinator knows of the transaction, and the epoch bump an abort may
        need. Runs as a task of its own: a caller that times out leaves it going (the next
        call waits on), and it gives up only after ``transaction.timeout.ms``, when the
        coordinator aborts the transaction anyway."""
        what = "commit" if committed else "abort"
        deadline = Deadline(self.transaction_timeout_ms / 1000)
        adding = self._adding
        if adding is not None and not adding.done():
            # An AddPartitionsToTxn in flight may yet start the transaction at the coordinator.
            await asyncio.wait([adding], timeout=deadline.remaining())
            adding.cancel()
        if self._started:
            try:
                await self._coordinator_call(
                    f"EndTxn({what})", deadline, lambda c: self._end_once(c, committed)
                )
            except TransactionAbortRequiredError:
                if committed:
                    raise
                # The coordinator lost our producer id mid-abort: the bump below starts afresh.
        if not committed and self._needs_bump:
            await self._coordinator_call("InitProducerId (epoch bump)", deadline, self._bump_once)
            for queue in self._queues():
                queue.reset_sequences()
            self._needs_bump = False
        self._finished()

    async def _await_ending(self, deadline: Deadline) -> None:
        ending = self._ending
        assert ending is not None
        try:
            async with asyncio.timeout(deadline.remaining()):
                await asyncio.shield(ending)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"the transaction did not end within the timeout ({self.state.value}); call "
                "the same method again to wait on"
            ) from None
        finally:
            if ending.done():
                self._ending = None

    async def close(self) -> None:
        """The producer is closing: stop adding partitions and ending transactions (an open
        transaction is left to the coordinator, which aborts it after its timeout or when
        the transactional id is initialized again, as with Java's producer)."""
        tasks = [t for t in (self._adding, self._ending) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _finished(self) -> None:
        self.state = TxnState.READY
        self._abortable = None
        self._started = False
        self._added.clear()
        self._pending.clear()

    # -- AddPartitionsToTxn, in the background ---------------------------------------------------

    async def _add_partitions(self) -> None:
        attempt = 0
        while self._pending and self.state in _SENDING:
            queues = list(self._pending)
            try:
                connection, version = await self._txn_coordinator(AddPartitionsToTxnRequest)
                await self._add_partitions_once(connection, version, queues)
            except Retry as exc:
                if exc.code in COORDINATOR_MOVED:
                    self._coordinator = -1
                delay = self.backoff_delay(attempt)
                if exc.code == _E.CONCURRENT_TRANSACTIONS:
                    delay = min(delay, CONCURRENT_TRANSACTIONS_BACKOFF)
                log.debug("AddPartitionsToTxn: %s; retrying in %.3f s", exc, delay)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            except KayakError as exc:
                if getattr(exc, "code", None) != _E.NETWORK_EXCEPTION or self.closing:
                    if self._fatal is None and self._abortable is None:
                        self._become_abortable(exc)
                    return
                # The coordinator cannot be reached (a broker restarting): find it again and
                # retry, as Java's transaction manager does. The batches waiting for this add
                # still expire after delivery.timeout.ms, which fails the transaction then;
                # a producer closing stops at once (its flush must not wait for that).
                self._coordinator = -1
                log.debug("AddPartitionsToTxn: %s; retrying", exc)
                await asyncio.sleep(self.backoff_delay(attempt))
                attempt += 1
                continue
            except OSError as exc:
                self._coordinator = -1
                log.debug("AddPartitionsToTxn: %s", exc)
                await asyncio.sleep(self.backoff_delay(attempt))
                attempt += 1
                continue
            attempt = 0
            self._started = True
            for queue in queues:
                self._pending.pop(queue, None)
                self._added.add(queue)
                if queue.sender is not None:
                    queue.sender.batch_ready()


_SENDING = frozenset({TxnState.IN_TRANSACTION, TxnState.COMMITTING})


def _fenced(text: str) -> ProducerFencedError:
    return ProducerFencedError(
        f"{text}: another producer with the same transactional.id has started (a newer "
        "epoch): this one can no longer send, commit or abort; close it"
    )
