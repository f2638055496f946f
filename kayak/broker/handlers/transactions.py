"""Transactions: InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, WriteTxnMarkers, and the admin views DescribeTransactions, ListTransactions,
DescribeProducers.

Each asks the transaction coordinator (``kayak/broker/txn``) and maps what it raises to the
error code the request's version knows: PRODUCER_FENCED came with the versions listed in
``_FENCED_SINCE``; older clients are told INVALID_PRODUCER_EPOCH, as Kafka tells them.
ACLs: WRITE on the transactional id to use it, DESCRIBE to see it, WRITE on each topic added
to a transaction, READ on the group whose offsets join it, CLUSTER_ACTION for markers.
"""

from __future__ import annotations

import logging
import time

from kayak.broker.context import RequestContext
from kayak.broker.group.offset_requests import failed_txn_commit
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import GROUP, TOPIC, allowed, allowed_on_cluster
from kayak.broker.security.acls.model import ResourceType
from kayak.broker.txn.coordinator import TransactionCoordinator
from kayak.broker.txn.records import TxnState
from kayak.errors import (
    ErrorCode,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from kayak.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from kayak.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kayak.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from kayak.protocol.messages.describe_producers_request import DescribeProducersRequest
from kayak.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from kayak.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from kayak.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
)
from kayak.protocol.messages.describe_transactions_response import (
    TransactionState as DescribedTransaction,
)
from kayak.protocol.messages.end_txn_request import EndTxnRequest
from kayak.protocol.messages.end_txn_response import EndTxnResponse
from kayak.protocol.messages.init_producer_id_request import InitProducerIdRequest
from kayak.protocol.messages.init_producer_id_response import InitProducerIdResponse
from kayak.protocol.messages.list_transactions_request import ListTransactionsRequest
from kayak.protocol.messages.list_transactions_response import (
    ListTransactionsResponse,
)
from kayak.protocol.messages.list_transactions_response import (
    TransactionState as ListedTransaction,
)
from kayak.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from kayak.protocol.messages.txn_offset_commit_response import TxnOffsetCommitResponse
from kayak.protocol.messages.write_txn_markers_request import WriteTxnMarkersRequest
from kayak.protocol.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from kayak.protocol.primitives import Buffer
from kayak.protocol.records import BatchScan

log = logging.getLogger(__name__)

TXN_ID = ResourceType.TRANSACTIONAL_ID
# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


def error_code(ctx: RequestContext, exc: KafkaError) -> int:
    """``exc``'s code as this request's version knows it."""
    since = _FENCED_SINCE.get(ApiKey(ctx.header.request_api_key), 0)
    if isinstance(exc, ProducerFencedError) and ctx.version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return exc.code


def coordinator_of(ctx: RequestContext, transactional_id: str) -> TransactionCoordinator:
    """This shard's coordinator, if it is the one for ``transactional_id``."""
    coordinator = ctx.broker.transactions
    if coordinator is None or ctx.broker.coordinator_for(transactional_id) != ctx.broker.node_id:
        raise NotCoordinatorError(f"not the coordinator of transactional id {transactional_id!r}")
    return coordinator


def check_transactional_produce(
    ctx: RequestContext, transactional_id: str, topic: str, partition: int, records: Buffer
) -> None:
    """Raise unless a Produce naming ``transactional_id`` may append ``records`` here: WRITE
    on the id, transactional batches, and (when this shard coordinates the id) the
    partition added to the producer's open transaction."""
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, transactional_id):
        raise TransactionalIdAuthorizationFailedError(
            f"not authorized to use transactional id {transactional_id!r}"
        )
    headers = list(BatchScan(records))
    if not headers or not all(h.is_transactional for h in headers):
        raise InvalidRecordError("a transactional produce must hold transactional batches")
    header = headers[0]
    # Only the first batch is checked against the coordinator below: a second producer's
    # batch behind it would open a transaction nobody ends (Kafka refuses it the same way).
    if any((h.producer_id, h.producer_epoch) != (header.producer_id, header.producer_epoch)
           for h in headers[1:]):  # fmt: skip
        raise InvalidPidMappingError("transactional records of more than one producer id")
    coordinator = ctx.broker.transactions
    if ctx.broker.coordinator_for(transactional_id) != ctx.broker.node_id:
        # Another shard coordinates the id, and transactions never span shards (see
        # _partition_refusal): this partition cannot be part of one of its transactions.
        raise InvalidTxnStateError(
            f"{topic}-{partition} cannot join a transaction of {transactional_id!r}: its "
            "coordinator is another shard"
        )
    if coordinator is not None:
        try:
            coordinator.check_produce(
                transactional_id, header.producer_id, header.producer_epoch, topic, partition
            )
        except ProducerFencedError as exc:
            # Producers expect INVALID_PRODUCER_EPOCH from a Produce (Kafka converts too).
            raise InvalidProducerEpochError(exc.message) from exc


