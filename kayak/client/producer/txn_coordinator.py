"""Requests to the transaction and group coordinators, for the transactional producer.

:class:`CoordinatorRequests` finds the coordinators (FindCoordinator, key type 1 for a
transactional id, 0 for a group), sends InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn, and retries what Kafka says to retry (COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS, NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE, the last two after
looking the coordinator up again) with backoff until the caller's deadline. Any other error
code goes to ``_error_for``, where :class:`~.transactions.TransactionManager` decides whether
it is abortable or fatal. The versions are the client forms of the first transaction protocol
(see the :mod:`~.transactions` docstring on KIP-890).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kayak.client.backoff import BackoffStrategy, Deadline
from kayak.client.cluster import Cluster
from kayak.client.connection import BrokerConnection
from kayak.client.producer.batch import PartitionQueue
from kayak.client.producer.idempotence import IdempotenceManager
from kayak.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kayak.errors import (
    ErrorCode,
    KafkaTimeoutError,
    KayakError,
    UnsupportedVersionError,
    error_for_code,
)
from kayak.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from kayak.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from kayak.protocol.messages.add_partitions_to_txn_request import AddPartitionsToTxnTopic
from kayak.protocol.messages.add_partitions_to_txn_response import AddPartitionsToTxnResponse
from kayak.protocol.messages.end_txn_response import EndTxnResponse
from kayak.protocol.messages.find_coordinator_response import FindCoordinatorResponse
from kayak.protocol.messages.init_producer_id_response import InitProducerIdResponse
from kayak.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kayak.protocol.messages.txn_offset_commit_response import TxnOffsetCommitResponse

log = logging.getLogger(__name__)

__all__ = [
    "CONCURRENT_TRANSACTIONS_BACKOFF",
    "COORDINATOR_MOVED",
    "CoordinatorRequests",
    "Retry",
    "check_transactions_supported",
]

# The client forms of the transaction APIs (see the module docstring on KIP-890).
_ADD_PARTITIONS_MAX = 3
_END_TXN_MAX = 4
_FIND_COORDINATOR_MAX = 4
_BUMP_VERSION = 3  # InitProducerId v3 (KIP-360) takes the current producer id and epoch
_GROUP_METADATA_VERSION = 3  # TxnOffsetCommit v3 (KIP-447) carries generation and member
_TRANSACTION_KEY = 1
_GROUP_KEY = 0
# Java retries AddPartitionsToTxn's CONCURRENT_TRANSACTIONS (the previous transaction's
# markers still being written) after 20 ms, not retry.backoff.ms: it follows every commit.
CONCURRENT_TRANSACTIONS_BACKOFF = 0.02

_E = ErrorCode
_RETRY = frozenset({
    _E.COORDINATOR_LOAD_IN_PROGRESS, _E.CONCURRENT_TRANSACTIONS, _E.NOT_COORDINATOR,
    _E.COORDINATOR_NOT_AVAILABLE, _E.UNKNOWN_TOPIC_OR_PARTITION, _E.REQUEST_TIMED_OUT,
    _E.NETWORK_EXCEPTION, _E.UNSTABLE_OFFSET_COMMIT,
})  # fmt: skip
COORDINATOR_MOVED = frozenset({_E.NOT_COORDINATOR, _E.COORDINATOR_NOT_AVAILABLE})


class Retry(Exception):
    """An answer worth asking again (after a backoff, and a coordinator lookup if moved)."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: {error_for_code(code).error_name}")
        self.code = code


def check_transactions_supported(connection: BrokerConnection) -> None:
    """Raise ``UnsupportedVersionError`` naming what is missing if the broker cannot do
    transactions (Kafka before 0.11, or a broker without a transaction coordinator)."""
    apis = (
        InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest,
        EndTxnRequest, TxnOffsetCommitRequest,
    )  # fmt: skip
    missing = [api.NAME.removesuffix("Request") for api in apis
               if api.API_KEY not in connection.api_versions]  # fmt: skip
    if FindCoordinatorRequest.API_KEY in connection.api_versions:
        if connection.version_for(FindCoordinatorRequest) < 1:
            missing.append("FindCoordinator v1 (transaction coordinators)")
    else:
        missing.append("FindCoordinator")
    if missing:
        raise UnsupportedVersionError(
            f"the broker at {connection.host}:{connection.port} does not support "
            f"{', '.join(missing)}, which transactional.id needs: it has no transactions"
        )


