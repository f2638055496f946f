"""Which database failures pass and which do not, and the target that rides out the ones that
pass; all with real errors from a real PostgreSQL and SQLite, no Spark.

Transient (retried): connection refused, the backend terminated by an administrator, the
connection closed under the client, "database is locked", a retriable Kafka error, a schema
registry not answering. Permanent (never retried): a constraint violation, a missing table, a
registry's 404, an error with no database or service error behind it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kayak.cdc import Column, ColumnType, TableSchema, format_position
from kayak.errors import (
    KafkaTimeoutError,
    KayakError,
    NotLeaderOrFollowerError,
    SchemaRegistryError,
    TopicAuthorizationFailedError,
)
from kayak.pipeline.targets import AppliedChange, TargetSchemaError
from kayak.pipeline.transient import (
    ReconnectingTarget,
    RetryPolicy,
    call_with_retries,
    is_transient,
)
from kayak.serde import SchemaRegistryClient
from tests.fixtures.postgres import free_port
from tests.pipeline.conftest import CdcBroker

TABLE = TableSchema(
    "public", "accounts",
    (Column("id", ColumnType.LONG, False, "bigint"),
     Column("balance", ColumnType.INT, False, "integer")),
    ("id",),
)  # fmt: skip
FAST = RetryPolicy(give_up_after_s=0.5, backoff_ms=10, backoff_max_ms=50)


def raised(action: Callable[[], object]) -> BaseException:
    try:
        action()
    except Exception as e:
        return e
    raise AssertionError("no error")


def refused_dsn() -> str:
    return f"postgresql://kayak@127.0.0.1:{free_port()}/nothing"


def upsert(i: int, balance: int | None, pos: int) -> AppliedChange:
    return AppliedChange("u", {"id": i}, {"id": i, "balance": balance}, format_position(pos), 0)


def terminate_others(dsn: str) -> int:
    """``pg_terminate_backend`` on every other client backend of the database."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


