"""Small file operations the storage layer needs to be crash-safe."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def write_atomically(path: Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` so that a crash leaves either the old or the new content, never half.

    ``durable=False`` skips the fsyncs, for files the broker can rebuild if a power loss
    takes the new content back (a producer-state snapshot).
    """
    # The temp name is per process and thread: shards sharing a data directory may write the
    # same file, and so may the log cleaner's thread and the event loop (sealed-segments).
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_native_id()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) across processes."""
    with open(path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def remove_quietly(path: Path) -> None:
    """Delete ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class DirectoryLock:
    """An exclusive ``flock`` on a lock file naming its holder's pid, held while a broker
    process owns a data directory (Kafka's ``.lock``); the kernel drops it when the process
    dies, however it dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock now or raise ``OSError(EAGAIN)`` naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OSError(
                errno.EAGAIN,
                f"data directory {self.path.parent} is in use by another broker process "
                f"(pid {holder}, holding {self.path.name})",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
