"""What a consumer commits: the offsets an application names (or its positions), and an
asynchronous commit that reports to a callback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kayak.client.consumer.group import GroupMember
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.types import OffsetAndMetadata, TopicPartition
from kayak.errors import KayakError

log = logging.getLogger(__name__)

__all__ = ["CommitCallback", "commit_and_report", "offsets_to_commit"]

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], object]


def offsets_to_commit(
    subscriptions: SubscriptionState,
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` as OffsetAndMetadata, or (None) the positions of every assigned partition."""
    if offsets is None:
        return {tp: OffsetAndMetadata(o) for tp, o in subscriptions.positions().items()}
    return {
        TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
        for tp, o in offsets.items()
    }


async def commit_and_report(
    group: GroupMember,
    chosen: dict[TopicPartition, OffsetAndMetadata],
    timeout: float,
    callback: CommitCallback | None,
) -> None:
    """Commit ``chosen``; ``callback(chosen, error)`` then (error None on success). A
    failure without a callback is logged."""
    error: BaseException | None = None
    try:
        await group.commit(chosen, timeout=timeout)
    except KayakError as exc:
        error = exc
        if callback is None:
            log.warning("asynchronous commit failed: %s", exc)
    if callback is not None:
        callback(chosen, error)
