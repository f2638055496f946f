"""SQLite capture: triggers, the log table and the source's read/acknowledge cycle."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kayak.cdc import ColumnType, Op
from kayak.cdc.errors import CaptureError
from kayak.cdc.sqlite import SqliteSource, disable, enable, install_triggers, log_table_name


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "source.db")
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE items (region TEXT, id INTEGER, name TEXT NOT NULL, price NUMERIC, "
        "weight REAL, photo BLOB, flag BOOLEAN, PRIMARY KEY (region, id))"
    )
    conn.execute("INSERT INTO items VALUES ('eu', 1, 'Zoë ⚓', '12.50', 0.1, x'00ff', 1)")
    conn.commit()
    conn.close()
    return path


def changes_of(source: SqliteSource, n: int = 10_000) -> list:
    return source.read(n, 0.5)


def test_snapshot_then_changes_in_order_with_exact_values(db: str) -> None:
    assert enable(db, "items") == 1
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE items SET weight = 0.30000000000000004, name = ? WHERE id = 1",
                     ("x" * 100_000,))  # fmt: skip
        conn.execute("INSERT INTO items VALUES ('us', 2, '李雷', NULL, NULL, NULL, 0)")
        conn.execute("DELETE FROM items WHERE id = 2")
    source = SqliteSource(db, ["items"])
    got = changes_of(source)
    assert [c.op for c in got] == [Op.READ, Op.UPDATE, Op.CREATE, Op.DELETE]
    assert got[0].after == {"region": "eu", "id": 1, "name": "Zoë ⚓", "price": "12.5",
                            "weight": 0.1, "photo": b"\x00\xff", "flag": True}  # fmt: skip
    assert got[0].snapshot == "true" and got[1].snapshot == "false"
    assert got[1].before is not None and got[1].before["weight"] == 0.1
    assert got[1].after is not None and got[1].after["weight"] == 0.30000000000000004
    assert got[1].after["name"] == "x" * 100_000
    assert got[2].after == {"region": "us", "id": 2, "name": "李雷", "price": None,
                            "weight": None, "photo": None, "flag": False}  # fmt: skip
    assert got[3].before == got[2].after and got[3].after is None
    assert [c.position for c in got] == sorted(c.position for c in got)
    assert got[3].key == {"region": "us", "id": 2}
    table = got[0].table
    assert table.key == ("region", "id")
    assert [c.type for c in table.columns] == [
        ColumnType.STRING, ColumnType.LONG, ColumnType.STRING, ColumnType.DECIMAL,
        ColumnType.DOUBLE, ColumnType.BYTES, ColumnType.BOOLEAN,
    ]  # fmt: skip
    source.close()


def test_unacknowledged_changes_are_read_again_and_acknowledged_ones_trimmed(db: str) -> None:
    enable(db, "items")
    conn = sqlite3.connect(db)
    with conn:
        for i in range(10, 20):
            conn.execute("INSERT INTO items VALUES ('eu', ?, 'n', 1, 1.5, NULL, 0)", (i,))
    source = SqliteSource(db, ["items"])
    first = changes_of(source)
    assert len(first) == 11
    source.acknowledge(first[4])
    source.close()  # a crash: the rest was never acknowledged
    assert conn.execute(f"SELECT count(*) FROM {log_table_name('items')}").fetchone() == (6,)
    again = SqliteSource(db, ["items"])
    redelivered = changes_of(again)
    assert [c.position for c in redelivered] == [c.position for c in first[5:]]
    again.acknowledge(redelivered[-1])
    assert conn.execute(f"SELECT count(*) FROM {log_table_name('items')}").fetchone() == (0,)
    with conn:  # ids keep growing after the log was emptied: positions never go back
        conn.execute("INSERT INTO items VALUES ('eu', 99, 'n', 1, 1.5, NULL, 0)")
    later = changes_of(again)
    assert later[0].position > first[-1].position
    with pytest.raises(ValueError, match="not read"):
        again.acknowledge(first[0])


def test_added_column_flows_through(db: str) -> None:
    enable(db, "items")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("ALTER TABLE items ADD COLUMN note TEXT")
    install_triggers(conn, "items")  # same transaction: no change misses the column
    conn.execute("INSERT INTO items VALUES ('eu', 3, 'n', 1, 1.0, NULL, 0, 'hello')")
    conn.execute("COMMIT")
    source = SqliteSource(db, ["items"])
    got = changes_of(source)
    assert got[0].after is not None and got[0].after["note"] is None  # logged before: default
    assert got[-1].after is not None and got[-1].after["note"] == "hello"
    assert got[-1].table.column("note").nullable


def test_capture_reinstalls_triggers_when_columns_change(db: str) -> None:
    enable(db, "items")
    source = SqliteSource(db, ["items"])
    changes_of(source)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("ALTER TABLE items ADD COLUMN note TEXT")
    assert changes_of(source) == []  # noticing the new schema reinstalls the triggers
    with conn:
        conn.execute("INSERT INTO items VALUES ('eu', 4, 'n', 1, 1.0, NULL, 0, 'kept')")
    (change,) = changes_of(source)
    assert change.after is not None and change.after["note"] == "kept"


def test_clear_errors(tmp_path: Path, db: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE nokey (a TEXT)")
    conn.execute("CREATE TABLE typed (id INTEGER PRIMARY KEY, n INTEGER)")
    conn.commit()
    with pytest.raises(CaptureError, match="no primary key"):
        enable(db, "nokey")
    with pytest.raises(CaptureError, match="does not exist"):
        enable(db, "missing")
    with pytest.raises(CaptureError, match="kayak cdc enable"):
        SqliteSource(db, ["items"])
    conn.execute('CREATE TABLE dotted (id INTEGER PRIMARY KEY, "x.y" TEXT, x_y TEXT)')
    conn.commit()
    with pytest.raises(CaptureError, match=r"column 'x\.y' of main\.dotted is not a valid"):
        enable(db, "dotted")  # refused before anything is installed
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE '%kayak%'"
                        ).fetchone() == (0,)  # fmt: skip
    enable(db, "typed")
    with conn:
        conn.execute("INSERT INTO typed VALUES (1, 'not a number')")
    with pytest.raises(CaptureError, match="column 'n'"):
        changes_of(SqliteSource(db, ["typed"]))


def test_disable_stops_capture(db: str) -> None:
    enable(db, "items")
    disable(db, "items")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO items VALUES ('eu', 5, 'n', 1, 1.0, NULL, 0)")
    source = SqliteSource(db, ["items"])
    assert [c.op for c in changes_of(source)] == [Op.READ]
    disable(db, "items", drop_log=True)
    assert conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE name = ?", (log_table_name("items"),)
    ).fetchone() == (0,)
