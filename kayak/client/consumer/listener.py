"""``RebalanceListener``: what an application is told when the group moves partitions."""

from __future__ import annotations

import inspect
import logging

from kayak.client.types import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["RebalanceListener", "call_listener"]


class RebalanceListener:
    """Subclass and override what you need; methods may be plain or ``async``.

    ``on_partitions_revoked`` runs before partitions are given up (commit what you processed
    here), ``on_partitions_assigned`` after new ones arrive (their positions are not looked up
    yet: ``await consumer.position(tp)`` does that). ``on_partitions_lost`` is for partitions
    the member lost without a clean hand-over (its membership expired); other members may
    already be reading them, so do not commit. It calls ``on_partitions_revoked`` by default,
    as Kafka's Java client does.

    With the eager protocol (range, roundrobin) every rebalance revokes everything, then
    assigns the new set; with cooperative-sticky only the partitions that move are revoked.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> object:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> object:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> object:
        return self.on_partitions_revoked(lost)


async def call_listener(
    listener: RebalanceListener | None, method: str, partitions: set[TopicPartition]
) -> None:
    """Call ``listener.<method>(partitions)``, awaiting it if it is a coroutine; an exception
    is logged, not raised (a failing callback must not wedge the group protocol)."""
    if listener is None:
        return
    try:
        result = getattr(listener, method)(set(partitions))
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("rebalance listener %s(%s) failed", method, sorted(partitions))
