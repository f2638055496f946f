"""Starting the group coordinator inside the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kayak.broker.group.config import GroupCoordinatorConfig
from kayak.broker.group.coordinator import GroupCoordinator
from kayak.broker.group.offsets import InMemoryOffsetStore

if TYPE_CHECKING:
    from kayak.broker.context import BrokerContext


async def start_coordinator(context: BrokerContext) -> GroupCoordinator:
    """The broker's group coordinator, configured from its :class:`BrokerConfig`.

    Committed offsets are kept in memory (lost on restart) until the broker provides a
    durable :class:`OffsetStore`.
    """
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=context.config.group_initial_rebalance_delay_ms
    )
    return GroupCoordinator(config, InMemoryOffsetStore())