async def init_transactional_producer(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    """InitProducerId with a transactional id (the rest is in ``handlers/produce.py``)."""
    transactional_id = request.transactional_id or ""
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, transactional_id):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        coordinator = coordinator_of(ctx, transactional_id)
        producer_id, epoch = await coordinator.init_producer_id(
            transactional_id,
            request.transaction_timeout_ms,
            request.producer_id,
            request.producer_epoch,
        )
    except KafkaError as exc:
        return InitProducerIdResponse(
            error_code=error_code(ctx, exc), producer_id=-1, producer_epoch=-1
        )
    return InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)


async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if ctx.version <= 3:
        results = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results)
    # v4+: brokers batching for several transactions (KIP-890), never from clients.
    if not allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    response = AddPartitionsToTxnResponse()
    for txn in request.transactions:
        results = await _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=txn.verify_only,
        )
        response.results_by_transaction.append(
            AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=results)
        )
    return response


async def _add_partitions(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topics: list[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> list[AddPartitionsToTxnTopicResult]:
    """Per partition: an error of its own (authorization, unknown), or the whole request's
    outcome; partitions not tried because others failed get OPERATION_NOT_ATTEMPTED."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    own: dict[tuple[str, int], int] = {}
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, transactional_id):
        own = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        for topic, partition in wanted:
            code = _partition_refusal(ctx, topic, partition)
            if code is not None:
                own[(topic, partition)] = code
    outcome: int = ErrorCode.OPERATION_NOT_ATTEMPTED if own else ErrorCode.NONE
    if not own:
        try:
            coordinator = coordinator_of(ctx, transactional_id)
            if verify_only:
                for topic, partition in wanted:
                    coordinator.check_produce(
                        transactional_id, producer_id, epoch, topic, partition
                    )
            else:
                await coordinator.add_partitions(transactional_id, producer_id, epoch, wanted)
        except KafkaError as exc:
            outcome = error_code(ctx, exc)
    by_topic: dict[str, AddPartitionsToTxnTopicResult] = {}
    for topic, partition in wanted:
        result = by_topic.setdefault(topic, AddPartitionsToTxnTopicResult(name=topic))
        code = own.get((topic, partition), outcome)
        result.results_by_partition.append(
            AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=code)
        )
    return list(by_topic.values())


def _partition_refusal(ctx: RequestContext, topic: str, partition: int) -> int | None:
    # Internal topics join a transaction only through AddOffsetsToTxn, as in Kafka.
    if not allowed(ctx, AclOperation.WRITE, TOPIC, topic) or is_internal_topic(topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    described = ctx.broker.catalog.get(topic)
    if described is None or not 0 <= partition < described.partition_count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if described.owners[partition] != ctx.broker.node_id:
        # Markers go only into this shard's own partitions (no shard-to-shard marker
        # requests yet): refuse now rather than leave a transaction nobody can finish.
        log.warning("transaction refused %s-%d: it is owned by shard %d, the transaction's "
                    "coordinator is shard %d", topic, partition, described.owners[partition],
                    ctx.broker.node_id)  # fmt: skip
        return ErrorCode.POLICY_VIOLATION
    return None


async def handle_add_offsets_to_txn(
    ctx: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, AclOperation.READ, GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if ctx.broker.coordinator_for(request.group_id) != ctx.broker.node_id:
        # The group's offsets live on another shard (see _partition_refusal).
        return AddOffsetsToTxnResponse(error_code=ErrorCode.POLICY_VIOLATION)
    try:
        coordinator = coordinator_of(ctx, request.transactional_id)
        await coordinator.add_offsets(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.group_id,
        )
    except KafkaError as exc:
        return AddOffsetsToTxnResponse(error_code=error_code(ctx, exc))
    return AddOffsetsToTxnResponse()


async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        coordinator = coordinator_of(ctx, request.transactional_id)
        await coordinator.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
    except KafkaError as exc:
        return EndTxnResponse(error_code=error_code(ctx, exc))
    return EndTxnResponse(producer_id=request.producer_id, producer_epoch=request.producer_epoch)


async def handle_txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    """Offsets committed inside a transaction, sent to the group's coordinator (KIP-98,
    with KIP-447's generation check)."""
    error: int = ErrorCode.NONE
    group = request.group_id
    if not allowed(ctx, AclOperation.WRITE, TXN_ID, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(ctx, AclOperation.READ, GROUP, group):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif ctx.broker.coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif ctx.broker.coordinator_for(group) != ctx.broker.node_id:
        error = ErrorCode.NOT_COORDINATOR
    denied = [t.name for t in request.topics if not allowed(ctx, AclOperation.READ, TOPIC, t.name)]
    if error == ErrorCode.NONE and denied:
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if error != ErrorCode.NONE or ctx.broker.coordinator is None:
        return failed_txn_commit(request, ErrorCode(error))
    return await ctx.broker.coordinator.txn_offset_commit(request, ctx.version)


async def handle_write_txn_markers(
    ctx: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    """Markers sent by a coordinator (another shard) or an admin aborting a hanging
    transaction (``kafka-transactions abort``)."""
    response = WriteTxnMarkersResponse()
    denied = not allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION)
    markers = ctx.broker.markers
    for marker in request.markers:
        wanted = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        failed: dict[tuple[str, int], int] = {}
        if denied or markers is None:
            code = (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED if denied else ErrorCode.UNKNOWN_SERVER_ERROR
            )
            failed = dict.fromkeys(wanted, code)
        else:
            failed = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in _unknown(ctx, wanted)}
            errors = await markers.write(
                [tp for tp in wanted if tp not in failed],
                marker.producer_id,
                marker.producer_epoch,
                marker.transaction_result,
                marker.coordinator_epoch,
            )
            failed.update({tp: exc.code for tp, exc in errors.items()})
        result = WritableTxnMarkerResult(producer_id=marker.producer_id)
        by_topic: dict[str, WritableTxnMarkerTopicResult] = {}
        for topic, partition in wanted:
            entry = by_topic.setdefault(topic, WritableTxnMarkerTopicResult(name=topic))
            entry.partitions.append(
                WritableTxnMarkerPartitionResult(
                    partition_index=partition, error_code=failed.get((topic, partition), 0)
                )
            )
        result.topics = list(by_topic.values())
        response.markers.append(result)
    return response


def _unknown(ctx: RequestContext, wanted: list[tuple[str, int]]) -> list[tuple[str, int]]:
    unknown = []
    for topic, partition in wanted:
        try:
            ctx.broker.catalog.partition(topic, partition, online=False)
        except UnknownTopicOrPartitionError:
            unknown.append((topic, partition))
        except KafkaError:
            continue  # not this shard's: the write says so
    return unknown


async def handle_describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    response = DescribeTransactionsResponse()
    for transactional_id in request.transactional_ids:
        described = DescribedTransaction(
            transactional_id=transactional_id,
            producer_id=-1,
            producer_epoch=-1,
            transaction_start_time_ms=-1,
        )
        response.transaction_states.append(described)
        if not allowed(ctx, AclOperation.DESCRIBE, TXN_ID, transactional_id):
            described.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            continue
        try:
            txn = coordinator_of(ctx, transactional_id).get(transactional_id)
        except KafkaError as exc:
            described.error_code = exc.code
            continue
        if txn is None:
            described.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            continue
        described.transaction_state = txn.state.kafka_name
        described.transaction_timeout_ms = txn.timeout_ms
        described.transaction_start_time_ms = txn.start_ms
        described.producer_id, described.producer_epoch = txn.producer_id, txn.producer_epoch
        by_topic: dict[str, TopicData] = {}
        for topic, partition in sorted(txn.partitions):
            if allowed(ctx, AclOperation.DESCRIBE, TOPIC, topic):
                by_topic.setdefault(topic, TopicData(topic=topic)).partitions.append(partition)
        described.topics = list(by_topic.values())
    return response


async def handle_list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    response = ListTransactionsResponse()
    coordinator = ctx.broker.transactions
    names = {state.kafka_name: state for state in TxnState}
    response.unknown_state_filters = [s for s in request.state_filters if s not in names]
    states = {names[s] for s in request.state_filters if s in names}
    producers = set(request.producer_id_filters)
    now = int(time.time() * 1000)
    for txn in coordinator.transactions() if coordinator is not None else []:
        if (states and txn.state not in states) or (producers and txn.producer_id not in producers):
            continue
        if request.duration_filter >= 0 and (
            txn.start_ms < 0 or now - txn.start_ms < request.duration_filter
        ):
            continue
        if not allowed(ctx, AclOperation.DESCRIBE, TXN_ID, txn.transactional_id):
            continue
        response.transaction_states.append(
            ListedTransaction(
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                transaction_state=txn.state.kafka_name,
            )
        )
    return response


async def handle_describe_producers(
    ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    response = DescribeProducersResponse()
    for topic in request.topics:
        result = TopicResponse(name=topic.name)
        response.topics.append(result)
        readable = allowed(ctx, AclOperation.READ, TOPIC, topic.name)
        for index in topic.partition_indexes:
            answer = PartitionResponse(partition_index=index)
            result.partitions.append(answer)
            if not readable:
                answer.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                producers = ctx.broker.catalog.partition(topic.name, index).log.producers
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message
                continue
            for producer_id, state in sorted(producers.state().items()):
                answer.active_producers.append(
                    ProducerState(
                        producer_id=producer_id,
                        producer_epoch=state.epoch,
                        last_sequence=state.batches[-1].last_seq if state.batches else -1,
                        last_timestamp=state.last_timestamp,
                        coordinator_epoch=state.coordinator_epoch,
                        current_txn_start_offset=state.txn_first_offset,
                    )
                )
    return response
