"""The pgoutput parser, on messages captured from a real server and on bad bytes."""

from __future__ import annotations

import struct
import time
from typing import Any

import psycopg
import pytest

from kayak.cdc.change import ColumnType
from kayak.cdc.errors import ChangeDecodeError
from kayak.cdc.postgres import pgoutput
from kayak.cdc.postgres.pgoutput import UNCHANGED_TOAST, parse_message
from kayak.cdc.postgres.types import decode_value


def capture(db: psycopg.Connection[Any], slot: str, statements: list[str]
            ) -> list[tuple[int, bytes]]:
    db.execute("CREATE PUBLICATION pub FOR TABLE t")
    db.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    for statement in statements:
        db.execute(statement)
    rows = db.execute(
        "SELECT (lsn - '0/0')::bigint, data FROM pg_logical_slot_peek_binary_changes("
        "%s, NULL, NULL, 'proto_version', '1', 'publication_names', 'pub')", (slot,)
    ).fetchall()
    return [(int(lsn), bytes(data)) for lsn, data in rows]


def test_messages_from_a_real_server(db: psycopg.Connection[Any], slot_name: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(10,2), "
               "big text)")
    before = time.time()
    rows = capture(db, slot_name, [
        "INSERT INTO t VALUES (1, 'zoë', 12.50, NULL)",
        "UPDATE t SET name = 'b' WHERE id = 1",
        "UPDATE t SET id = 2 WHERE id = 1",
        "INSERT INTO t SELECT 3, NULL, NULL, string_agg(md5(i::text), '') "
        "FROM generate_series(1, 3000) i",
        "UPDATE t SET name = 'toast kept' WHERE id = 3",
        "ALTER TABLE t REPLICA IDENTITY FULL",
        "UPDATE t SET amount = 1 WHERE id = 2",
        "DELETE FROM t WHERE id = 2",
        "ALTER TABLE t REPLICA IDENTITY DEFAULT",
        "DELETE FROM t WHERE id = 3",
        "TRUNCATE t",
    ])
    messages = [parse_message(data) for _, data in rows]
    kinds = [type(m).__name__ for m in messages]
    # The two ALTER TABLE transactions have no row changes and are not sent (PostgreSQL 15+).
    assert kinds.count("Begin") == kinds.count("Commit") == 9

    begin = messages[0]
    assert isinstance(begin, pgoutput.Begin)
    assert before - 5 < begin.commit_ts_us / 1e6 < time.time() + 5
    relation = messages[1]
    assert isinstance(relation, pgoutput.Relation)
    assert (relation.namespace, relation.name, relation.replica_identity) == ("public", "t", "d")
    assert [(c.name, c.is_key, c.type_oid) for c in relation.columns] == [
        ("id", True, 23), ("name", False, 25), ("amount", False, 1700), ("big", False, 25)]
    assert relation.columns[2].type_modifier == (10 << 16 | 2) + 4
    insert = messages[2]
    assert insert == pgoutput.Insert(relation.oid, ("1", "zoë", "12.50", None))
    commit = messages[3]
    assert isinstance(commit, pgoutput.Commit)
    assert commit.commit_lsn == begin.final_lsn
    assert commit.end_lsn > commit.commit_lsn
    assert commit.commit_ts_us == begin.commit_ts_us
    assert rows[3][0] == commit.end_lsn  # peek reports a commit at its end LSN

    updates = [m for m in messages if isinstance(m, pgoutput.Update)]
    assert updates[0] == pgoutput.Update(relation.oid, None, None, ("1", "b", "12.50", None))
    # A key change under REPLICA IDENTITY DEFAULT sends the old key ('K').
    assert updates[1] == pgoutput.Update(relation.oid, "K", ("1", None, None, None),
                                         ("2", "b", "12.50", None))
    assert updates[2].new == ("3", "toast kept", None, UNCHANGED_TOAST)
    assert updates[3].old_kind == "O" and updates[3].old == ("2", "b", "12.50", None)
    deletes = [m for m in messages if isinstance(m, pgoutput.Delete)]
    assert deletes == [pgoutput.Delete(relation.oid, "O", ("2", "b", "1.00", None)),
                       pgoutput.Delete(relation.oid, "K", ("3", None, None, None))]
    truncate = messages[-2]
    assert truncate == pgoutput.Truncate(False, False, (relation.oid,))


