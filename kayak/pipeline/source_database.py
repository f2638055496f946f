"""The source database a pipeline captures from, named by URL (``sqlite:PATH`` or a bare path,
``postgresql://…``): what kind it is, its name in events, its capture source, and its tables as
it describes them now (for verification).

PostgreSQL is reached only inside the functions that need it, so a SQLite pipeline imports no
psycopg.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from kayak.cdc.change import Row, TableSchema
from kayak.cdc.source import ChangeSource
from kayak.pipeline.transient import DEFAULT_GIVE_UP_AFTER_S

__all__ = [
    "absolute_sqlite_url",
    "current_table_schema",
    "database_name",
    "generated_columns",
    "open_source",
    "read_source_rows",
    "source_kind",
    "sqlite_path",
]


def source_kind(url: str) -> Literal["sqlite", "postgresql"]:
    """``sqlite`` for ``sqlite:PATH`` (or a bare path), ``postgresql`` for a libpq URL;
    ValueError for any other URL (``mysql://…`` is not a file name)."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    if "://" in url and not url.startswith("sqlite:"):
        scheme = url.split("://", 1)[0]
        raise ValueError(
            f"unsupported source {scheme}://…: sources are SQLite (PATH or sqlite:PATH) and "
            "PostgreSQL (postgresql://…)"
        )
    return "sqlite"


def database_name(url: str) -> str:
    """The ``source.db`` of events: a SQLite file's stem or a PostgreSQL database's name."""
    if source_kind(url) == "sqlite":
        return Path(sqlite_path(url)).stem
    return url.rsplit("/", 1)[-1].split("?")[0]


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:").removeprefix("//")


def absolute_sqlite_url(url: str) -> str:
    """A SQLite URL (``sqlite:PATH``, or a bare path) as ``sqlite:`` + an absolute path, ``~``
    expanded; any other URL unchanged. Spark's executors open the target by URL in working
    directories of their own, where a relative path names another file or none."""
    if "://" in url and not url.startswith("sqlite:"):
        return url
    path = sqlite_path(url)
    if path in ("", ":memory:"):
        return url
    return f"sqlite:{os.path.abspath(os.path.expanduser(path))}"


def open_source(
    url: str, tables: Sequence[str], *, slot_name: str | None = None,
    stopping: threading.Event | None = None, give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S,
) -> ChangeSource:  # fmt: skip
    """A capture source for ``url``; its tables must have been enabled (``kayak cdc enable``
    or :func:`~kayak.pipeline.source_setup.prepare_source`). A PostgreSQL source uses the
    replication slot and the publication named ``slot_name`` (None: the database's own slot
    and publication ``kayak``, see :mod:`kayak.cdc.postgres.slot`), and reconnects (resuming
    at the slot's confirmed position) when its server goes away, for up to
    ``give_up_after_s``; ``stopping`` ends those attempts."""
    if source_kind(url) == "sqlite":
        from kayak.cdc.sqlite import SqliteSource

        return SqliteSource(sqlite_path(url), tables)
    from kayak.cdc.postgres import PostgresSource
    from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION
    from kayak.cdc.reconnect import ReconnectingSource

    publication = slot_name or DEFAULT_PUBLICATION
    return ReconnectingSource(
        lambda: PostgresSource(url, tables, slot_name=slot_name, publication=publication),
        stopping=stopping,
        give_up_after_s=give_up_after_s,
    )


def current_table_schema(url: str, table: str) -> TableSchema:
    """A source table's columns and key as its database describes them now."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.cdc.sqlite import read_table_schema

        conn = sqlite3.connect(sqlite_path(url))
        try:
            return read_table_schema(conn, table)
        finally:
            conn.close()
    from kayak.cdc.postgres.catalog import load_table, parse_table_name
    from kayak.pipeline.targets.postgres_rows import connect

    with connect(url) as pg:
        return load_table(pg, *parse_table_name(table)).schema


def generated_columns(url: str, table: TableSchema) -> tuple[str, ...]:
    """The source table's generated columns, which capture leaves out (so verification
    names them as not compared rather than calling the table equal in silence)."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.cdc.sqlite.schema import quote_identifier

        conn = sqlite3.connect(sqlite_path(url))
        try:
            rows = conn.execute(f"PRAGMA table_xinfo({quote_identifier(table.name)})").fetchall()
        finally:
            conn.close()
        return tuple(row[1] for row in rows if row[6] in (2, 3))  # hidden: virtual, stored
    from kayak.pipeline.targets.postgres_rows import connect

    with connect(url) as pg:
        found = pg.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relname = %s AND a.attgenerated <> '' AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (table.schema, table.name),
        ).fetchall()
    return tuple(str(name) for (name,) in found)


def read_source_rows(url: str, table: TableSchema) -> list[Row]:
    """Every row of a source table, in its column types' representation."""
    if source_kind(url) == "sqlite":
        import sqlite3

        from kayak.pipeline.targets.sqlite import read_sqlite_rows

        conn = sqlite3.connect(sqlite_path(url))
        try:
            return read_sqlite_rows(conn, table)
        finally:
            conn.close()
    from psycopg import sql

    from kayak.pipeline.targets.postgres_rows import connect, read_postgres_rows

    with connect(url) as pg:
        name = sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.name))
        return read_postgres_rows(pg, table, name)
