"""Fetch: record batches straight from segment files, with long polling.

Nothing here decodes a record. Each partition's answer is a file slice the connection sends
with sendfile; a fetch that finds fewer than ``min_bytes`` waits until an append wakes it or
``max_wait_ms`` passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass

from kayak.broker.catalog import TopicCatalog
from kayak.broker.context import RequestContext
from kayak.broker.security.acls import AclOperation
from kayak.broker.security.acls.checks import TOPIC, allowed
from kayak.broker.topic import Partition
from kayak.errors import ErrorCode, KafkaError, UnknownTopicIdError
from kayak.protocol.messages.fetch_request import FetchRequest
from kayak.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)

_FIRST_TOPIC_ID_VERSION = 13
READ_COMMITTED = 1  # FetchRequest.isolation_level


@dataclass(slots=True)
class _Wanted:
    topic: str | None
    topic_id: uuid.UUID
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int
    denied: bool = False  # the principal may not READ the topic


async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    wanted = _wanted(ctx, request)
    loop = asyncio.get_running_loop()  # once: each lookup is a getpid() on Python 3.11
    deadline = loop.time() + request.max_wait_ms / 1000
    while True:
        response, size = _read_all(ctx, request, wanted)
        remaining = deadline - loop.time()
        if size >= request.min_bytes or remaining <= 0 or not wanted:
            return response
        await _wait_for_data(ctx.broker.catalog, wanted, remaining)


def _wanted(ctx: RequestContext, request: FetchRequest) -> list[_Wanted]:
    by_id = ctx.version >= _FIRST_TOPIC_ID_VERSION
    wanted: list[_Wanted] = []
    for t in request.topics:
        denied = _denied(ctx, t.topic, t.topic_id, by_id)
        wanted.extend(
            _Wanted(
                None if by_id else t.topic,
                t.topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
                denied,
            )
            for p in t.partitions
        )
    return wanted


def _denied(ctx: RequestContext, name: str, topic_id: uuid.UUID, by_id: bool) -> bool:
    """Whether the principal may not READ the topic (an unknown id is left to the read)."""
    if by_id:
        topic = ctx.broker.catalog.by_id(topic_id)
        if topic is None:
            return False
        name = topic.name
    return not allowed(ctx, AclOperation.READ, TOPIC, name)


def _read_all(
    ctx: RequestContext, request: FetchRequest, wanted: list[_Wanted]
) -> tuple[FetchResponse, int]:
    response = FetchResponse()
    budget, total = request.max_bytes, 0
    topics: dict[tuple[str | None, uuid.UUID], FetchableTopicResponse] = {}
    for want in wanted:
        key = (want.topic, want.topic_id)
        if key not in topics:
            topics[key] = FetchableTopicResponse(topic=want.topic or "", topic_id=want.topic_id)
            response.responses.append(topics[key])
        # KIP-74: the first non-empty partition may exceed the budget so consumers progress.
        data = _read_one(
            ctx, want, min(want.max_bytes, budget), total == 0, request.isolation_level
        )
        size = len(data.records) if data.records is not None else 0
        total += size
        budget = max(budget - size, 0)
        topics[key].partitions.append(data)
    return response, total


def _read_one(
    ctx: RequestContext, want: _Wanted, max_bytes: int, min_one: bool, isolation: int
) -> PartitionData:
    data = PartitionData(partition_index=want.partition, records=b"")
    if want.denied:
        return _failed(data, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    try:
        partition = _partition(ctx.broker.catalog, want)
    except KafkaError as exc:
        return _failed(data, exc.code)
    plog = partition.log
    if want.leader_epoch > plog.leader_epoch:
        return _failed(data, ErrorCode.UNKNOWN_LEADER_EPOCH)
    if 0 <= want.leader_epoch < plog.leader_epoch:
        return _failed(data, ErrorCode.FENCED_LEADER_EPOCH)
    committed = isolation == READ_COMMITTED
    try:
        found = plog.read(want.offset, max_bytes, min_one, committed) if max_bytes > 0 else None
    except KafkaError as exc:
        return _failed(data, exc.code)
    data.high_watermark = plog.high_watermark
    data.last_stable_offset = stable = plog.last_stable_offset
    data.log_start_offset = plog.log_start_offset
    data.aborted_transactions = None
    if found is not None:
        data.records = found
        if committed:
            # Every aborted transaction the returned batches may hold records of; the client
            # drops those records (Kafka's FetchResponse contract for read_committed).
            data.aborted_transactions = [
                AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                for a in plog.aborted_transactions(want.offset, stable)
            ]
    return data


def _failed(data: PartitionData, code: int) -> PartitionData:
    """A partition that could not be read: no offsets are known (-1, as Kafka answers), so a
    client never takes a failed read for the end of the partition."""
    data.error_code = code
    data.high_watermark = data.last_stable_offset = data.log_start_offset = -1
    data.aborted_transactions = None
    return data


def _partition(catalog: TopicCatalog, want: _Wanted) -> Partition:
    if want.topic is None:
        topic = catalog.by_id(want.topic_id)
        if topic is None:
            raise UnknownTopicIdError(f"no topic with id {want.topic_id}")
        return catalog.partition(topic.name, want.partition)
    return catalog.partition(want.topic, want.partition)


async def _wait_for_data(catalog: TopicCatalog, wanted: list[_Wanted], timeout: float) -> None:
    waiters = []
    for want in wanted:
        if want.denied:
            continue
        with contextlib.suppress(KafkaError):
            waiters.append(_partition(catalog, want).wait_for_data())
    if not waiters:
        await asyncio.sleep(timeout)
        return
    _, pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
