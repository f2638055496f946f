"""PostgresSource against a real server: snapshot, streaming, acknowledgement, heartbeats."""

from __future__ import annotations

import random
import threading
from typing import Any

import psycopg

from kayak.cdc.change import ColumnType, Op
from kayak.cdc.postgres import PostgresSource
from kayak.cdc.postgres.pgoutput import Commit, parse_message
from kayak.cdc.postgres.types import decode_value

from .conftest import SourceFactory, read_all, replay, slot_confirmed_lsn

# Incompressible, so PostgreSQL stores it out of line (TOAST) and sends it as "unchanged"
# when an update leaves it alone.
BIG_TEXT_SQL = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 32768) i)"


def table_rows(db: psycopg.Connection[Any], source: PostgresSource, table: str
               ) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table now, in the source's value representation, by key."""
    schema = next(t for t in source.tables() if t.name == table)
    # bool::text is 'true'/'false', not the output function's 't'/'f' that pgoutput sends.
    cols = ", ".join(f'"{c.name}"::text' if c.type is not ColumnType.BOOLEAN
                     else f'CASE WHEN "{c.name}" THEN \'t\' WHEN NOT "{c.name}" THEN \'f\' END'
                     for c in schema.columns)
    db.execute("SET bytea_output = 'hex'")
    db.execute("SET TimeZone = 'UTC'")
    rows = [{c.name: None if v is None else decode_value(c.type, v)
             for c, v in zip(schema.columns, values, strict=True)}
            for values in db.execute(f"SELECT {cols} FROM {table}")]
    return {tuple(r[k] for k in schema.key): r for r in rows}


def test_snapshot_then_stream(db: psycopg.Connection[Any], make_source: SourceFactory) -> None:
    db.execute("CREATE TABLE items (id bigint PRIMARY KEY, name varchar(20), price numeric(10,2),"
               " blob bytea, ok boolean, ratio double precision, at timestamptz)")
    db.execute("INSERT INTO items VALUES (1, 'zoë 🚀', 10.10, '\\x00ff', true, 0.1, "
               "'2024-01-02 03:04:05+02'), (2, NULL, NULL, NULL, NULL, NULL, NULL)")
    source = make_source(["items"])
    (schema,) = source.tables()
    assert [(c.name, c.type, c.source_type, c.nullable) for c in schema.columns] == [
        ("id", ColumnType.LONG, "bigint", False),
        ("name", ColumnType.STRING, "character varying(20)", True),
        ("price", ColumnType.DECIMAL, "numeric(10,2)", True),
        ("blob", ColumnType.BYTES, "bytea", True),
        ("ok", ColumnType.BOOLEAN, "boolean", True),
        ("ratio", ColumnType.DOUBLE, "double precision", True),
        ("at", ColumnType.STRING, "timestamp with time zone", True),
    ]
    assert schema.key == ("id",)

    snapshot = source.read(1, 1.0) + source.read(10, 1.0)
    assert [c.op for c in snapshot] == [Op.READ, Op.READ]
    assert [c.snapshot for c in snapshot] == ["true", "last"]
    by_id = {c.after["id"]: c.after for c in snapshot if c.after}
    assert by_id[1] == {"id": 1, "name": "zoë 🚀", "price": "10.10", "blob": b"\x00\xff",
                        "ok": True, "ratio": 0.1, "at": "2024-01-02 01:04:05+00"}
    assert by_id[2] == {"id": 2, "name": None, "price": None, "blob": None, "ok": None,
                        "ratio": None, "at": None}

    db.execute("INSERT INTO items VALUES (3, 'ünï', 99999999.99, '\\xdeadbeef', false, "
               "-1.5e300, '2024-06-01 12:00:00+00')")
    with db.transaction():
        db.execute("UPDATE items SET name = 'two', price = 0.01 WHERE id = 2")
        db.execute("DELETE FROM items WHERE id = 1")
    streamed = read_all(source)
    assert [c.op for c in streamed] == [Op.CREATE, Op.UPDATE, Op.DELETE]
    create, update, delete = streamed
    assert create.after == {"id": 3, "name": "ünï", "price": "99999999.99",
                            "blob": b"\xde\xad\xbe\xef", "ok": False, "ratio": -1.5e300,
                            "at": "2024-06-01 12:00:00+00"}
    assert create.before is None and create.snapshot == "false"
    # REPLICA IDENTITY DEFAULT: no before image on update, only the key on delete.
    assert update.before is None
    assert update.after is not None and update.after["price"] == "0.01"
    assert delete.before == {"id": 1} and delete.after is None
    assert update.tx_id == delete.tx_id != create.tx_id
    assert update.ts_ms == delete.ts_ms >= create.ts_ms >= snapshot[0].ts_ms - 60_000
    assert update.lsn is not None and delete.lsn is not None and update.lsn < delete.lsn

    positions = [c.position for c in snapshot + streamed]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Same transaction: same commit LSN part.
    assert update.position.split("/")[0] == delete.position.split("/")[0]
    assert replay(snapshot + streamed) == table_rows(db, source, "items")


