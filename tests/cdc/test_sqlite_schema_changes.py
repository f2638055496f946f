"""SQLite → SQLite schema changes while capture runs: ADD COLUMN with a default and RENAME
COLUMN are carried to a SQLite target; DROP COLUMN of a captured column is refused by SQLite
itself (the capture triggers name it), so it never half-happens."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kayak.cdc.change import Change, Op
from kayak.cdc.sqlite import SqliteSource, enable, install_triggers
from kayak.pipeline.targets import AppliedChange
from kayak.pipeline.targets.sqlite import SqliteTarget


def apply(target: SqliteTarget, changes: list[Change]) -> None:
    """One change per key, in order, each with the schema it was captured with."""
    for change in changes:
        target.ensure_table(change.table, "sqlite", change.position)
        after = None if change.op is Op.DELETE else change.after
        target.apply(change.table, [AppliedChange(change.op.value, change.key, after,
                                                  change.position, change.ts_ms)])


def test_add_column_with_default_and_rename(tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    source = sqlite3.connect(path, isolation_level=None)
    source.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, c INTEGER NOT NULL)")
    source.execute("INSERT INTO t VALUES (1, 'one', 10), (2, 'two', 20)")
    enable(path, "t")
    capture = SqliteSource(path, ["t"])
    target = SqliteTarget(str(tmp_path / "target.db"))
    apply(target, capture.read(100, 0.1))

    source.execute("ALTER TABLE t ADD COLUMN e TEXT NOT NULL DEFAULT 'dflt'")
    source.execute("INSERT INTO t (id, a, c, e) VALUES (3, 'three', 30, 'mine')")
    source.execute("ALTER TABLE t RENAME COLUMN a TO a2")
    source.execute("UPDATE t SET a2 = 'deux' WHERE id = 2")  # logged by the old triggers
    changes = capture.read(100, 0.1)
    assert changes[-1].table.column("a2").renamed_from == ("a",)
    assert changes[-1].table.column("e").default == "dflt"
    assert [c.after for c in changes] == [
        {"id": 3, "a2": "three", "c": 30, "e": "mine"},
        {"id": 2, "a2": "deux", "c": 20, "e": "dflt"}]
    source.execute("INSERT INTO t (id, a2, c) VALUES (4, 'four', 40)")  # new triggers
    changes += capture.read(100, 0.1)
    apply(target, changes)
    rows = sqlite3.connect(tmp_path / "target.db").execute(
        "SELECT id, a2, c, e FROM t ORDER BY id").fetchall()
    assert rows == [(1, "one", 10, "dflt"), (2, "deux", 20, "dflt"), (3, "three", 30, "mine"),
                    (4, "four", 40, "dflt")]
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        source.execute("ALTER TABLE t DROP COLUMN c")
    capture.close()
    target.close()


def test_a_column_added_while_capture_reads_the_log_is_not_left_out(tmp_path: Path) -> None:
    """The ALTER and an UPDATE of its new column commit after capture read the schemas but
    before it reads the log (a race seen once in CI: the update went out without the column,
    and the target never got it). Capture reads such rows again, in the new shape."""
    path = str(tmp_path / "source.db")
    source = sqlite3.connect(path, isolation_level=None)
    source.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT)")
    source.execute("INSERT INTO t VALUES (1, 'one')")
    enable(path, "t")
    capture = SqliteSource(path, ["t"])
    assert len(capture.read(100, 0.1)) == 1  # the snapshot
    read_table = capture._read_table
    committed = []

    def alter_first(table: str, limit: int) -> list[Change]:
        if not committed:  # exactly between the schema check and the log read
            source.execute("BEGIN")
            source.execute("ALTER TABLE t ADD COLUMN rating INTEGER")
            install_triggers(source, "t")
            source.execute("UPDATE t SET rating = 5 WHERE id = 1")
            source.execute("COMMIT")
            committed.append(True)
        return read_table(table, limit)

    capture._read_table = alter_first  # type: ignore[method-assign]
    changes = capture.read(100, 0.1)
    assert committed
    assert [c.after for c in changes] == [{"id": 1, "a": "one", "rating": 5}]
    assert changes[0].table.column("rating") is not None
    capture.close()
