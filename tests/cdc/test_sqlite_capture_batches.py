"""The SQLite capture's batches: reading overlaps the broker's acknowledgement of the batch
before, and the fast paths (image decoding, Avro writing) give exactly what the plain ones do."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from kayak.cdc.capture import CaptureLoop
from kayak.cdc.change import Change
from kayak.cdc.errors import CaptureError
from kayak.cdc.publisher import ChangePublisher, EventEncoder
from kayak.cdc.sqlite import SqliteSource, enable, log_table_name
from kayak.errors import KafkaTimeoutError

# -- a producer whose acknowledgements the test hands out ---------------------------------------


class HeldProducer:
    """The blocking producer's shape (``send_batch`` futures, transactions), recording every
    call; the futures resolve only when the test says."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.futures: list[Future[None]] = []
        self.values: list[bytes | None] = []

    def send_batch(
        self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None]
    ) -> Future[None]:
        self.calls.append(f"send {len(values)}")
        self.values += values
        future: Future[None] = Future()
        self.futures.append(future)
        return future

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self) -> None:
        self.calls.append("commit")

    def abort_transaction(self) -> None:
        self.calls.append("abort")

    def ack(self, error: BaseException | None = None) -> None:
        """Resolve every future not resolved yet (with ``error``, a failed delivery)."""
        for future in self.futures:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)


@pytest.fixture
def orders(tmp_path: Path) -> str:
    path = str(tmp_path / "source.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
    conn.commit()
    conn.close()
    enable(path, "orders")
    return path


def insert(path: str, ids: range) -> None:
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, f"n{i}") for i in ids])


