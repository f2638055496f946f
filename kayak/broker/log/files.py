"""Small file operations the storage layer needs to be crash-safe."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def write_atomically(path: Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` so that a crash leaves either the old or the new content, never half.

    ``durable=False`` skips the fsyncs, for files the broker can rebuild if a power loss
    takes the new content back (a producer-state snapshot).
    """
    # The temp name is per process: shards sharing a data directory may write the same file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
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
