"""The group coordinator for classic consumer groups (JoinGroup/SyncGroup), without sockets.

- :class:`GroupCoordinator`: one coroutine per group API, decoded request in, response out.
- :class:`GroupCoordinatorConfig`: its settings, by Kafka's broker property names.
- :class:`OffsetStore`: where committed offsets live; :class:`InMemoryOffsetStore` keeps
  them in a dict (the broker uses a durable store).
- :class:`GroupState`: the states a group goes through; ``ALLOWED_TRANSITIONS`` is the table.
"""

from __future__ import annotations

from kayak.broker.group.config import GroupCoordinatorConfig
from kayak.broker.group.coordinator import GroupCoordinator
from kayak.broker.group.offsets import (
    CommittedOffset,
    InMemoryOffsetStore,
    OffsetStore,
    OffsetStoreError,
)
from kayak.broker.group.protocol_selection import select_protocol
from kayak.broker.group.state import ALLOWED_TRANSITIONS, GroupState, IllegalGroupTransitionError

__all__ = [
    "ALLOWED_TRANSITIONS",
    "CommittedOffset",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupState",
    "IllegalGroupTransitionError",
    "InMemoryOffsetStore",
    "OffsetStore",
    "OffsetStoreError",
    "select_protocol",
]