class CoordinatorRequests(IdempotenceManager):
    """The coordinators of a transactional id and of groups, and the requests sent to them."""

    def __init__(
        self,
        cluster: Cluster,
        backoff: BackoffStrategy,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
    ) -> None:
        super().__init__(cluster, backoff)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._coordinator = -1  # node id of the transaction coordinator, -1: look it up
        self._group_coordinators: dict[str, int] = {}

    @abc.abstractmethod
    def _error_for(self, code: int, what: str, message: str | None = None) -> KayakError:
        """The exception for an answer not retried (the transaction manager's verdict)."""

    async def _add_partitions_once(
        self, connection: BrokerConnection, version: int, queues: list[PartitionQueue]
    ) -> None:
        by_topic: dict[str, list[int]] = {}
        for queue in queues:
            by_topic.setdefault(queue.topic, []).append(queue.partition)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(t, p) for t, p in by_topic.items()],
        )
        response: AddPartitionsToTxnResponse = await connection.request(request, version)
        codes = {
            (topic.name, result.partition_index): result.partition_error_code
            for topic in response.results_by_topic_v3_and_below
            for result in topic.results_by_partition
        }
        errors = {code for code in codes.values() if code}
        if response.error_code:
            errors.add(response.error_code)
        if not errors:
            return
        # Kafka answers OPERATION_NOT_ATTEMPTED for the partitions not at fault.
        culprits = errors - {_E.OPERATION_NOT_ATTEMPTED} or errors
        for code in culprits:
            if code not in _RETRY:
                failed = sorted(f"{t}-{p}" for (t, p), c in codes.items() if c == code)
                raise self._error_for(code, f"AddPartitionsToTxn of {', '.join(failed)}")
        raise Retry(min(culprits), "AddPartitionsToTxn")

    def backoff_delay(self, attempt: int) -> float:
        return self._backoff.delay(min(attempt, 10))

    # -- coordinator requests --------------------------------------------------------------------

    async def _coordinator_call(
        self,
        what: str,
        deadline: Deadline,
        once: Callable[[BrokerConnection], Awaitable[None]],
    ) -> None:
        """``once`` against the transaction coordinator until it succeeds, fails for good, or
        ``deadline`` passes (``KafkaTimeoutError``)."""

        async def attempt() -> None:
            connection, _ = await self._txn_coordinator(None)
            await once(connection)

        def moved() -> None:
            self._coordinator = -1

        await self._retrying(what, deadline, attempt, moved)

    async def _group_call(
        self,
        group_id: str,
        deadline: Deadline,
        once: Callable[[BrokerConnection], Awaitable[None]],
    ) -> None:
        async def attempt() -> None:
            node = self._group_coordinators.get(group_id)
            if node is None:
                node = self._group_coordinators[group_id] = await self._find_coordinator(
                    _GROUP_KEY, group_id
                )
            await once(await self._cluster.connection(node))

        def moved() -> None:
            self._group_coordinators.pop(group_id, None)

        await self._retrying(f"TxnOffsetCommit for group {group_id!r}", deadline, attempt, moved)

    async def _retrying(
        self,
        what: str,
        deadline: Deadline,
        attempt: Callable[[], Awaitable[None]],
        moved: Callable[[], None],
    ) -> None:
        tries = 0
        while True:
            try:
                async with asyncio.timeout(max(deadline.remaining(), 0.001)):
                    await attempt()
                return
            except Retry as exc:
                if exc.code in COORDINATOR_MOVED:
                    moved()
                last: BaseException = exc
            except TimeoutError:
                last = KafkaTimeoutError(f"{what}: no answer in time")
                moved()
            except (OSError, KayakError) as exc:
                if isinstance(exc, KayakError) and not getattr(exc, "retriable", False):
                    raise
                moved()
                last = exc
            if deadline.expired:
                raise KafkaTimeoutError(f"{what} did not succeed in time; last: {last}")
            log.debug("%s: %s; retrying", what, last)
            await asyncio.sleep(min(self.backoff_delay(tries), deadline.remaining()))
            tries += 1

    async def _txn_coordinator(
        self, api: type[AddPartitionsToTxnRequest] | None
    ) -> tuple[BrokerConnection, int]:
        if self._coordinator < 0:
            self._coordinator = await self._find_coordinator(
                _TRANSACTION_KEY, self.transactional_id
            )
        connection = await self._cluster.connection(self._coordinator)
        version = connection.version_for(api, _ADD_PARTITIONS_MAX) if api is not None else -1
        return connection, version

    async def _find_coordinator(self, key_type: int, key: str) -> int:
        connection = await self._cluster.any_connection()
        version = connection.version_for(FindCoordinatorRequest, _FIND_COORDINATOR_MAX)
        if version >= 4:
            request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        else:
            request = FindCoordinatorRequest(key=key, key_type=key_type)
        response: FindCoordinatorResponse = await connection.request(request, version)
        found: Any = (
            response.coordinators[0] if version >= 4 and response.coordinators else response
        )
        what = f"FindCoordinator({'transaction' if key_type else 'group'} {key!r})"
        if found.error_code:
            if found.error_code in _RETRY:
                raise Retry(found.error_code, what)
            raise self._error_for(found.error_code, what, found.error_message)
        log.debug("%s: broker %d", what, found.node_id)
        return int(found.node_id)

    async def _init_once(self, connection: BrokerConnection) -> None:
        await self._ask_producer_id(connection, "InitProducerId")

    async def _bump_once(self, connection: BrokerConnection) -> None:
        await self._ask_producer_id(connection, "InitProducerId (epoch bump)")

    async def _ask_producer_id(self, connection: BrokerConnection, what: str) -> None:
        version = connection.version_for(InitProducerIdRequest)
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        if version >= _BUMP_VERSION and self.producer_id >= 0:
            # KIP-360: our own id and epoch, so the coordinator bumps us, not a newer producer.
            request.producer_id, request.producer_epoch = self.producer_id, self.producer_epoch
        response: InitProducerIdResponse = await connection.request(request, version)
        if response.error_code:
            if response.error_code in _RETRY:
                raise Retry(response.error_code, what)
            raise self._error_for(response.error_code, what)
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch

    async def _add_offsets_once(self, connection: BrokerConnection, group_id: str) -> None:
        request = AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            group_id=group_id,
        )
        response: AddOffsetsToTxnResponse = await connection.request(request)
        self._check("AddOffsetsToTxn", response.error_code)

    async def _txn_commit_once(
        self,
        connection: BrokerConnection,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata,
    ) -> None:
        version = connection.version_for(TxnOffsetCommitRequest)
        by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), value in offsets.items():
            committed = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=committed.offset,
                    committed_leader_epoch=-1
                    if committed.leader_epoch is None
                    else committed.leader_epoch,
                    committed_metadata=committed.metadata,
                )
            )
        request = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            topics=[TxnOffsetCommitRequestTopic(name, parts) for name, parts in by_topic.items()],
        )
        if version >= _GROUP_METADATA_VERSION:
            request.generation_id = group.generation_id
            request.member_id = group.member_id
            request.group_instance_id = group.group_instance_id
        response: TxnOffsetCommitResponse = await connection.request(request, version)
        codes = {p.error_code for t in response.topics for p in t.partitions if p.error_code}
        for code in sorted(codes, key=lambda c: c in _RETRY):  # a final error before a retry
            self._check(f"TxnOffsetCommit for group {group.group_id!r}", code)

    async def _end_once(self, connection: BrokerConnection, committed: bool) -> None:
        version = connection.version_for(EndTxnRequest, _END_TXN_MAX)
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            committed=committed,
        )
        response: EndTxnResponse = await connection.request(request, version)
        self._check(f"EndTxn({'commit' if committed else 'abort'})", response.error_code)

    def _check(self, what: str, code: int) -> None:
        if not code:
            return
        if code in _RETRY:
            raise Retry(code, what)
        raise self._error_for(code, what)
