"""A bounded set of open segment files, shared by every partition of the process.

A broker with 10,000 partitions cannot keep every segment open (``ulimit -n`` is often
1024), so segment files are opened on use and kept in a least-recently-used cache of
``capacity`` descriptors. A descriptor lives in a :class:`SegmentFile`, which closes it only
when nothing refers to it any more: the cache lets go on eviction, but a fetch response still
holding a slice of the file (or an fdatasync in progress) keeps it open, its *pin*. So a
descriptor number is never reused while a response still means to send from it.

Pins are the only way past the cache's capacity, and they are bounded too: once ``pin_limit``
evicted-but-pinned files are open, :meth:`OpenFiles.pin` refuses and the reader copies the
bytes instead (a fetch of 10,000 partitions in one request then costs memory, bounded by
the fetch's ``max_bytes``, rather than descriptors). At most ``2 * capacity + pin_limit``
segment descriptors are open at any time.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

# Keep the segment cache to a share of RLIMIT_NOFILE: sockets, index writes, the catalog and
# the libraries need the rest. Beyond a few thousand a larger cache buys little.
_SHARE_OF_LIMIT = 2
_MAX_BUDGET = 4096
_MIN_BUDGET = 16


class FileUser(Protocol):
    """What the cache needs of a segment: its path and a slot for its open file."""

    open_file: SegmentFile | None

    @property
    def path(self) -> Path: ...

    def file_evicted(self) -> None:
        """The cache let go of the file (a sealed segment may drop its indexes too)."""


class SegmentFile:
    """An open ``.log`` descriptor, closed once the cache and every slice let go of it."""

    __slots__ = ("__weakref__", "_closer", "fd")

    def __init__(self, fd: int, files: OpenFiles | None = None) -> None:
        self.fd = fd
        self._closer = weakref.finalize(self, _close, fd, files)


def _close(fd: int, files: OpenFiles | None) -> None:
    os.close(fd)
    if files is not None:
        files.closed()


class OpenFiles:
    """An LRU of open segment files; see the module doc for the bounds it keeps."""

    def __init__(self, capacity: int, pin_limit: int) -> None:
        if capacity < 1 or pin_limit < 0:
            raise ValueError(f"capacity {capacity} must be ≥ 1 and pin_limit {pin_limit} ≥ 0")
        self.capacity = capacity
        self.pin_limit = pin_limit
        self.open_count = 0  # every live SegmentFile of this cache, cached or pinned
        self.opened = 0  # opens since start (a cache miss each), for tests and metrics
        self._lru: OrderedDict[int, FileUser] = OrderedDict()
        # Re-entrant: dropping an evicted file runs its finalizer, which counts it closed.
        self._lock = threading.RLock()

    @classmethod
    def for_fd_limit(cls, limit: int) -> OpenFiles:
        """A cache sized from a descriptor limit (RLIMIT_NOFILE): half of it at most."""
        capacity, pin_limit = _bounds(limit)
        return cls(capacity, pin_limit)

    def resize_for_fd_limit(self, limit: int) -> None:
        """Size the cache for ``limit`` (the broker calls it at start: ``ulimit -n`` may have
        changed since import); files over the new capacity are let go now."""
        with self._lock:
            self.capacity, self.pin_limit = _bounds(limit)
            while len(self._lru) > self.capacity:
                _, evicted = self._lru.popitem(last=False)
                evicted.open_file = None
                evicted.file_evicted()

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def pinned(self) -> int:
        """Files open only because a slice or a sync still holds them (evicted from the LRU)."""
        return self.open_count - len(self._lru)

    def file_of(self, user: FileUser, create: bool = False) -> SegmentFile:
        """The open file of ``user``, opening it (and evicting the least recently used)."""
        with self._lock:
            file = user.open_file
            if file is not None:
                self._lru.move_to_end(id(user))
                return file
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            file = SegmentFile(os.open(user.path, flags, 0o644), self)
            self.open_count += 1
            self.opened += 1
            user.open_file = file
            self._lru[id(user)] = user
            while len(self._lru) > self.capacity:
                _, evicted = self._lru.popitem(last=False)
                evicted.open_file = None
                evicted.file_evicted()
            return file

    def pin(self, user: FileUser) -> SegmentFile | None:
        """The open file of ``user`` for a holder that may outlive its place in the cache
        (a fetch response, a sync); None when too many such holders already keep evicted
        files open, and the caller must not hold a descriptor."""
        with self._lock:
            if self.pinned >= self.pin_limit:
                return None
            return self.file_of(user)

    def forget(self, user: FileUser) -> None:
        """Drop ``user``'s file from the cache (holders of its slices keep it open)."""
        with self._lock:
            if self._lru.pop(id(user), None) is not None:
                user.open_file = None

    def closed(self) -> None:
        """A segment file's descriptor was closed: one fewer open."""
        with self._lock:
            self.open_count -= 1


def _bounds(limit: int) -> tuple[int, int]:
    """(capacity, pin_limit) for a descriptor limit: half of it at most, in all."""
    budget = max(_MIN_BUDGET, min(limit // _SHARE_OF_LIMIT, _MAX_BUDGET))
    return budget // 4, budget // 2


def default_fd_limit() -> int:
    """This process's soft RLIMIT_NOFILE (``ulimit -n``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


OPEN_FILES = OpenFiles.for_fd_limit(default_fd_limit())
"""The process's cache: sized from the descriptor limit at import, and again when a broker
starts (:meth:`OpenFiles.resize_for_fd_limit`)."""


def closed_error(path: Path) -> OSError:
    """What using a closed segment raises (a bug, reported as EBADF)."""
    return OSError(errno.EBADF, f"{path.name} is closed")
