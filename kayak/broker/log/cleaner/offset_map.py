"""The cleaner's dedupe map: a fixed-size table of key hash → latest offset.

Its memory is set once (``log.cleaner.dedupe.buffer.size``) whatever the number of keys, as
Kafka's ``SkimpyOffsetMap``: each slot holds a 16-byte BLAKE2b digest of a key and the
offset of the key's latest record seen so far, 24 bytes a slot, found by linear probing. The
table is never filled past ``LOAD_FACTOR`` (probes stay short); once it is that full, the
cleaner stops mapping and cleans up to the last offset it mapped, and the next cleaning goes
on from there (several passes over a log with more keys than fit).

Two different keys with the same 128-bit digest would be taken for one key: the chance is
negligible (as for Kafka's MD5 digests), and the cost would be one superseded-looking record.
"""

from __future__ import annotations

from array import array
from hashlib import blake2b

DIGEST_SIZE = 16
SLOT_SIZE = DIGEST_SIZE + 8  # digest + int64 offset
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor
_EMPTY = bytes(DIGEST_SIZE)


class OffsetMap:
    """Key → latest offset within a fixed memory budget (see the module doc)."""

    def __init__(self, memory_bytes: int) -> None:
        self.slots = max(memory_bytes // SLOT_SIZE, 2)
        self.max_entries = max(int(self.slots * LOAD_FACTOR), 1)
        self._digests = bytearray(self.slots * DIGEST_SIZE)
        self._offsets = array("q", bytes(8 * self.slots))
        self._used = bytearray(self.slots)  # 1 where a slot holds an entry
        self.size = 0
        self.latest_offset = -1  # the largest offset put so far

    @property
    def full(self) -> bool:
        """No new key may be added any more."""
        return self.size >= self.max_entries

    def _slot(self, digest: bytes) -> tuple[int, bool]:
        """(slot index, whether it holds ``digest``): the digest's slot or the empty one
        where it would go."""
        slot = int.from_bytes(digest[:8], "little") % self.slots
        digests, used = self._digests, self._used
        while used[slot]:
            start = slot * DIGEST_SIZE
            if digests[start : start + DIGEST_SIZE] == digest:
                return slot, True
            slot += 1
            if slot == self.slots:
                slot = 0
        return slot, False

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as ``key``'s latest; False (nothing changed) when the key is new
        and the map is full."""
        digest = blake2b(key, digest_size=DIGEST_SIZE).digest()
        slot, found = self._slot(digest)
        if not found:
            if self.full:
                return False
            start = slot * DIGEST_SIZE
            self._digests[start : start + DIGEST_SIZE] = digest
            self._used[slot] = 1
            self.size += 1
        self._offsets[slot] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``; -1 if none is."""
        slot, found = self._slot(blake2b(key, digest_size=DIGEST_SIZE).digest())
        return self._offsets[slot] if found else -1

    def clear(self) -> None:
        """Forget every entry (the memory stays allocated)."""
        self._digests[:] = bytes(len(self._digests))
        self._used[:] = bytes(self.slots)
        self.size = 0
        self.latest_offset = -1