def test_logical_message_and_type(db: psycopg.Connection[Any], slot_name: str) -> None:
    db.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
    db.execute("CREATE TABLE t (id int PRIMARY KEY, feeling mood)")
    db.execute("CREATE PUBLICATION pub FOR TABLE t")
    db.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot_name,))
    db.execute("INSERT INTO t VALUES (1, 'sad')")
    db.execute("SELECT pg_logical_emit_message(true, 'kayak', 'hello'::bytea)")
    rows = db.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', 'pub', 'messages', 'true')",
        (slot_name,)).fetchall()
    messages = [parse_message(r[0]) for r in rows]
    types = [m for m in messages if isinstance(m, pgoutput.TypeInfo)]
    assert [(t.namespace, t.name) for t in types] == [("public", "mood")]
    logical = [m for m in messages if isinstance(m, pgoutput.Message)]
    assert len(logical) == 1
    assert (logical[0].transactional, logical[0].prefix, logical[0].content) == (
        True, "kayak", b"hello")


def _begin(lsn: int = 1, ts: int = 2, xid: int = 3) -> bytes:
    return b"B" + struct.pack(">QqI", lsn, ts, xid)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", "empty"),
        (b"Z\x00", "unknown pgoutput message type 'Z'"),
        (_begin()[:-1], "truncated"),
        (_begin() + b"\x00", "trailing"),
        (b"I\x00\x00\x00\x01X\x00\x00", "expected new tuple 'N'"),
        (b"I\x00\x00\x00\x01N\x00\x01q", "unknown kind 'q'"),
        (b"I\x00\x00\x00\x01N\x00\x01t\x00\x00\x00\x09abc", "truncated"),
        (b"I\x00\x00\x00\x01N\x00\x01t\x00\x00\x00\x02\xff\xfe", "not UTF-8"),
        (b"R\x00\x00\x00\x01public", "not terminated"),
        (b"D\x00\x00\x00\x01N\x00\x00", "expected old tuple"),
        (b"U\x00\x00\x00\x01K\x00\x00K\x00\x00", "expected new tuple"),
    ],
)
def test_bad_bytes_are_clear_errors(data: bytes, error: str) -> None:
    with pytest.raises(ChangeDecodeError, match=error):
        parse_message(data)


def test_begin_timestamp_is_unix_microseconds() -> None:
    # PostgreSQL counts from 2000-01-01: zero is 946684800 s after the Unix epoch.
    message = parse_message(_begin(ts=0))
    assert isinstance(message, pgoutput.Begin)
    assert message.commit_ts_us == 946_684_800_000_000


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (ColumnType.BOOLEAN, "t", True),
        (ColumnType.BOOLEAN, "f", False),
        (ColumnType.LONG, "-9223372036854775808", -(2**63)),
        (ColumnType.DOUBLE, "Infinity", float("inf")),
        (ColumnType.DOUBLE, "0.1", 0.1),
        (ColumnType.DECIMAL, "123456789012345678901234567890.000000001",
         "123456789012345678901234567890.000000001"),
        (ColumnType.BYTES, "\\x00ff10", b"\x00\xff\x10"),
        (ColumnType.STRING, "2024-01-02 03:04:05+00", "2024-01-02 03:04:05+00"),
    ],
)
def test_decode_value(kind: ColumnType, text: str, value: object) -> None:
    assert decode_value(kind, text) == value


@pytest.mark.parametrize(("kind", "text"), [(ColumnType.BOOLEAN, "true"),
                                            (ColumnType.INT, "1.5"),
                                            (ColumnType.BYTES, "\\000")])
def test_decode_value_rejects_unexpected_text(kind: ColumnType, text: str) -> None:
    with pytest.raises(ChangeDecodeError, match=f"as {kind.value}"):
        decode_value(kind, text)
