"""Each group's settled generation written to the offset store, in order, off the request
path.

Membership calls :meth:`GroupMetadataWriter.settled` synchronously when a generation settles;
the write follows in a task, one at a time per group, and a newer generation replaces one not
written yet. A write that fails is logged and dropped: the members carry on, and after a
restart they find the older generation and rejoin, which is where kayak stood before groups
were stored at all.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kayak.broker.group.group import Group
from kayak.broker.group.offsets import OffsetStore, OffsetStoreError
from kayak.broker.group.snapshot import snapshot_of
from kayak.protocol.messages.group_coordinator.group_metadata_value import GroupMetadataValue

log = logging.getLogger(__name__)


class GroupMetadataWriter:
    def __init__(self, groups: dict[str, Group], store: OffsetStore) -> None:
        self._groups = groups
        self._store = store
        self._latest: dict[str, tuple[Group, GroupMetadataValue]] = {}
        self._writing: dict[str, asyncio.Task[None]] = {}

    def settled(self, group: Group) -> None:
        """Store ``group`` as it is now, once the writes before it are done."""
        self._latest[group.group_id] = (group, snapshot_of(group, int(time.time() * 1000)))
        if group.group_id not in self._writing:
            task = asyncio.get_running_loop().create_task(self._drain(group.group_id))
            self._writing[group.group_id] = task

    async def _drain(self, group_id: str) -> None:
        try:
            while (latest := self._latest.pop(group_id, None)) is not None:
                group, snapshot = latest
                if self._groups.get(group_id) is not group:
                    continue  # deleted since: its tombstone is the store's to write
                try:
                    await self._store.store_group(group_id, snapshot)
                except OffsetStoreError as exc:
                    log.warning(
                        "group %s: generation %d not stored (%s); after a restart its "
                        "members rejoin", group_id, snapshot.generation, exc,
                    )  # fmt: skip
        finally:
            del self._writing[group_id]

    async def close(self) -> None:
        """Finish the writes under way (a stopping broker stores what it can)."""
        if self._writing:
            await asyncio.gather(*self._writing.values(), return_exceptions=True)
