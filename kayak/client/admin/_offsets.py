"""Partition offsets: ListOffsets and DeleteRecords, each sent to the partition's leader."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from kayak.client.admin._core import (
    LEADER_RETRY,
    AdminCore,
    Outcome,
    Target,
    group_by,
    item_error,
)
from kayak.client.admin._routes import leaders
from kayak.client.admin.models import OffsetAndTimestamp, OffsetSpec
from kayak.client.backoff import Deadline
from kayak.client.connection import BrokerConnection
from kayak.client.types import TopicPartition
from kayak.errors import KayakError, UnsupportedVersionError
from kayak.protocol.messages import DeleteRecordsRequest, ListOffsetsRequest
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.delete_records_response import DeleteRecordsResponse
from kayak.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsTopic
from kayak.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
)

CONSUMER_REPLICA_ID = -1
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
_MAX_TIMESTAMP_VERSION = 7  # ListOffsets v7+ knows MAX_TIMESTAMP
_OLD_STYLE_VERSION = 0  # ListOffsets v0 answers with a list of offsets


async def _to_leaders(
    core: AdminCore, items: list[TopicPartition], deadline: Deadline
) -> dict[TopicPartition, Target | KayakError]:
    return await leaders(core, items, deadline)


# -- ListOffsets -------------------------------------------------------------------------


async def list_offsets(
    core: AdminCore, specs: Mapping[TopicPartition, int], isolation: int, deadline: Deadline
) -> Outcome[TopicPartition, OffsetAndTimestamp]:
    return await core.run(
        specs,
        route=partial(_to_leaders, core, deadline=deadline),
        send=partial(_send_list_offsets, core, specs, isolation),
        retry=LEADER_RETRY,
        deadline=deadline,
        what="list offsets",
    )


async def _send_list_offsets(
    core: AdminCore,
    specs: Mapping[TopicPartition, int],
    isolation: int,
    connection: BrokerConnection,
    partitions: list[TopicPartition],
    deadline: Deadline,
) -> Outcome[TopicPartition, OffsetAndTimestamp]:
    version = connection.version_for(ListOffsetsRequest)
    outcome: Outcome[TopicPartition, OffsetAndTimestamp] = {}
    wanted = []
    for tp in partitions:
        if specs[tp] == OffsetSpec.MAX_TIMESTAMP and version < _MAX_TIMESTAMP_VERSION:
            outcome[tp] = UnsupportedVersionError(
                f"{tp}: the broker's ListOffsets v{version} has no max-timestamp lookup (v7+)"
            )
        else:
            wanted.append(tp)
    if not wanted:
        return outcome
    topics = [
        ListOffsetsTopic(
            topic, [ListOffsetsPartition(tp.partition, -1, specs[tp], 1) for tp in tps]
        )
        for topic, tps in group_by(wanted, lambda tp: tp.topic).items()
    ]
    request = ListOffsetsRequest(
        replica_id=CONSUMER_REPLICA_ID,
        isolation_level=isolation,
        topics=topics,
        timeout_ms=int(core.request_timeout(deadline) * 1000),
    )
    response: ListOffsetsResponse = await core.request(connection, request, deadline, version)
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            outcome[tp] = _listed(tp, p, version)
    return outcome


def _listed(
    tp: TopicPartition, p: ListOffsetsPartitionResponse, version: int
) -> OffsetAndTimestamp | KayakError:
    if p.error_code:
        return item_error(p.error_code, str(tp))
    if version == _OLD_STYLE_VERSION:
        return OffsetAndTimestamp(p.old_style_offsets[0] if p.old_style_offsets else -1, -1)
    return OffsetAndTimestamp(p.offset, p.timestamp)


# -- DeleteRecords -----------------------------------------------------------------------


async def delete_records(
    core: AdminCore, before: Mapping[TopicPartition, int], deadline: Deadline
) -> Outcome[TopicPartition, int]:
    return await core.run(
        before,
        route=partial(_to_leaders, core, deadline=deadline),
        send=partial(_send_delete_records, core, before),
        retry=LEADER_RETRY,
        deadline=deadline,
        what="delete records",
    )


async def _send_delete_records(
    core: AdminCore,
    before: Mapping[TopicPartition, int],
    connection: BrokerConnection,
    partitions: list[TopicPartition],
    deadline: Deadline,
) -> Outcome[TopicPartition, int]:
    topics = [
        DeleteRecordsTopic(topic, [DeleteRecordsPartition(tp.partition, before[tp]) for tp in tps])
        for topic, tps in group_by(partitions, lambda tp: tp.topic).items()
    ]
    request = DeleteRecordsRequest(
        topics=topics, timeout_ms=int(core.request_timeout(deadline) * 1000)
    )
    response: DeleteRecordsResponse = await core.request(connection, request, deadline)
    outcome: Outcome[TopicPartition, int] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            outcome[tp] = item_error(p.error_code, str(tp)) if p.error_code else p.low_watermark
    return outcome
