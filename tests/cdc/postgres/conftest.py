"""Helpers for the PostgreSQL capture tests: a connection to the test database and a factory
of sources that are closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from kayak.cdc.change import Change, Op, Row
from kayak.cdc.postgres import PostgresSource, enable


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def slot_name(postgres_dsn: str) -> str:
    # Slots are cluster-wide: name them after the per-test database.
    return "kayak_" + postgres_dsn.rsplit("/", 1)[1]


SourceFactory = Callable[..., PostgresSource]


@pytest.fixture
def make_source(postgres_dsn: str, slot_name: str) -> Iterator[SourceFactory]:
    sources: list[PostgresSource] = []

    def make(tables: list[str], *, enable_first: bool = True, **kwargs: Any) -> PostgresSource:
        if enable_first:
            enable(postgres_dsn, tables, publication="kayak", slot=slot_name)
        kwargs.setdefault("poll_interval_s", 0.02)
        source = PostgresSource(postgres_dsn, tables, slot_name=slot_name,
                                publication="kayak", **kwargs)
        sources.append(source)
        return source

    yield make
    for source in sources:
        source.close()


def read_all(source: PostgresSource, *, batch: int = 1000, idle_s: float = 0.3) -> list[Change]:
    """Read until one read waits ``idle_s`` for nothing."""
    changes: list[Change] = []
    while more := source.read(batch, idle_s):
        changes.extend(more)
    return changes


def replay(changes: list[Change], state: dict[tuple[Any, ...], Row] | None = None
           ) -> dict[tuple[Any, ...], Row]:
    """Apply changes in position order to a dict by key, like a target would."""
    state = {} if state is None else state
    for change in sorted(changes, key=lambda c: c.position):
        key_of = change.table.key_of
        if change.before is not None:
            state.pop(tuple(key_of(change.before).values()), None)
        if change.op is not Op.DELETE:
            assert change.after is not None
            state[tuple(key_of(change.after).values())] = change.after
    return state


def slot_confirmed_lsn(conn: psycopg.Connection[Any], slot: str) -> int:
    row = conn.execute(
        "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
        "WHERE slot_name = %s", (slot,)).fetchone()
    assert row is not None
    return int(row[0])
