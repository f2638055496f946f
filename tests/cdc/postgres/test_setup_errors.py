"""enable()/disable() and the errors that say what to fix."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from kayak.cdc.errors import CaptureError, SourceSetupError
from kayak.cdc.postgres import PostgresSource, disable, enable

from .conftest import SourceFactory


def test_enable_creates_publication_and_disable_cleans_up(
    db: psycopg.Connection[Any], postgres_dsn: str, make_source: SourceFactory, slot_name: str
) -> None:
    db.execute("CREATE SCHEMA app")
    db.execute("CREATE TABLE app.a (id int PRIMARY KEY)")
    db.execute("CREATE TABLE b (id int PRIMARY KEY)")
    enable(postgres_dsn, ["app.a"], publication="kayak", slot=slot_name)
    enable(postgres_dsn, ["app.a", "b"], publication="kayak", slot=slot_name)  # adds b
    published = db.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
        "WHERE pubname = 'kayak' ORDER BY 1").fetchall()
    assert published == [("app.a",), ("public.b",)]
    source = make_source(["app.a", "b"], enable_first=False)
    source.close()
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                      (slot_name,)).fetchone() == (1,)
    disable(postgres_dsn, publication="kayak", slot=slot_name)
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                      (slot_name,)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)


def test_table_problems_are_clear(db: psycopg.Connection[Any], postgres_dsn: str) -> None:
    db.execute("CREATE TABLE nokey (v int)")
    db.execute("CREATE TABLE nothing (id int PRIMARY KEY)")
    db.execute("ALTER TABLE nothing REPLICA IDENTITY NOTHING")
    with pytest.raises(SourceSetupError, match=r"public\.nokey has no primary key"):
        enable(postgres_dsn, ["nokey"])
    with pytest.raises(SourceSetupError, match="REPLICA IDENTITY NOTHING"):
        enable(postgres_dsn, ["nothing"])
    with pytest.raises(SourceSetupError, match=r"public\.missing does not exist"):
        enable(postgres_dsn, ["missing"])
    with pytest.raises(SourceSetupError, match="slot name"):
        enable(postgres_dsn, ["nothing"], slot="Bad-Name")
    # "x.y" would become x_y (and collide with a real x_y) if it were mangled: refused.
    db.execute('CREATE TABLE dotted (id int PRIMARY KEY, "x.y" int, x_y int)')
    with pytest.raises(SourceSetupError, match=r"column 'x\.y' of public\.dotted is not a valid"):
        enable(postgres_dsn, ["dotted"])
    assert db.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)


def test_source_needs_the_publication(db: psycopg.Connection[Any], postgres_dsn: str,
                                      slot_name: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("CREATE TABLE u (id int PRIMARY KEY)")
    with pytest.raises(SourceSetupError, match="publication 'kayak' does not exist"):
        PostgresSource(postgres_dsn, ["t"], slot_name=slot_name)
    enable(postgres_dsn, ["t"], slot=slot_name)
    with pytest.raises(SourceSetupError, match=r"does not publish public\.u"):
        PostgresSource(postgres_dsn, ["t", "u"], slot_name=slot_name)


def test_privileges(db: psycopg.Connection[Any], postgres_dsn: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("DROP ROLE IF EXISTS plain_user")
    db.execute("CREATE ROLE plain_user LOGIN")
    try:
        dsn = postgres_dsn.replace("kayak@", "plain_user@")
        with pytest.raises(SourceSetupError, match="may not use replication slots"):
            enable(dsn, ["t"])
        db.execute("ALTER ROLE plain_user REPLICATION")
        with pytest.raises(SourceSetupError, match=r"no SELECT privilege on public\.t"):
            enable(dsn, ["t"])
    finally:
        db.execute("DROP ROLE plain_user")


def test_bad_dsn(postgres_server: Any) -> None:
    dsn = f"postgresql://kayak@127.0.0.1:{postgres_server.port}/no_such_database"
    with pytest.raises(SourceSetupError, match="cannot connect to PostgreSQL"):
        enable(dsn, ["t"])
    with pytest.raises(SourceSetupError, match="cannot connect to PostgreSQL"):
        PostgresSource("postgresql://kayak:secret@127.0.0.1:1/x", ["t"])
    try:
        PostgresSource("postgresql://kayak:secret@127.0.0.1:1/x", ["t"])
    except SourceSetupError as e:
        assert "secret" not in str(e)


def test_wal_level_not_logical(postgres_server: Any) -> None:
    cluster = postgres_server.start_cluster(wal_level="replica")
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    with pytest.raises(SourceSetupError, match=r"wal_level is 'replica'.*'logical'"):
        enable(cluster.dsn(), ["t"])


def test_dropped_slot_is_a_clear_error(
    db: psycopg.Connection[Any], make_source: SourceFactory, slot_name: str
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    source = make_source(["t"])
    assert source.read(10, 0) == []
    db.execute("SELECT pg_drop_replication_slot(%s)", (slot_name,))
    with pytest.raises(CaptureError, match=f"replication slot '{slot_name}'"):
        source.read(10, 0)


def test_quoted_table_names_are_accepted(db: psycopg.Connection[Any], postgres_dsn: str) -> None:
    db.execute('CREATE TABLE "Orders" (id int PRIMARY KEY)')
    db.execute('CREATE SCHEMA "Shop"')
    db.execute('CREATE TABLE "Shop"."Line""Items" (id int PRIMARY KEY)')
    enable(postgres_dsn, ['public."Orders"', '"Shop"."Line""Items"'], publication="quoted")
    published = db.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = 'quoted' "
        "ORDER BY 1, 2").fetchall()  # fmt: skip
    assert published == [("Shop", 'Line"Items'), ("public", "Orders")]
    with pytest.raises(SourceSetupError, match="parts may be quoted"):
        enable(postgres_dsn, ['"Shop".Line"Items'], publication="quoted")
    disable(postgres_dsn, publication="quoted", slot=None)