def test_composite_key_and_key_change(db: psycopg.Connection[Any],
                                      make_source: SourceFactory) -> None:
    db.execute("CREATE TABLE pairs (a int, b text, v int, PRIMARY KEY (b, a))")
    db.execute("INSERT INTO pairs VALUES (1, 'x', 10)")
    source = make_source(["public.pairs"])
    assert source.tables()[0].key == ("b", "a")
    read_all(source)
    db.execute("UPDATE pairs SET a = 2 WHERE a = 1 AND b = 'x'")
    db.execute("UPDATE pairs SET v = 11 WHERE a = 2")
    key_change, plain = read_all(source)
    assert key_change.op is Op.UPDATE
    assert key_change.before == {"b": "x", "a": 1}  # the old key, so it can be deleted
    assert key_change.after == {"a": 2, "b": "x", "v": 10}
    assert key_change.key == {"b": "x", "a": 2}
    assert plain.before is None


def test_replica_identity_full(db: psycopg.Connection[Any], make_source: SourceFactory) -> None:
    db.execute("CREATE TABLE f (id int PRIMARY KEY, v text, n numeric)")
    db.execute("ALTER TABLE f REPLICA IDENTITY FULL")
    db.execute("INSERT INTO f VALUES (1, 'a', 1.000000000000000000001)")
    source = make_source(["f"])
    (snap,) = read_all(source)
    assert snap.after == {"id": 1, "v": "a", "n": "1.000000000000000000001"}
    db.execute("UPDATE f SET v = 'b' WHERE id = 1")
    db.execute("UPDATE f SET id = 2 WHERE id = 1")
    db.execute("DELETE FROM f WHERE id = 2")
    update, key_change, delete = read_all(source)
    assert update.before == {"id": 1, "v": "a", "n": "1.000000000000000000001"}
    assert key_change.before == {"id": 1, "v": "b", "n": "1.000000000000000000001"}
    assert delete.before == {"id": 2, "v": "b", "n": "1.000000000000000000001"}


def test_unchanged_toast_values(db: psycopg.Connection[Any], make_source: SourceFactory,
                                postgres_dsn: str, slot_name: str) -> None:
    db.execute("CREATE TABLE docs (id int PRIMARY KEY, title text, body text)")
    db.execute("CREATE TABLE fdocs (id int PRIMARY KEY, title text, body text)")
    db.execute("ALTER TABLE fdocs REPLICA IDENTITY FULL")
    db.execute(f"INSERT INTO docs SELECT 1, 't', {BIG_TEXT_SQL}")
    db.execute(f"INSERT INTO fdocs SELECT 1, 't', {BIG_TEXT_SQL}")
    (body,) = db.execute(f"SELECT {BIG_TEXT_SQL}").fetchone() or ()
    assert len(body) == 1 << 20  # 1 MiB
    source = make_source(["docs", "fdocs"])
    changes = read_all(source)
    source.acknowledge(changes[-1])
    assert [c.after["body"] == body for c in changes if c.after] == [True, True]

    db.execute("UPDATE docs SET title = 'from the cache' WHERE id = 1")
    db.execute("UPDATE fdocs SET title = 'from the old row' WHERE id = 1")
    db.execute(f"INSERT INTO docs SELECT 2, 'new', {BIG_TEXT_SQL}")
    db.execute("UPDATE docs SET title = 'cache of a streamed insert' WHERE id = 2")
    changes = read_all(source)
    assert [(c.after or {})["title"] for c in changes] == [
        "from the cache", "from the old row", "new", "cache of a streamed insert"]
    assert all((c.after or {})["body"] == body for c in changes)
    assert all("unavailable_columns" not in c.extra for c in changes)
    source.acknowledge(changes[-1])
    source.close()

    # A new source has an empty cache: it reads the value from the table.
    db.execute("UPDATE docs SET title = 'fetched' WHERE id = 1")
    db.execute("UPDATE docs SET title = 'gone' WHERE id = 2")
    db.execute("DELETE FROM docs WHERE id = 2")
    restarted = PostgresSource(postgres_dsn, ["docs", "fdocs"], slot_name=slot_name,
                               publication="kayak", poll_interval_s=0.02)
    try:
        fetched, gone, delete = read_all(restarted)
    finally:
        restarted.close()
    assert fetched.after == {"id": 1, "title": "fetched", "body": body}
    # The row no longer exists: the value cannot be had, and the change says so.
    assert gone.after == {"id": 2, "title": "gone", "body": None}
    assert gone.extra["unavailable_columns"] == ["body"]
    assert delete.op is Op.DELETE


