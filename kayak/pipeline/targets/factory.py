"""Which target a URL names: the one place that knows every concrete target.

:mod:`~kayak.pipeline.targets.base` holds the interface and the helpers the targets share; it
imports no target, so the concrete targets can import it.
"""

from __future__ import annotations

from pathlib import Path

from kayak.errors import KayakError
from kayak.pipeline.targets.base import Target
from kayak.pipeline.targets.sqlite import SqliteTarget

__all__ = ["TargetUnavailableError", "check_target", "open_target"]


class TargetUnavailableError(KayakError, ValueError):
    """A target URL that cannot work (one line saying why)."""


def check_target(url: str) -> None:
    """Refuse, before anything starts, a target that cannot work: an unknown URL scheme, a
    SQLite file in a directory that does not exist, PostgreSQL without its driver (the
    ``postgres`` extra) or not answering. Nothing is created."""
    if url.startswith("sqlite:"):
        directory = Path(_sqlite_path(url)).expanduser().resolve().parent
        if not directory.is_dir():
            raise TargetUnavailableError(f"target directory {directory} does not exist")
        return
    if not url.startswith(("postgresql://", "postgres://")):
        raise TargetUnavailableError(f"target must be sqlite:PATH or postgresql://…, not {url!r}")
    try:
        import psycopg
    except ImportError:
        raise TargetUnavailableError(
            "a PostgreSQL target needs psycopg: pip install 'kayak[postgres]'"
        ) from None
    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TargetUnavailableError(f"cannot connect to the target: {first}") from None


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:").removeprefix("//")


def open_target(url: str) -> Target:
    """``sqlite:PATH`` or ``postgresql://…`` (any libpq URL) → a connected target."""
    if url.startswith("sqlite:"):
        return SqliteTarget(_sqlite_path(url))
    if url.startswith(("postgresql://", "postgres://")):
        # psycopg comes with the optional ``postgres`` extra: load it only for a PostgreSQL URL.
        from kayak.pipeline.targets.postgres import PostgresTarget

        return PostgresTarget(url)  # type: ignore[no-any-return, unused-ignore]
    raise ValueError(f"target must be sqlite:PATH or postgresql://…, not {url!r}")
