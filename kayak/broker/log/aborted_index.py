"""The aborted transactions of one segment (``<base offset>.txnindex``, Kafka's layout).

A read_committed consumer is sent, beside the batches of a fetch, every aborted transaction
those batches may hold records of (producer id and first offset), and drops those records
itself. The entry of a transaction lives in the segment holding its ABORT marker, so a fetch
looks through the indexes of the segments from the one it reads up to where the data it gets
ends.

Entries are appended as markers are written, without their own fsync: the active segment's
index is rebuilt from the log when a start recovers it, and a sealed segment's was synced
when it was sealed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from kayak.broker.log.files import remove_quietly

# version int16, producer id int64, first offset int64, last offset int64, last stable int64
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0
SUFFIX = ".txnindex"


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, where it began and where its marker lies."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the partition's last stable offset once it was aborted


class AbortedTxnIndex:
    """The aborted transactions whose markers are in one segment, in marker order."""

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.path = directory / f"{base_offset:020d}{SUFFIX}"
        self._entries: list[AbortedTxn] | None = None  # read on first use

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(raw) - len(raw) % ENTRY_SIZE  # a torn last entry is rebuilt by recovery
        return [AbortedTxn(*_ENTRY.unpack_from(raw, at)[1:]) for at in range(0, whole, ENTRY_SIZE)]

    def append(self, entry: AbortedTxn) -> None:
        self.entries.append(entry)
        with self.path.open("ab") as f:
            f.write(_ENTRY.pack(_VERSION, *entry))

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Write the index anew (recovery rebuilt it from the log)."""
        self._entries = list(entries)
        if not entries:
            remove_quietly(self.path)
            return
        self.path.write_bytes(b"".join(_ENTRY.pack(_VERSION, *e) for e in entries))

    def sync(self) -> None:
        """fsync the file, if there is one (a segment being sealed)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Entries of transactions that may have records in [start, end)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def delete(self) -> None:
        self._entries = []
        remove_quietly(self.path)
