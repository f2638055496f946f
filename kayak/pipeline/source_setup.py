"""Capture switched on in a pipeline's source before its first start (SQLite triggers, a
PostgreSQL publication), and taken away again when that start fails."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from kayak.errors import KayakError
from kayak.pipeline.source_database import source_kind, sqlite_path
from kayak.pipeline.spec import PipelineSpec

__all__ = ["SourceSetup", "prepare_source"]

log = logging.getLogger(__name__)


@dataclass
class SourceSetup:
    """What :func:`prepare_source` installed on the source, so that a pipeline whose start
    fails can take it away again; what existed before is left alone."""

    url: str
    sqlite_tables: list[str] = field(default_factory=list)  # capture enabled by this call
    publication: str | None = None  # PostgreSQL: created by this call
    slot: str | None = None  # PostgreSQL: did not exist before (the source creates it)

    def undo(self) -> None:
        """Remove the triggers and change-log tables, or the slot and publication, that
        this call installed."""
        if self.sqlite_tables:
            from kayak.cdc.sqlite import disable

            for table in self.sqlite_tables:
                disable(sqlite_path(self.url), table, drop_log=True)
            log.info("removed the capture of %s set up by this run",
                     ", ".join(self.sqlite_tables))  # fmt: skip
        if self.publication is not None or self.slot is not None:
            from kayak.cdc.postgres import disable as disable_postgres

            disable_postgres(self.url, publication=self.publication, slot=self.slot)
            log.info("removed the publication/slot set up by this run")


def prepare_source(spec: PipelineSpec) -> SourceSetup:
    """Enable capture on the tables not captured yet: SQLite triggers, or the PostgreSQL
    publication (the source makes its slot and snapshot when opened). Returns what it
    installed (:meth:`SourceSetup.undo` takes it away)."""
    setup = SourceSetup(spec.source)
    if source_kind(spec.source) != "sqlite":
        from kayak.cdc.postgres import enable as enable_postgres
        from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION, resolve_slot, slot_exists

        slot_name = resolve_slot(spec.source, spec.slot_name)
        publication = spec.slot_name or DEFAULT_PUBLICATION
        slot_was_there = slot_exists(spec.source, slot_name)
        created = enable_postgres(spec.source, spec.tables, publication=publication, slot=slot_name)
        setup.publication = publication if created else None
        setup.slot = None if slot_was_there else slot_name
        return setup
    import sqlite3

    from kayak.cdc.sqlite import enable, log_table_name

    path = sqlite_path(spec.source)
    if not Path(path).exists():
        raise KayakError(f"SQLite source {path} does not exist")
    conn = sqlite3.connect(path)
    try:
        captured = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        conn.close()
    for table in spec.tables:
        if log_table_name(table) not in captured:
            rows = enable(path, table)
            setup.sqlite_tables.append(table)
            log.info("capture enabled on %s (snapshot of %d rows)", table, rows)
    return setup