def test_concurrent_writers_no_gap_no_reordering(
    db: psycopg.Connection[Any], make_source: SourceFactory, postgres_dsn: str
) -> None:
    db.execute("CREATE TABLE acct (id int PRIMARY KEY, balance bigint NOT NULL, note text)")
    db.execute("INSERT INTO acct SELECT i, 0, 'seed' FROM generate_series(1, 3000) i")
    stop = threading.Event()
    errors: list[BaseException] = []

    def write_some(conn: psycopg.Connection[Any], rng: random.Random) -> None:
        for _ in range(rng.randint(1, 4)):
            key = rng.randint(1, 3300)
            action = rng.random()
            if action < 0.6:
                conn.execute("INSERT INTO acct VALUES (%s, 1, 'w') ON CONFLICT (id) DO "
                             "UPDATE SET balance = acct.balance + 1, note = 'u'", (key,))
            elif action < 0.8:
                conn.execute("DELETE FROM acct WHERE id = %s", (key,))
            else:
                conn.execute("UPDATE acct SET id = id + 5000 WHERE id = %s AND id <= 3300",
                             (key,))

    writes = [0]

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    try:
                        with conn.transaction():
                            write_some(conn, rng)
                    except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
                        continue  # two writers moved keys onto each other: a normal outcome
                    writes[0] += 1
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        source = make_source(["acct"], snapshot_fetch_rows=100)
        changes = []
        while batch := source.read(50, 0.5):  # small batches: writers keep going meanwhile
            changes.extend(batch)
            if batch[-1].snapshot == "last":
                break
        writes_during_snapshot = writes[0]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert writes_during_snapshot > 0
    changes.extend(read_all(source))
    snapshot = [c for c in changes if c.op is Op.READ]
    assert snapshot[-1].snapshot == "last" and changes.index(snapshot[-1]) == len(snapshot) - 1
    assert len(changes) > len(snapshot)

    # Handed out in position order, each position once: per-key order holds.
    positions = [c.position for c in changes]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Replaying in position order gives exactly the table: nothing missed, nothing extra.
    assert replay(changes) == table_rows(db, source, "acct")


