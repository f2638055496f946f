"""Finding the longest valid prefix of a segment file after a crash.

The walk is :class:`~kayak.broker.log.batch_walk.BatchWalk` in its "stop at damage" mode, the
same judgement ``kayak log verify`` makes of every batch (framing, CRC-32C and header
structure, magic 2, a base offset that continues the previous batch), read in large chunks.

Where it stops, it also tells a torn tail (a write the crash interrupted: nothing valid
follows) from damage in the middle (a valid batch continues right after the bad one), so
that recovery cuts only what a crash can leave and reports anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kayak.broker.log.batch_walk import BatchWalk, WalkMode
from kayak.protocol.records.scanner import BatchHeader

# Recovery reads this much at a time; any batch that does not fit is read by itself.
RECOVERY_CHUNK = 4 * 1024 * 1024


@dataclass(slots=True)
class SegmentScan:
    """What a CRC scan of one segment found."""

    valid_end: int  # bytes of the longest valid prefix
    next_offset: int  # the offset after the last valid batch
    batches: int
    problem: str | None = None  # why the scan stopped before the end of the file
    damage_inside: bool = False  # valid data follows the bad spot: not a torn tail

    @classmethod
    def run(
        cls,
        fd: int,
        size: int,
        expected_offset: int,
        on_batch: Callable[[BatchHeader], None],
        chunk_size: int = RECOVERY_CHUNK,
    ) -> SegmentScan:
        """Scan ``fd`` (``size`` bytes) from the start, calling ``on_batch`` per valid batch."""
        walk = BatchWalk(fd, size, WalkMode.STOP, expected_offset, chunk_size=chunk_size)
        for batch in walk:
            on_batch(batch.header)
        next_offset = walk.next_offset if walk.next_offset is not None else expected_offset
        problem = str(walk.stop) if walk.stop is not None else None
        return cls(walk.valid_end, next_offset, walk.batches, problem, walk.damage_inside)
