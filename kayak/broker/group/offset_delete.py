"""OffsetDelete (KIP-496): forget a group's committed offsets for some partitions.

As Kafka's group coordinator decides: an Empty group (or one known only by its stored
offsets) loses every requested offset; a consumer group with members keeps the offsets of
topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per partition) and loses the others;
a group of another protocol type with members is NON_EMPTY_GROUP; an unknown group is
GROUP_ID_NOT_FOUND. Authorization and unknown topics are the request handler's part.
"""

from __future__ import annotations

import logging
import struct

from kayak.broker.group.group import Group
from kayak.broker.group.offsets import OffsetStore, OffsetStoreError
from kayak.broker.group.state import GroupState
from kayak.errors import ErrorCode, KayakError
from kayak.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from kayak.protocol.messages.offset_delete_request import OffsetDeleteRequest
from kayak.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

logger = logging.getLogger(__name__)

_E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"
_VERSION_PREFIX = struct.Struct(">h")


async def delete_offsets(
    groups: dict[str, Group], store: OffsetStore, request: OffsetDeleteRequest
) -> OffsetDeleteResponse:
    """Answer OffsetDelete for the partitions the handler let through."""
    group_id = request.group_id
    if not group_id:
        return OffsetDeleteResponse(error_code=_E.INVALID_GROUP_ID)
    group = groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        if group is not None or not store.fetch_all(group_id):
            return OffsetDeleteResponse(error_code=_E.GROUP_ID_NOT_FOUND)
        subscribed: set[str] = set()  # known only by its stored offsets: no members
    elif group.state is GroupState.EMPTY:
        subscribed = set()
    elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        subscribed = subscribed_topics(group)
    else:
        return OffsetDeleteResponse(error_code=_E.NON_EMPTY_GROUP)
    deletable = [
        (t.name, p.partition_index)
        for t in request.topics
        if t.name not in subscribed
        for p in t.partitions
    ]
    error = _E.NONE
    if deletable:
        try:
            await store.delete_offsets(group_id, deletable)
        except OffsetStoreError as exc:
            logger.warning(
                "Could not delete offsets of group %s (answering %s): %s",
                group_id,
                exc.commit_error.name,
                exc,
            )
            error = exc.commit_error
        else:
            logger.info("Deleted %d committed offsets of group %s", len(deletable), group_id)
    return OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponseTopic(
                t.name,
                [
                    OffsetDeleteResponsePartition(
                        p.partition_index,
                        _E.GROUP_SUBSCRIBED_TO_TOPIC if t.name in subscribed else error,
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def subscribed_topics(group: Group) -> set[str]:
    """The topics the group's members subscribe to, from their consumer protocol metadata
    (the chosen protocol's, or every protocol's before one is chosen)."""
    topics: set[str] = set()
    for member in group.members.values():
        if group.protocol_name:
            metadata = [member.metadata_for(group.protocol_name)]
        else:
            metadata = [meta for _, meta in member.protocols]
        for data in metadata:
            topics.update(_subscription(data))
    return topics


def _subscription(data: bytes) -> list[str]:
    """The topics of one ConsumerProtocolSubscription (an int16 version, then the struct);
    nothing for metadata that does not decode."""
    if len(data) < _VERSION_PREFIX.size:
        return []
    (version,) = _VERSION_PREFIX.unpack_from(data)
    cls = ConsumerProtocolSubscription
    try:
        decoded = cls.decode(
            memoryview(data)[_VERSION_PREFIX.size :],
            max(min(version, cls.MAX_VERSION), cls.MIN_VERSION),
        )
    except (KayakError, struct.error, ValueError, IndexError):
        return []
    return list(decoded.topics)
