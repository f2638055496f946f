"""What a pipeline's start installs on its source, and what a failed start takes away:
only what that start installed, never what was there before."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from kayak.cdc.postgres.slot import slot_exists
from kayak.cdc.sqlite import enable
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.workload import create_orders


def _kayak_objects(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%kayak%'")
        return sorted(name for (name,) in rows)
    finally:
        conn.close()


def test_sqlite_undo_removes_what_this_start_enabled(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    create_orders(str(source), 10)
    setup = prepare_source(PipelineSpec(f"sqlite:{source}", ["orders"], "sqlite:x", tmp_path))
    assert setup.sqlite_tables == ["orders"] and _kayak_objects(source) != []
    setup.undo()
    assert _kayak_objects(source) == []


def test_sqlite_capture_enabled_before_is_left_alone(tmp_path: Path) -> None:
    source = tmp_path / "shop.db"
    create_orders(str(source), 10)
    enable(str(source), "orders")  # `kayak cdc enable`, before the pipeline
    before = _kayak_objects(source)
    setup = prepare_source(PipelineSpec(f"sqlite:{source}", ["orders"], "sqlite:x", tmp_path))
    assert setup.sqlite_tables == []
    setup.undo()
    assert _kayak_objects(source) == before != []


def _publications(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [name for (name,) in conn.execute("SELECT pubname FROM pg_publication")]


def test_postgres_undo_drops_the_publication_and_slot_this_start_made(
    postgres_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION kept FOR TABLE items")  # someone else's
    spec = PipelineSpec(postgres_dsn, ["items"], "sqlite:x", tmp_path, slot_name="failed")
    setup = prepare_source(spec)
    assert (setup.publication, setup.slot) == ("failed", "failed")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # as the source would
        conn.execute("SELECT pg_create_logical_replication_slot('failed', 'pgoutput')")
    setup.undo()
    assert _publications(postgres_dsn) == ["kept"]
    assert not slot_exists(postgres_dsn, "failed")
    # A publication that was there before the start is not the start's to remove.
    again = prepare_source(
        PipelineSpec(postgres_dsn, ["items"], "sqlite:x", tmp_path, slot_name="kept")
    )
    assert again.publication is None and again.slot == "kept"
    again.undo()
    assert _publications(postgres_dsn) == ["kept"]
