"""The one way into a partition log: append, wait until durable and visible, wake fetchers.

Every writer goes through :class:`LogWriter`: produce, ``__consumer_offsets``, ``_schemas``
and the transaction coordinator's state and markers. The rules live here once:

- :meth:`LogWriter.append` is synchronous: it validates, assigns offsets and writes to the
  active segment before the caller's first ``await``, so pipelined requests reach the log in
  the order they were sent. It also *starts* making the data durable (see
  :class:`~kayak.broker.log.group_commit.GroupCommit`), so data nobody waits for (``acks=0``,
  a waiter that went away) still becomes durable and readable.
- :meth:`LogWriter.durable` resolves once everything appended to the log so far is durable
  under the broker's ``--flush`` mode *and* visible to fetches (the high watermark has moved
  past it), or raises a :class:`~kayak.errors.KafkaError` (KAFKA_STORAGE_ERROR when the
  partition went offline, NOT_LEADER_OR_FOLLOWER when it was closed first).
- Fetchers are woken by the log itself, when its high watermark moves
  (``PartitionLog.on_visible``, which the catalog points at ``Partition.data_arrived``),
  never by a writer: a long poll is woken only once there is something new to read.

``on_disk=True`` waits for an fdatasync even under ``--flush never``. It is for the broker's
own state (committed offsets, schemas, transaction state): a single node has no replicas to
hold it, so its disk must, whatever ``--flush`` says about produced records.
"""

from __future__ import annotations

import asyncio

from kayak.broker.log.group_commit import FlushMode, FlushObserver, GroupCommit
from kayak.broker.log.partition import AppendResult, PartitionLog
from kayak.protocol.primitives import Buffer


class LogWriter:
    """Appends to partition logs and tells when they are durable and visible (one per broker)."""

    def __init__(self, mode: FlushMode = FlushMode.GROUP) -> None:
        self.commit = GroupCommit(mode)

    @property
    def mode(self) -> FlushMode:
        return self.commit.mode

    @property
    def observer(self) -> FlushObserver | None:
        return self.commit.observer

    @observer.setter
    def observer(self, observer: FlushObserver | None) -> None:
        self.commit.observer = observer

    def append(
        self, plog: PartitionLog, records: Buffer, now_ms: int | None = None
    ) -> AppendResult:
        """Append produced-format batches now (raises KafkaError, writing nothing, if they are
        refused) and start making them durable."""
        result = plog.append(records, now_ms)
        self.commit.appended(plog)
        return result

    def durable(
        self,
        plog: PartitionLog,
        *,
        on_disk: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> asyncio.Future[None]:
        """Await this: everything appended to ``plog`` so far is durable and visible.

        Call it right after :meth:`append` (before any ``await``) to wait for that append.
        It also covers an idempotent retry that wrote nothing: its first attempt may still
        be on its way to disk. ``loop``: the running loop, when the caller has it at hand.
        """
        return self.commit.sync(plog, on_disk=on_disk, loop=loop)

    async def write(
        self, plog: PartitionLog, records: Buffer, *, on_disk: bool = False
    ) -> AppendResult:
        """:meth:`append`, then wait for :meth:`durable`."""
        result = self.append(plog, records)
        await self.durable(plog, on_disk=on_disk)
        return result

    @property
    def syncs(self) -> int:
        """fdatasync rounds run so far (tests, metrics)."""
        return self.commit.syncs

    def close(self) -> None:
        """Wait for the sync in progress and stop the sync thread."""
        self.commit.close()
