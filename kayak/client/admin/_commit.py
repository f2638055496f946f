"""Committing a group's offsets from outside the group (``Admin.alter_group_offsets``):
OffsetCommit to the group's coordinator with no generation and no member id, which a
coordinator accepts only while the group has no active members (Kafka's
``alterConsumerGroupOffsets`` and ``kafka-consumer-groups --reset-offsets`` do the same)."""

from __future__ import annotations

from collections.abc import Mapping

from kayak.client.admin._core import AdminCore, item_error
from kayak.client.admin._routes import at_coordinator
from kayak.client.backoff import Deadline
from kayak.client.connection import BrokerConnection
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import KayakError
from kayak.protocol.messages import OffsetCommitRequest
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse

Results = dict[TopicPartition, KayakError | None]


async def alter_group_offsets(
    core: AdminCore,
    group: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    deadline: Deadline,
) -> Results:
    """Commit ``offsets`` for ``group``; per partition None (done) or its error."""

    async def send(connection: BrokerConnection, deadline: Deadline) -> Results:
        return await _send_commit(core, connection, group, offsets, deadline)

    return await at_coordinator(core, group, send, deadline, "commit offsets")


async def _send_commit(
    core: AdminCore,
    connection: BrokerConnection,
    group: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    deadline: Deadline,
) -> Results:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp, committed in offsets.items():
        epoch = committed.leader_epoch if committed.leader_epoch is not None else -1
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=committed.offset,
                committed_leader_epoch=epoch,
                committed_metadata=committed.metadata,
            )
        )
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OffsetCommitRequestTopic(name, parts) for name, parts in by_topic.items()],
    )
    version = connection.version_for(OffsetCommitRequest)
    response: OffsetCommitResponse = await core.request(connection, request, deadline, version)
    results: Results = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            results[tp] = item_error(p.error_code, str(tp)) if p.error_code else None
    return results
