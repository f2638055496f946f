"""Default slot names: one per database (slots are cluster-wide), and the old default kept."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kayak.cdc.change import Op
from kayak.cdc.postgres import PostgresSource, disable, enable
from kayak.cdc.postgres.slot import default_slot_name, resolve_slot

from .conftest import read_all

_numbers = itertools.count(1)


@pytest.fixture
def other_dsn(postgres_server: Any) -> Iterator[str]:
    """A second database of the same cluster, dropped (with its slots) afterwards."""
    dbname = f"other_{next(_numbers)}_{id(postgres_server) % 10_000}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield postgres_server.dsn(dbname)
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL", (dbname,))  # fmt: skip
            for (slot,) in admin.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (dbname,)
            ).fetchall():
                admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def test_default_slot_name_follows_the_slot_name_rules() -> None:
    assert default_slot_name("source0") == "kayak_source0"
    odd = default_slot_name("Orders-DB")
    assert odd.startswith("kayak_orders_db_") and odd != default_slot_name("orders_db")
    long_a, long_b = default_slot_name("x" * 70 + "a"), default_slot_name("x" * 70 + "b")
    for name in (odd, long_a, long_b, default_slot_name("ünï côdé")):
        assert len(name) <= 63 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in name)
    assert long_a != long_b


def _table(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, %s)", (rows,))


def test_two_databases_of_one_cluster_capture_with_default_slots(
    postgres_dsn: str, other_dsn: str
) -> None:
    for dsn, rows in ((postgres_dsn, 2), (other_dsn, 3)):
        _table(dsn, rows)
        enable(dsn, ["t"])
    # Before slots were named per database, the second source failed: "replication slot
    # 'kayak' belongs to database ..., not ...".
    with (
        PostgresSource(postgres_dsn, ["t"], poll_interval_s=0.02) as first,
        PostgresSource(other_dsn, ["t"], poll_interval_s=0.02) as second,
    ):
        assert len(read_all(first)) == 2 and len(read_all(second)) == 3
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        slots = dict(conn.execute("SELECT slot_name, database FROM pg_replication_slots"))
    for dsn in (postgres_dsn, other_dsn):
        dbname = dsn.rsplit("/", 1)[1]
        assert slots[default_slot_name(dbname)] == dbname
        assert disable(dsn) == default_slot_name(dbname)  # the default slot, dropped
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        left = {r[0] for r in conn.execute("SELECT slot_name FROM pg_replication_slots")}
    assert not left & {default_slot_name(d.rsplit("/", 1)[1]) for d in (postgres_dsn, other_dsn)}


def test_a_slot_kayak_an_earlier_version_made_is_kept(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    _table(postgres_dsn, 2)
    enable(postgres_dsn, ["t"])
    # What an earlier kayak did by default: slot and publication both "kayak".
    with PostgresSource(postgres_dsn, ["t"], slot_name="kayak", publication="kayak",
                        poll_interval_s=0.02) as old:  # fmt: skip
        snapshot = read_all(old)
        old.acknowledge(snapshot[-1])
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (3)")

    assert resolve_slot(postgres_dsn, None) == "kayak"
    caplog.clear()  # the line of the source's start only
    with caplog.at_level(logging.INFO, logger="kayak.cdc.postgres.slot"):
        upgraded = PostgresSource(postgres_dsn, ["t"], poll_interval_s=0.02)
    with upgraded:
        # Streams on from the old slot's position: no second snapshot, nothing lost.
        assert [(c.op, c.after) for c in read_all(upgraded)] == [(Op.CREATE, {"id": 3})]
    notes = [r.getMessage() for r in caplog.records if "earlier kayak" in r.getMessage()]
    assert len(notes) == 1 and "kayak_" in notes[0]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        names = {r[0] for r in conn.execute("SELECT slot_name FROM pg_replication_slots")}
    assert "kayak" in names and default_slot_name(postgres_dsn.rsplit("/", 1)[1]) not in names
    assert disable(postgres_dsn) == "kayak"


def test_a_slot_kayak_of_another_database_is_not_taken(postgres_dsn: str, other_dsn: str) -> None:
    _table(other_dsn, 1)
    enable(other_dsn, ["t"])
    with PostgresSource(other_dsn, ["t"], slot_name="kayak") as old:
        read_all(old)
    _table(postgres_dsn, 1)
    enable(postgres_dsn, ["t"])
    with PostgresSource(postgres_dsn, ["t"], poll_interval_s=0.02) as mine:
        assert len(read_all(mine)) == 1
    assert resolve_slot(postgres_dsn, None) == default_slot_name(postgres_dsn.rsplit("/", 1)[1])


def test_cdc_enable_and_disable_use_the_databases_default_slot(postgres_dsn: str) -> None:
    from click.testing import CliRunner

    from kayak.cli.main import cli

    _table(postgres_dsn, 1)
    enabled = CliRunner().invoke(cli, ["cdc", "enable", postgres_dsn, "t"])
    assert enabled.exit_code == 0, enabled.output
    with PostgresSource(postgres_dsn, ["t"]) as source:
        assert len(read_all(source)) == 1
    slot = default_slot_name(postgres_dsn.rsplit("/", 1)[1])
    disabled = CliRunner().invoke(cli, ["cdc", "disable", postgres_dsn, "t"])
    assert disabled.exit_code == 0, disabled.output
    assert f"dropped slot {slot} and publication kayak" in disabled.output
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone() == (0,)  # fmt: skip
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
