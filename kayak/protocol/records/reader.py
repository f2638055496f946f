"""Reading a buffer of concatenated batches, the ``records`` field of a Fetch response.

Magic 2 batches become :class:`~.batch.RecordBatch`, magic 0/1 messages
:class:`~.legacy.LegacyBatch`. A trailing partial batch (brokers cut responses at
``max_bytes``) ends the iteration quietly; :attr:`BatchIterator.complete_bytes` says where.
"""

from __future__ import annotations

from collections.abc import Iterator

from kayak.protocol.records.batch import RecordBatch
from kayak.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from kayak.protocol.records.legacy import LegacyBatch
from kayak.protocol.records.record import MAGIC_V2, Record
from kayak.protocol.records.scanner import BatchScan

Buffer = bytes | bytearray | memoryview
AnyBatch = RecordBatch | LegacyBatch


class BatchIterator:
    """Iterates the complete batches of a buffer, checking each CRC if asked to."""

    __slots__ = ("_buf", "_check_crc", "_max_decompressed_size", "_scan")

    def __init__(
        self,
        buf: Buffer,
        pos: int = 0,
        *,
        check_crc: bool = True,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        self._buf = buf  # passed on as is: a batch reads uncompressed records in place in bytes
        self._scan = BatchScan(buf, pos)
        self._check_crc = check_crc
        self._max_decompressed_size = max_decompressed_size

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> AnyBatch:
        header = next(self._scan)
        batch: AnyBatch
        if header.magic == MAGIC_V2:
            batch = RecordBatch(
                self._buf, header.position, max_decompressed_size=self._max_decompressed_size
            )
        else:
            batch = LegacyBatch(
                self._buf, header.position, max_decompressed_size=self._max_decompressed_size
            )
        if self._check_crc:
            batch.validate_crc()
        return batch

    @property
    def complete_bytes(self) -> int:
        """Where the complete batches seen so far end."""
        return self._scan.complete_bytes

    @property
    def partial(self) -> bool:
        """After iteration: whether a partial batch follows the complete ones."""
        return self._scan.partial


def iter_batches(
    buf: Buffer,
    pos: int = 0,
    *,
    check_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> BatchIterator:
    """Iterate the batches (any magic) in ``buf``, stopping quietly at a partial one."""
    return BatchIterator(buf, pos, check_crc=check_crc, max_decompressed_size=max_decompressed_size)


def parse_batches(
    buf: Buffer,
    *,
    check_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[AnyBatch]:
    """Every complete batch in ``buf``, as a list."""
    return list(
        BatchIterator(buf, check_crc=check_crc, max_decompressed_size=max_decompressed_size)
    )


def iter_records(
    buf: Buffer,
    *,
    check_crc: bool = True,
    skip_control: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Every record of every complete batch in ``buf``, control records skipped by default."""
    for batch in BatchIterator(
        buf, check_crc=check_crc, max_decompressed_size=max_decompressed_size
    ):
        if skip_control and batch.is_control:
            continue
        yield from batch.records()