def test_restart_without_acknowledge_redelivers(
    db: psycopg.Connection[Any], make_source: SourceFactory
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO t VALUES (1, 1)")
    first = make_source(["t"])
    snapshot = read_all(first)
    first.close()
    # The snapshot was never acknowledged: the next start takes it again.
    second = make_source(["t"])
    assert [(c.op, c.after) for c in snapshot] == [(Op.READ, {"id": 1, "v": 1})]
    second_snapshot = read_all(second)
    assert [c.snapshot for c in second_snapshot] == ["last"]
    second.acknowledge(second_snapshot[-1])
    second.close()

    third = make_source(["t"])
    assert read_all(third) == []  # snapshot acknowledged: streaming only
    db.execute("INSERT INTO t VALUES (2, 2)")
    db.execute("UPDATE t SET v = 3 WHERE id = 1")
    streamed = read_all(third)
    assert [c.op for c in streamed] == [Op.CREATE, Op.UPDATE]
    third.close()
    fourth = make_source(["t"])
    again = read_all(fourth)
    assert [(c.position, c.after) for c in again] == [(c.position, c.after) for c in streamed]
    fourth.acknowledge(again[0])
    fourth.close()
    fifth = make_source(["t"])
    assert [c.position for c in read_all(fifth)] == [streamed[1].position]


def test_acknowledge_advances_slot_exactly(
    db: psycopg.Connection[Any], make_source: SourceFactory, slot_name: str
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    source = make_source(["t"])
    assert read_all(source) == []
    start = slot_confirmed_lsn(db, slot_name)
    db.execute("INSERT INTO t VALUES (1, 1)")
    with db.transaction():
        db.execute("INSERT INTO t VALUES (2, 2)")
        db.execute("INSERT INTO t VALUES (3, 3)")
    db.execute("INSERT INTO t VALUES (4, 4)")
    commit_ends = [
        m.end_lsn for m in (parse_message(r[0]) for r in db.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'kayak')", (slot_name,)))
        if isinstance(m, Commit)]
    assert len(commit_ends) == 3
    first, second_a, second_b, third = read_all(source)
    assert slot_confirmed_lsn(db, slot_name) == start  # reading moves nothing

    source.acknowledge(first)
    assert slot_confirmed_lsn(db, slot_name) == commit_ends[0]
    # Half a transaction: the slot must not move into it.
    source.acknowledge(second_a)
    assert slot_confirmed_lsn(db, slot_name) == commit_ends[0]
    source.acknowledge(second_b)
    assert slot_confirmed_lsn(db, slot_name) == commit_ends[1]
    source.acknowledge(third)
    assert slot_confirmed_lsn(db, slot_name) == commit_ends[2]


def test_heartbeat_moves_idle_slot(
    db: psycopg.Connection[Any], make_source: SourceFactory, slot_name: str,
    postgres_server: Any,
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("CREATE TABLE other (id int PRIMARY KEY)")  # not captured
    source = make_source(["t"], heartbeat_interval_s=0.0)
    assert read_all(source) == []
    start = slot_confirmed_lsn(db, slot_name)

    def write_elsewhere() -> int:
        with psycopg.connect(postgres_server.dsn("postgres"), autocommit=True) as other_db:
            other_db.execute("CREATE TABLE IF NOT EXISTS filler (v int)")
            other_db.execute("INSERT INTO filler SELECT generate_series(1, 1000)")
            (lsn,) = other_db.execute(
                "SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint").fetchone() or ()
            return int(lsn)

    moved_to = write_elsewhere()
    assert source.read(10, 0.1) == []
    assert slot_confirmed_lsn(db, slot_name) >= moved_to > start

    # Never past a handed-out, unacknowledged change.
    db.execute("INSERT INTO t VALUES (1)")
    (pending,) = source.read(10, 1.0)
    held = slot_confirmed_lsn(db, slot_name)
    write_elsewhere()
    db.execute("INSERT INTO other VALUES (1)")
    assert source.read(10, 0.1) == []
    assert slot_confirmed_lsn(db, slot_name) == held
    source.acknowledge(pending)
    assert slot_confirmed_lsn(db, slot_name) > held
    moved_to = write_elsewhere()
    assert source.read(10, 0.1) == []
    assert slot_confirmed_lsn(db, slot_name) >= moved_to


def test_added_column_and_truncate(db: psycopg.Connection[Any], make_source: SourceFactory
                                   ) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    source = make_source(["t"])
    db.execute("INSERT INTO t VALUES (1, 'a')")
    db.execute("ALTER TABLE t ADD COLUMN score numeric(5,1)")
    db.execute("INSERT INTO t VALUES (2, 'b', 4.5)")
    db.execute("UPDATE t SET score = 1 WHERE id = 1")
    db.execute("TRUNCATE t")
    db.execute("INSERT INTO t VALUES (3, 'c', NULL)")
    old, new, update, truncate, after_truncate = read_all(source)
    assert [c.name for c in old.table.columns] == ["id", "v"]
    assert old.after == {"id": 1, "v": "a"}
    assert [c.name for c in new.table.columns] == ["id", "v", "score"]
    assert new.table.column("score").source_type == "numeric(5,1)"
    assert new.table.column("score").nullable
    assert new.after == {"id": 2, "v": "b", "score": "4.5"}
    assert update.table is new.table
    assert update.after == {"id": 1, "v": "a", "score": "1.0"}
    assert truncate.op is Op.TRUNCATE and truncate.table is new.table
    assert truncate.before is None and truncate.after is None
    assert update.position < truncate.position < after_truncate.position
    assert after_truncate.after == {"id": 3, "v": "c", "score": None}


def test_many_types_match_between_snapshot_and_stream(
    db: psycopg.Connection[Any], make_source: SourceFactory
) -> None:
    db.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
    db.execute(
        "CREATE TABLE ty (id int PRIMARY KEY, s smallint, r real, c char(3), u uuid, j json, "
        "jb jsonb, d date, tm time, ts timestamp, iv interval, arr int[], m mood, "
        "n numeric, g int GENERATED ALWAYS AS (id * 2) STORED)")
    values = ("1, -32768, 1.5, 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1]}', "
              "'{\"b\": 2}', '2024-02-29', '23:59:59.5', '2024-01-01 00:00:00', "
              "'1 day 02:03:04', '{1,NULL,3}', 'sad', 'NaN'")
    db.execute(f"INSERT INTO ty VALUES ({values})")
    source = make_source(["ty"])
    (schema,) = source.tables()
    assert "g" not in [c.name for c in schema.columns]  # pgoutput does not send generated ones
    (snap,) = read_all(source)
    db.execute("DELETE FROM ty")
    db.execute(f"INSERT INTO ty VALUES ({values})")
    _, streamed = read_all(source)
    assert snap.after == streamed.after
    assert snap.after == {
        "id": 1, "s": -32768, "r": 1.5, "c": "ab ", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "j": '{"a": [1]}', "jb": '{"b": 2}', "d": "2024-02-29", "tm": "23:59:59.5",
        "ts": "2024-01-01 00:00:00", "iv": "1 day 02:03:04", "arr": "{1,NULL,3}", "m": "sad",
        "n": "NaN"}
    assert [schema.column(n).type for n in ("s", "r", "c", "n")] == [
        ColumnType.INT, ColumnType.DOUBLE, ColumnType.STRING, ColumnType.DECIMAL]
    assert schema.column("c").source_type == "character(3)"
    assert schema.column("arr").source_type == "integer[]"


def test_capture_dying_mid_snapshot_redoes_it(
    db: psycopg.Connection[Any], make_source: SourceFactory
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("INSERT INTO t SELECT generate_series(1, 5)")
    first = make_source(["t"], snapshot_fetch_rows=2)
    partial = first.read(2, 1.0)
    assert [c.snapshot for c in partial] == ["true", "true"]
    first.acknowledge(partial[-1])  # acknowledged, but not the last row
    first.close()
    db.execute("INSERT INTO t VALUES (6)")
    second = make_source(["t"])
    redone = read_all(second)
    assert [c.op for c in redone] == [Op.READ] * 6  # row 6 is in the new snapshot
    assert redone[-1].snapshot == "last"
    assert min(c.position for c in redone) > max(c.position for c in partial)


def test_copy_rows_share_a_wal_record_but_not_a_position(
    db: psycopg.Connection[Any], make_source: SourceFactory
) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    source = make_source(["t"])
    with db.cursor() as cursor, cursor.copy("COPY t FROM STDIN") as copy:
        for n in range(3):
            copy.write_row((n, f"row {n}"))
    changes = read_all(source)
    assert [c.after for c in changes] == [{"id": n, "v": f"row {n}"} for n in range(3)]
    assert len({c.lsn for c in changes}) == 1  # one multi-insert WAL record
    positions = [c.position for c in changes]
    assert positions == sorted(positions) and len(set(positions)) == 3


def test_an_acknowledgement_from_before_a_snapshot_taken_again_does_not_finish_it(
    db: psycopg.Connection[Any], make_source: SourceFactory
) -> None:
    """Capture reconnects while its first snapshot is unacknowledged, so the new source takes
    the snapshot again; the broker then acknowledges what the first source handed out (its
    ``last`` row, a change streamed after it). Neither may record the new snapshot as done:
    had it been, dying inside the new snapshot would resume streaming past rows never
    published (CI met this under load: a delete arrived for a row no snapshot carried)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("INSERT INTO t SELECT generate_series(1, 5)")
    first = make_source(["t"])
    snapshot = read_all(first)
    db.execute("INSERT INTO t VALUES (6)")
    streamed = read_all(first)
    assert [c.snapshot for c in snapshot][-1] == "last" and [c.op for c in streamed] == [Op.CREATE]
    first.close()  # the acknowledgements are still on their way

    second = make_source(["t"], snapshot_fetch_rows=2)
    partial = second.read(2, 1.0)
    assert [c.snapshot for c in partial] == ["true", "true"]
    second.acknowledge(snapshot[-1])
    second.acknowledge(streamed[-1])
    second.acknowledge(partial[-1])
    second.close()  # dies inside its snapshot

    third = make_source(["t"])
    redone = read_all(third)
    assert [c.op for c in redone] == [Op.READ] * 6, "the unfinished snapshot was not redone"
    assert redone[-1].snapshot == "last"
