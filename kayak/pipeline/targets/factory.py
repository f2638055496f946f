"""Which target a URL names: the one place that knows every concrete target.

:mod:`~kayak.pipeline.targets.base` holds the interface and the helpers the targets share; it
imports no target, so the concrete targets can import it.
"""

from __future__ import annotations

from kayak.pipeline.targets.base import Target
from kayak.pipeline.targets.sqlite import SqliteTarget

__all__ = ["open_target"]


def open_target(url: str) -> Target:
    """``sqlite:PATH`` or ``postgresql://…`` (any libpq URL) → a connected target."""
    if url.startswith("sqlite:"):
        return SqliteTarget(url.removeprefix("sqlite:").removeprefix("//"))
    if url.startswith(("postgresql://", "postgres://")):
        # psycopg comes with the optional ``postgres`` extra: load it only for a PostgreSQL URL.
        from kayak.pipeline.targets.postgres import PostgresTarget

        return PostgresTarget(url)  # type: ignore[no-any-return, unused-ignore]
    raise ValueError(f"target must be sqlite:PATH or postgresql://…, not {url!r}")