@pytest.fixture
def conn(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as c:
        c.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
        yield c


def test_postgres_connection_failures_are_transient(
    postgres_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    refused = raised(lambda: psycopg.connect(refused_dsn(), connect_timeout=5))
    assert isinstance(refused, psycopg.OperationalError) and refused.sqlstate is None
    assert is_transient(refused)

    assert terminate_others(postgres_dsn) == 1
    terminated = raised(lambda: conn.execute("SELECT 1"))
    # 57P01 admin_shutdown, or the connection seen closed before the message was read.
    assert isinstance(terminated, psycopg.OperationalError)
    assert terminated.sqlstate in ("57P01", None)
    assert is_transient(terminated)
    closed = raised(lambda: conn.execute("SELECT 1"))
    assert is_transient(closed)
    # Wrapped, as the apply wraps it (ApplyError from the driver's error): still transient.
    try:
        raise KayakError("apply failed on table t") from terminated
    except KayakError as wrapped:
        assert is_transient(wrapped)


def test_postgres_statement_errors_are_permanent(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO t VALUES (1, 1)")
    duplicate = raised(lambda: conn.execute("INSERT INTO t VALUES (1, 2)"))
    assert isinstance(duplicate, psycopg.errors.UniqueViolation)
    assert not is_transient(duplicate)
    assert not is_transient(raised(lambda: conn.execute("INSERT INTO t VALUES (2, NULL)")))
    assert not is_transient(raised(lambda: conn.execute("SELECT * FROM missing")))
    assert not is_transient(raised(lambda: conn.execute("SELECT 1/0")))
    assert not is_transient(TargetSchemaError("table t: column c has unknown type 'evil'"))
    assert not is_transient(ValueError("no database error behind it"))
    # The first database error in the chain decides: a permanent error raised while
    # handling a transient one is permanent.
    refused = raised(lambda: psycopg.connect(refused_dsn(), connect_timeout=5))
    try:
        try:
            raise refused
        except psycopg.OperationalError:
            conn.execute("INSERT INTO t VALUES (1, 3)")
    except psycopg.Error as e:
        assert isinstance(e.__context__, psycopg.OperationalError)
        assert not is_transient(e)


def test_sqlite_locked_is_transient_and_constraint_errors_are_not(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    holder.execute("INSERT INTO t VALUES (1, 1)")
    holder.execute("BEGIN IMMEDIATE")  # holds the write lock
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    locked = raised(lambda: other.execute("INSERT INTO t VALUES (2, 2)"))
    assert isinstance(locked, sqlite3.OperationalError)
    assert locked.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    assert is_transient(locked)
    holder.execute("ROLLBACK")
    assert not is_transient(raised(lambda: other.execute("INSERT INTO t VALUES (1, 2)")))
    assert not is_transient(raised(lambda: other.execute("INSERT INTO t VALUES (3, NULL)")))
    assert not is_transient(raised(lambda: other.execute("SELECT * FROM missing")))
    holder.close()
    other.close()


def test_retries_back_off_then_give_up_with_the_last_error() -> None:
    attempts: list[float] = []

    def connect() -> None:
        attempts.append(time.monotonic())
        psycopg.connect(refused_dsn(), connect_timeout=5).close()

    error = raised(lambda: call_with_retries(connect, what="connecting", policy=FAST))
    assert isinstance(error, psycopg.OperationalError)  # the driver's own, for the one line
    assert len(attempts) >= 3
    assert attempts[-1] - attempts[0] >= FAST.give_up_after_s


def test_a_permanent_error_is_not_retried(conn: psycopg.Connection[Any]) -> None:
    calls = []

    def insert() -> None:
        calls.append(1)
        conn.execute("INSERT INTO t VALUES (1, NULL)")

    error = raised(lambda: call_with_retries(insert, what="inserting", policy=FAST))
    assert isinstance(error, psycopg.errors.NotNullViolation)
    assert calls == [1]


def test_the_target_reconnects_and_redoes_the_transaction(postgres_dsn: str) -> None:
    target = ReconnectingTarget(postgres_dsn, FAST)
    try:
        target.ensure_table(TABLE, "postgresql")
        assert target.apply(TABLE, [upsert(1, 10, 1), upsert(2, 20, 2)]) == 2
        assert terminate_others(postgres_dsn) == 1  # the target's one connection
        assert target.apply(TABLE, [upsert(1, 11, 3), upsert(3, 30, 4)]) == 2
        assert target.reconnects == 1
        # A transaction redone after it committed (its answer lost) changes nothing.
        assert target.apply(TABLE, [upsert(1, 11, 3), upsert(3, 30, 4)]) == 0
        assert terminate_others(postgres_dsn) == 1
        assert target.read_rows(TABLE) == [
            {"id": 1, "balance": 11}, {"id": 2, "balance": 20}, {"id": 3, "balance": 30},
        ]  # fmt: skip
        assert target.reconnects == 2
        # A change the target refuses is not retried: no reconnect, the driver's error.
        refused = raised(lambda: target.apply(TABLE, [upsert(4, None, 5)]))
        assert isinstance(refused, psycopg.errors.NotNullViolation)
        assert target.reconnects == 2
    finally:
        target.close()


def test_the_target_gives_up_when_its_database_stays_away() -> None:
    started = time.monotonic()
    error = raised(lambda: ReconnectingTarget(refused_dsn(), FAST))
    assert isinstance(error, psycopg.OperationalError)
    assert time.monotonic() - started >= FAST.give_up_after_s


def test_kafka_and_registry_errors_by_their_flags_and_status(cdc_broker: CdcBroker) -> None:
    unreachable = raised(lambda: SchemaRegistryClient(f"http://127.0.0.1:{free_port()}")
                         .schema_by_id(1))  # fmt: skip
    assert isinstance(unreachable, SchemaRegistryError) and unreachable.http_status is None
    assert is_transient(unreachable)
    missing = raised(lambda: SchemaRegistryClient(cdc_broker.registry_url).schema_by_id(999))
    assert isinstance(missing, SchemaRegistryError) and missing.http_status == 404
    assert not is_transient(missing)
    assert is_transient(SchemaRegistryError("busy", http_status=503, error_code=50003))
    assert is_transient(KafkaTimeoutError("no answer in time"))
    assert is_transient(NotLeaderOrFollowerError("moved"))
    assert not is_transient(TopicAuthorizationFailedError("denied"))
