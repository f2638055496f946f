"""Where committed consumer offsets live: a store interface and an in-memory store.

The coordinator reads through :meth:`OffsetStore.fetch` / :meth:`OffsetStore.fetch_all` on
every OffsetFetch, so those are plain calls that must answer from memory. Writes may have to
reach a durable log first, so :meth:`OffsetStore.commit` and :meth:`OffsetStore.delete_group`
are coroutines; the coordinator answers a commit only after the store's ``commit`` returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kayak.errors import ErrorCode, KafkaError, KayakError
from kayak.protocol.messages.group_coordinator.group_metadata_value import GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's committed position for a group, as OffsetFetch returns it."""

    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int  # milliseconds since the epoch


class OffsetStoreError(KayakError):
    """A store could not make a commit or deletion durable.

    ``cause`` is the Kafka error code of what failed underneath: KAFKA_STORAGE_ERROR for a disk
    error, MESSAGE_TOO_LARGE for a record over ``max.message.bytes``, UNKNOWN_SERVER_ERROR when
    the store does not say. :attr:`commit_error` and :attr:`delete_error` turn it into the code
    the client is answered with; any exception other than this one is a bug.
    """

    def __init__(self, message: str, cause: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(message)
        self.cause = cause

    @classmethod
    def wrapping(cls, what: str, exc: BaseException) -> OffsetStoreError:
        """``what`` failed because of ``exc``; an OSError is a storage error, as in Kafka."""
        if isinstance(exc, KafkaError):
            cause = ErrorCode(exc.code)
        elif isinstance(exc, OSError):
            cause = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            cause = ErrorCode.UNKNOWN_SERVER_ERROR
        return cls(f"{what}: {exc}", cause)

    @property
    def commit_error(self) -> ErrorCode:
        """The answer to OffsetCommit, TxnOffsetCommit and OffsetDelete for this failure.

        Kafka's GroupMetadataManager maps append errors so: the log gone or a disk error means
        this broker is not the coordinator any more (the client looks it up again), a record
        too large means the commit itself is too large; anything else is retriable.
        """
        if self.cause in _NOT_COORDINATOR_CAUSES:
            return ErrorCode.NOT_COORDINATOR
        if self.cause in _TOO_LARGE_CAUSES:
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    @property
    def delete_error(self) -> ErrorCode:
        """The answer to DeleteGroups for this failure (there is no size error to report)."""
        if self.cause in _NOT_COORDINATOR_CAUSES:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_NOT_AVAILABLE


_NOT_COORDINATOR_CAUSES = frozenset(
    {ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)
_TOO_LARGE_CAUSES = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)


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

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """Forget ``group``'s commits for these ``(topic, partition)`` (OffsetDelete)."""
        ...

    async def commit_transactional(
        self,
        group: str,
        producer_id: int,
        epoch: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> None:
        """Record offsets committed inside a transaction (TxnOffsetCommit): they count once
        ``marker_written`` says the transaction committed."""
        ...

    def marker_written(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended (``commit`` or abort)."""
        ...

    def pending_transactional(self, group: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset for this partition."""
        ...

    async def store_group(self, group: str, snapshot: GroupMetadataValue) -> None:
        """Keep the group's settled generation (Kafka's group metadata record); the latest
        one stored is what :meth:`stored_groups` gives after a restart. Deleting the group
        (:meth:`delete_group`) forgets it."""
        ...

    def stored_groups(self) -> dict[str, GroupMetadataValue]:
        """The groups' generations as last stored (read once, when the coordinator starts)."""
        ...


class InMemoryOffsetStore:
    """An :class:`OffsetStore` kept in a dict: fast, and gone when the process exits."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._pending: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
        self._snapshots: dict[str, GroupMetadataValue] = {}

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
        self._snapshots.pop(group, None)

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        offsets = self._groups.get(group, {})
        for key in partitions:
            offsets.pop(key, None)
        if not offsets:
            self._groups.pop(group, None)

    async def commit_transactional(
        self,
        group: str,
        producer_id: int,
        epoch: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> None:
        pending = self._pending.setdefault(producer_id, {})
        pending.update({(group, topic, partition): c for topic, partition, c in offsets})

    def marker_written(self, partition: int, producer_id: int, commit: bool) -> None:
        pending = self._pending.pop(producer_id, {})
        for (group, topic, index), committed in pending.items() if commit else ():
            self._groups.setdefault(group, {})[(topic, index)] = committed

    def pending_transactional(self, group: str, topic: str, partition: int) -> bool:
        return any((group, topic, partition) in p for p in self._pending.values())

    async def store_group(self, group: str, snapshot: GroupMetadataValue) -> None:
        self._snapshots[group] = snapshot

    def stored_groups(self) -> dict[str, GroupMetadataValue]:
        return dict(self._snapshots)
