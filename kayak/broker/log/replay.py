"""Reading an internal topic back on start, past whatever damage it holds.

The broker rebuilds state from its own topics (``__consumer_offsets``, ``_schemas``) by
reading them from the log start. One damaged batch there (bytes that fail their CRC, a
payload that does not decompress, a decompression bomb, records that do not decode) must
not stop the broker from starting: it is skipped with one warning naming the partition, the
segment file, the byte position and the offsets lost, and everything after it is read.
What a record *means* is the caller's business (and so is warning about one it cannot use).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator

from kayak.broker.log.partition import PartitionLog
from kayak.protocol.records.record import Record
from kayak.protocol.records.scanner import BatchHeader
from kayak.protocol.records.validation import read_stored_batches

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 4 * 1024 * 1024


def replay_records(plog: PartitionLog, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[Record]:
    """Every readable record of ``plog`` from its log start to its high watermark, in order.

    Raises what :meth:`PartitionLog.read` raises (an offline partition, a file that cannot
    be walked); a damaged batch is logged and skipped.
    """
    for _, records in replay_batches(plog, chunk_bytes):
        yield from records


def replay_batches(
    plog: PartitionLog, chunk_bytes: int = READ_CHUNK_BYTES
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every readable batch of ``plog`` (its header and its records from the log start on),
    for state that depends on batch attributes (transactions, markers)."""
    offset = plog.log_start_offset
    while (found := plog.read(offset, chunk_bytes)) is not None:
        next_offset = offset
        for item in read_stored_batches(found.read()):
            header = item.header
            next_offset = max(next_offset, header.next_offset)
            if item.problem is not None:
                log.warning(
                    "%s: skipping damaged batch at offset %d (offsets %d-%d lost; %s byte %d): %s",
                    plog.directory.name,
                    header.base_offset,
                    max(item.first_unread, offset),
                    header.last_offset,
                    _segment_file(plog, header.base_offset),
                    found.position + header.position,
                    item.problem,
                )
                continue
            # A read starts at the batch holding ``offset``: skip records before it.
            yield header, [record for record in item.records if record.offset >= offset]
        if next_offset <= offset:  # a header that claims no offsets: nothing further is found
            log.warning("%s: replay stopped at offset %d: the log does not advance past it",
                        plog.directory.name, offset)  # fmt: skip
            return
        offset = next_offset


def _segment_file(plog: PartitionLog, offset: int) -> str:
    """The name of the segment file holding ``offset``."""
    bases = [segment.base_offset for segment in plog.segments]
    index = max(bisect.bisect_right(bases, offset) - 1, 0)
    return plog.segments[index].path.name
