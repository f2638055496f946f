"""Small file operations the storage layer needs to be crash-safe."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` so that a crash leaves either the old or the new content, never half."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: Path) -> None:
    """Delete ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
