"""ListOffsets, DeleteRecords, OffsetForLeaderEpoch: questions about a partition's offsets."""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.log import PartitionLog
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import TOPIC, allowed
from kayak.broker.topic import Partition
from kayak.errors import ErrorCode, KafkaError
from kayak.protocol.messages.delete_records_request import DeleteRecordsRequest
from kayak.protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from kayak.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest
from kayak.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from kayak.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from kayak.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from kayak.protocol.records import RecordBatch, parse_batches

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
READ_COMMITTED = 1
# ListOffsets v8/v9 (KIP-405, KIP-1005): the start of the local log and the last offset in
# tiered storage. Nothing is tiered, so the local log is the whole log and, as a Kafka broker
# without remote storage answers, no offset is tiered (-1).
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
_SCAN_BYTES = 1 << 20  # how much of the log a timestamp lookup reads at a time


async def handle_list_offsets(
    ctx: RequestContext, request: ListOffsetsRequest
) -> ListOffsetsResponse:
    response = ListOffsetsResponse()
    # read_committed consumers see the log end at the last stable offset (ListOffsets v2+).
    committed = ctx.version >= 2 and request.isolation_level == READ_COMMITTED
    for topic in request.topics:
        results = ListOffsetsTopicResponse(name=topic.name)
        may_describe = allowed(ctx, AclOperation.DESCRIBE, TOPIC, topic.name)
        for wanted in topic.partitions:
            if may_describe:
                results.partitions.append(_list_offset(ctx, topic.name, wanted, committed))
            else:
                results.partitions.append(
                    ListOffsetsPartitionResponse(
                        partition_index=wanted.partition_index,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    )
                )
        response.topics.append(results)
    return response


def _list_offset(
    ctx: RequestContext, topic: str, wanted: ListOffsetsPartition, committed: bool
) -> ListOffsetsPartitionResponse:
    result = ListOffsetsPartitionResponse(partition_index=wanted.partition_index)
    try:
        partition = ctx.broker.catalog.partition(topic, wanted.partition_index)
    except KafkaError as exc:
        result.error_code = exc.code
        return result
    plog = partition.log
    if wanted.current_leader_epoch > plog.leader_epoch:
        result.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
        return result
    if committed and wanted.timestamp == LATEST:
        offset, timestamp = plog.last_stable_offset, -1
    else:
        offset, timestamp = _offset_for(partition, wanted.timestamp)
        by_time = wanted.timestamp >= 0 or wanted.timestamp == MAX_TIMESTAMP
        if committed and by_time and offset >= plog.last_stable_offset:
            # A lookup by time finds nothing an open transaction still holds (as Kafka).
            offset, timestamp = -1, -1
    result.leader_epoch = plog.leader_epoch
    if ctx.version == 0:
        result.old_style_offsets = [offset] if offset >= 0 else []
    else:
        result.offset, result.timestamp = offset, timestamp
    return result


def _offset_for(partition: Partition, timestamp: int) -> tuple[int, int]:
    plog = partition.log
    if timestamp == LATEST:
        return plog.high_watermark, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp_offset(partition)
    return _first_at_or_after(plog, timestamp)


def _first_at_or_after(plog: PartitionLog, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record from the log start offset on whose timestamp
    is at or after ``timestamp``; (-1, -1) if none is.

    The index finds the first batch holding such a record, but that batch may lie (partly)
    below the log start after DeleteRecords, its matching records all deleted: the scan then
    goes on to the batches after it, as Kafka's does (timestamps need not rise with offsets).
    """
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    floor = offset = found[0]  # never below the log start offset
    while (data := plog.read(offset, _SCAN_BYTES)) is not None:
        for batch in parse_batches(data.read()):
            offset = batch.next_offset
            if isinstance(batch, RecordBatch) and batch.max_timestamp < timestamp:
                continue
            for record in batch:
                if record.offset >= floor and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
    return -1, -1


def _max_timestamp_offset(partition: Partition) -> tuple[int, int]:
    plog = partition.log
    best: tuple[int, int] = (-1, -1)
    segment = max(plog.segments, key=lambda s: s.max_timestamp)
    if segment.max_timestamp < 0:
        return best
    header = segment.find_by_timestamp(segment.max_timestamp)
    if header is None or header.base_offset >= plog.high_watermark:
        return best
    data = plog.read(max(header.base_offset, plog.log_start_offset), 1)
    if data is None:
        return best
    for batch in parse_batches(data.read()):
        for record in batch:
            if record.timestamp > best[1]:
                best = (record.offset, record.timestamp)
    return best


async def handle_delete_records(
    ctx: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    """Prefix truncation: move each partition's log start offset forward."""
    response = DeleteRecordsResponse()
    for topic in request.topics:
        results = DeleteRecordsTopicResult(name=topic.name)
        refusal = _delete_records_refusal(ctx, topic.name)
        for wanted in topic.partitions:
            result = DeleteRecordsPartitionResult(partition_index=wanted.partition_index)
            if refusal is not None:
                result.error_code, result.low_watermark = refusal, -1
                results.partitions.append(result)
                continue
            try:
                plog = ctx.broker.catalog.partition(topic.name, wanted.partition_index).log
                result.low_watermark = plog.delete_records_before(wanted.offset)
            except KafkaError as exc:
                result.error_code, result.low_watermark = exc.code, -1
            results.partitions.append(result)
        response.topics.append(results)
    return response


def _delete_records_refusal(ctx: RequestContext, topic: str) -> int | None:
    """Kafka's answers: no DELETE on the topic, or an internal topic (whoever asks)."""
    if not allowed(ctx, AclOperation.DELETE, TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if is_internal_topic(topic):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return None


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    """One node, one leader epoch: every epoch up to it ends at the log end offset."""
    response = OffsetForLeaderEpochResponse()
    for topic in request.topics:
        results = OffsetForLeaderTopicResult(topic=topic.topic)
        may_describe = allowed(ctx, AclOperation.DESCRIBE, TOPIC, topic.topic)
        for wanted in topic.partitions:
            result = EpochEndOffset(partition=wanted.partition)
            if not may_describe:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                results.partitions.append(result)
                continue
            try:
                plog = ctx.broker.catalog.partition(topic.topic, wanted.partition).log
            except KafkaError as exc:
                result.error_code = exc.code
            else:
                if wanted.current_leader_epoch > plog.leader_epoch:
                    result.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                elif wanted.leader_epoch > plog.leader_epoch:
                    result.leader_epoch, result.end_offset = -1, -1
                else:
                    result.leader_epoch, result.end_offset = plog.leader_epoch, plog.high_watermark
            results.partitions.append(result)
        response.topics.append(results)
    return response
