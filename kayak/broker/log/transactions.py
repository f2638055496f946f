"""Transactions in one partition's log: the marker that ends one, and the last stable offset.

A COMMIT or ABORT marker is a control batch the transaction coordinator has a partition write
(:meth:`PartitionLog.append_marker <kayak.broker.log.partition.PartitionLog.append_marker>`).
The *last stable offset* is the first offset of the oldest transaction still open: a
read_committed fetch returns nothing at or past it, so it never hands out records whose
transaction may yet abort.
"""

from __future__ import annotations

from collections.abc import Sequence

from kayak.broker.log.local_log import LocalLog, LogPosition
from kayak.broker.log.producer_state import ProducerStateTable
from kayak.broker.log.segment import Segment
from kayak.errors import InvalidProducerEpochError
from kayak.protocol.records.builder import build_control_batch
from kayak.protocol.records.record import ControlRecordType


def marker_batch(
    producers: ProducerStateTable,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    base_offset: int,
    leader_epoch: int,
) -> bytes:
    """The COMMIT or ABORT control batch for ``producer_id``, at ``base_offset``.

    INVALID_PRODUCER_EPOCH for an epoch older than the producer's here (a zombie
    coordinator's marker).
    """
    state = producers.get(producer_id)
    if state is not None and epoch < state.epoch:
        raise InvalidProducerEpochError(
            f"marker for producer {producer_id} has epoch {epoch}, older than {state.epoch}"
        )
    return build_control_batch(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        producer_id=producer_id, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
        base_offset=base_offset, partition_leader_epoch=leader_epoch,
    )  # fmt: skip


def last_stable_offset(first_unstable: int | None, high_watermark: int, log_start: int) -> int:
    """The high watermark, or ``first_unstable`` (the first offset of the oldest transaction
    still open) when that is below it; never below the log start."""
    if first_unstable is None or first_unstable >= high_watermark:
        return high_watermark
    return max(first_unstable, log_start)


class StableBound:
    """Where the last stable offset lies in the files, for read_committed reads.

    Every such read asks, and it moves only when the oldest open transaction ends: the last
    position worked out is kept until then.
    """

    def __init__(self) -> None:
        self._cached: LogPosition | None = None

    def below(
        self, visible: LogPosition, first_unstable: int | None, local: LocalLog, log_start: int
    ) -> LogPosition:
        """The last stable offset and where it lies, when it is below the high watermark
        (``visible``); otherwise ``visible`` itself."""
        if first_unstable is None or first_unstable >= visible.offset:
            return visible
        cached = self._cached
        if cached is not None and cached.offset == first_unstable:
            return cached
        bound = local.batch_position(first_unstable)
        if bound is None:  # the transaction began before the log start: nothing is stable
            bound = LogPosition(log_start, local.segments[0], 0)
        self._cached = bound
        return bound

    def forget(self, old: Sequence[Segment]) -> None:
        """``old`` were replaced (by the cleaner): find the bound again when next asked for."""
        if self._cached is not None and any(s is self._cached.segment for s in old):
            self._cached = None