def logged_ids(path: str) -> list[int]:
    """The ids of the rows whose changes the log still holds (not acknowledged yet)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT after FROM {log_table_name('orders')} ORDER BY change_id")
        return [json.loads(text)["id"] for (text,) in rows]


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.fixture
def capture(orders: str) -> Iterator[tuple[CaptureLoop, HeldProducer, list[list[int]]]]:
    """A transactional capture of ``orders`` in batches of 3, its producer, and the ids of
    each read as the source handed them out."""
    producer = HeldProducer()
    source = SqliteSource(orders, ["orders"], poll_interval_s=0.01)
    reads: list[list[int]] = []
    read = source.read

    def recording_read(max_changes: int, timeout_s: float) -> list[Change]:
        changes = read(max_changes, timeout_s)
        reads.append([c.key["id"] for c in changes])
        return changes

    source.read = recording_read  # type: ignore[method-assign]
    encoder = EventEncoder(prefix="t", connector="sqlite", value_format="json")
    publisher = ChangePublisher(producer, encoder, db="db", transactional=True)
    loop = CaptureLoop(source, publisher, max_batch=3, poll_timeout_s=0.05)
    yield loop, producer, reads
    producer.ack()
    source.close()


def test_the_next_batch_is_read_while_the_broker_acknowledges_the_last(
    orders: str, capture: tuple[CaptureLoop, HeldProducer, list[list[int]]]
) -> None:
    loop, producer, reads = capture
    insert(orders, range(1, 7))

    # The first batch is published, and the loop returns without waiting for the broker.
    thread, outcome = in_thread(loop.run_once)
    thread.join(5)
    assert not thread.is_alive(), "run_once waited for the broker before reading on"
    assert outcome == [3] and reads == [[1, 2, 3]]
    assert producer.calls == ["begin", "send 3"]
    assert logged_ids(orders) == [1, 2, 3, 4, 5, 6]  # nothing acknowledged to the source

    # The second batch is read while the first is unacknowledged; the loop then waits.
    thread, outcome = in_thread(loop.run_once)
    thread.join(0.5)
    assert thread.is_alive() and reads == [[1, 2, 3], [4, 5, 6]]
    assert producer.calls == ["begin", "send 3"]  # nothing of the second batch sent yet
    assert logged_ids(orders) == [1, 2, 3, 4, 5, 6]

    producer.ack()
    thread.join(5)
    assert outcome == [3]
    # One transaction per batch, the first committed before the second begins; the source
    # forgets the first batch only, not what was read while it was in flight.
    assert producer.calls == ["begin", "send 3", "commit", "begin", "send 3"]
    assert logged_ids(orders) == [4, 5, 6]
    assert loop.stats.changes == 3 and loop.stats.batches == 1

    producer.ack()
    assert loop.run_once() == 3  # nothing more to read: the batch in flight is finished
    assert producer.calls[-1] == "commit" and logged_ids(orders) == []
    assert loop.run_once() == 0 and loop.stats.changes == 6


def test_a_batch_whose_acknowledgement_fails_is_read_again_with_what_followed_it(
    orders: str, capture: tuple[CaptureLoop, HeldProducer, list[list[int]]]
) -> None:
    loop, producer, _reads = capture
    insert(orders, range(1, 7))
    assert loop.run_once() == 3
    thread, outcome = in_thread(loop.run_once)  # reads 4-6, waits for 1-3
    thread.join(0.5)
    producer.ack(KafkaTimeoutError("delivery timed out"))
    thread.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], KafkaTimeoutError)
    assert producer.calls == ["begin", "send 3", "abort"]  # 4-6 never sent
    assert logged_ids(orders) == [1, 2, 3, 4, 5, 6]

    # A restarted capture hands everything out again, from the failed batch on.
    again = SqliteSource(orders, ["orders"])
    assert [c.key["id"] for c in again.read(100, 0.1)] == [1, 2, 3, 4, 5, 6]
    again.close()


def test_a_read_that_fails_first_finishes_the_batch_in_flight(
    orders: str, capture: tuple[CaptureLoop, HeldProducer, list[list[int]]]
) -> None:
    """A source that refuses what follows a batch (a schema change it cannot carry) stops
    the capture with that batch published and acknowledged, as before reading overlapped."""
    loop, producer, _reads = capture
    insert(orders, range(1, 4))
    assert loop.run_once() == 3
    producer.ack()

    def refuse(max_changes: int, timeout_s: float) -> list[Change]:
        raise CaptureError("a change this source cannot carry")

    loop.source.read = refuse  # type: ignore[method-assign]
    with pytest.raises(CaptureError, match="cannot carry"):
        loop.run_once()
    assert producer.calls == ["begin", "send 3", "commit"]
    assert logged_ids(orders) == [] and loop.stats.changes == 3


def test_drain_finishes_the_batch_in_flight_and_counts_each_change_once(
    orders: str, capture: tuple[CaptureLoop, HeldProducer, list[list[int]]]
) -> None:
    loop, producer, _reads = capture
    insert(orders, range(1, 8))
    acking = threading.Event()

    def ack_continually() -> None:
        while not acking.wait(0.005):
            producer.ack()

    acker = threading.Thread(target=ack_continually, daemon=True)
    acker.start()
    try:
        assert loop.drain() == 7
    finally:
        acking.set()
        acker.join()
    assert logged_ids(orders) == []
    assert producer.calls.count("commit") == loop.stats.batches == 3
    assert len(producer.values) == 7


def test_run_finishes_the_batch_in_flight_when_stopped(
    orders: str, capture: tuple[CaptureLoop, HeldProducer, list[list[int]]]
) -> None:
    loop, producer, _reads = capture
    insert(orders, range(1, 3))
    stop = threading.Event()
    original = loop.run_once

    def once_then_stop() -> int:
        n = original()
        stop.set()
        producer.ack()
        return n

    loop.run_once = once_then_stop  # type: ignore[method-assign]
    loop.run(stop)
    assert logged_ids(orders) == [] and loop.stats.changes == 2


# -- acknowledgements across tables -----------------------------------------------------------


def test_an_acknowledgement_trims_each_table_up_to_what_was_handed_out_before_it(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "two.db")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE a (id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE b (id INTEGER PRIMARY KEY)")
    enable(path, "a")
    enable(path, "b")
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO a VALUES (?)", [(i,) for i in range(1, 5)])
        conn.executemany("INSERT INTO b VALUES (?)", [(i,) for i in range(1, 5)])
    source = SqliteSource(path, ["a", "b"])
    first = source.read(4, 0.1)  # two of each table, a's first
    second = source.read(4, 0.1)
    assert [(c.table.name, c.key["id"]) for c in first + second] == [
        ("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 3), ("b", 4),
    ]  # fmt: skip

    def left(table: str) -> list[int]:
        with sqlite3.connect(path) as conn:
            query = f"SELECT json_extract(after, '$.id') FROM {log_table_name(table)}"
            return [i for (i,) in conn.execute(query)]

    source.acknowledge(first[0])  # a's first change only
    assert (left("a"), left("b")) == ([2, 3, 4], [1, 2, 3, 4])
    source.acknowledge(first[-1])
    assert (left("a"), left("b")) == ([3, 4], [3, 4])
    with pytest.raises(ValueError, match="not read"):
        source.acknowledge(first[1])  # already acknowledged
    source.acknowledge(second[-1])
    assert (left("a"), left("b")) == ([], [])
    source.close()


# -- the fast image decoding gives what the plain one does ------------------------------------

SQLITE_TYPES = ["INTEGER", "TEXT", "REAL", "BLOB", "NUMERIC", "BOOLEAN", "DECIMAL(10,2)",
                "DATETIME", ""]  # fmt: skip
STORED: list[Any] = [None, 0, 1, -7, 2**62, 1.5, 2.0, -0.0, 1e300, "", "text", "12.50", "1e3",
                     "Zoë ⚓", "x" * 300, b"", b"\x00\xff", True]  # fmt: skip


def test_every_stored_value_in_every_column_type_decodes_as_the_plain_path_does(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "all.db")
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(SQLITE_TYPES))
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, {columns})")
    enable(path, "t")
    rng = random.Random(5)
    placeholders = ", ".join("?" * (len(SQLITE_TYPES) + 1))
    with sqlite3.connect(path) as conn:
        for row_id in range(1, 301):
            conn.execute(f"INSERT INTO t VALUES ({placeholders})",
                         [row_id, *(rng.choice(STORED) for _ in SQLITE_TYPES)])  # fmt: skip
        # Each stored value alone in each column (other columns NULL), and all at once.
        alone = [[None] * len(SQLITE_TYPES) for _ in range(len(SQLITE_TYPES) * len(STORED))]
        for n, row in enumerate(alone):
            row[n % len(SQLITE_TYPES)] = STORED[n // len(SQLITE_TYPES)]
        rows = [*alone, *([value] * len(SQLITE_TYPES) for value in STORED)]
        numbered = [[row_id, *row] for row_id, row in enumerate(rows, start=1000)]
        conn.executemany(f"INSERT INTO t VALUES ({placeholders})", numbered)
        logged = conn.execute(f"SELECT change_id, after FROM {log_table_name('t')}").fetchall()
    source = SqliteSource(path, ["t"])
    schema = source.tables()[0]

    def plain(text: str) -> Any:
        try:
            return typed(source._image(schema, json.loads(text), True))
        except CaptureError:
            return CaptureError

    def fast(change_id: int, text: str) -> Any:
        try:
            return typed(source._decoders["t"].row(text, change_id, True))
        except CaptureError:
            return CaptureError

    expected = [plain(text) for _, text in logged]
    assert [fast(change_id, text) for change_id, text in logged] == expected
    assert expected.count(CaptureError) > 10  # values their column cannot carry
    assert len([e for e in expected if e is not CaptureError]) > 100
    source.close()


def typed(row: dict[str, Any]) -> list[tuple[str, type, Any]]:
    """A row compared with its values' types (``1 == 1.0 == True`` otherwise), NaN as text."""
    return [(k, type(v), repr(v) if isinstance(v, float) and math.isnan(v) else v)
            for k, v in row.items()]  # fmt: skip
