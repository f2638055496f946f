"""Where committed consumer offsets live: a store interface and an in-memory store.

The coordinator reads through :meth:`OffsetStore.fetch` / :meth:`OffsetStore.fetch_all` on
every OffsetFetch, so those are plain calls that must answer from memory. Writes may have to
reach a durable log first, so :meth:`OffsetStore.commit` and :meth:`OffsetStore.delete_group`
are coroutines; the coordinator answers a commit only after the store's ``commit`` returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kayak.errors import KayakError


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's committed position for a group, as OffsetFetch returns it."""

    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int  # milliseconds since the epoch


class OffsetStoreError(KayakError):
    """A store could not make a commit or deletion durable.

    The coordinator answers such failures with COORDINATOR_NOT_AVAILABLE (retriable), as Kafka
    does when it cannot append to ``__consumer_offsets``; any other exception is a bug.
    """


@runtime_checkable
class OffsetStore(Protocol):
    """Committed offsets per group, topic and partition."""

    async def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int,
        metadata: str,
        commit_timestamp: int,
    ) -> None:
        """Record a commit; return once it is as durable as the store promises."""
        ...

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        """The latest commit for one partition, or ``None`` if there is none."""
        ...

    def fetch_all(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """Every partition ``(topic, partition)`` the group has committed for."""
        ...

    def groups(self) -> list[str]:
        """Every group with at least one committed offset (members or not)."""
        ...

    async def delete_group(self, group: str) -> None:
        """Forget every commit of ``group`` (DeleteGroups)."""
        ...


class InMemoryOffsetStore:
    """An :class:`OffsetStore` kept in a dict: fast, and gone when the process exits."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}

    async def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int,
        metadata: str,
        commit_timestamp: int,
    ) -> None:
        committed = CommittedOffset(offset, leader_epoch, metadata, commit_timestamp)
        self._groups.setdefault(group, {})[(topic, partition)] = committed

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self._groups.get(group, {}).get((topic, partition))

    def fetch_all(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        return [group for group, offsets in self._groups.items() if offsets]

    async def delete_group(self, group: str) -> None:
        self._groups.pop(group, None)
