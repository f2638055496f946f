"""bench/transactions.py in its smallest mode: plain and transactional produce on kayak's broker
and Apache Kafka in one run, with the ratio columns, the plot, and the read_committed check
that fails the bench when a reader sees other than exactly the committed records."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import confluent_kafka
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
KAFKA = "Apache Kafka"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """bench/transactions.py, imported the way the bench scripts import each other."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module("transactions")


def _markdown_rows(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    """The result table's rows by (produce, broker)."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    names = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [
        dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]
    return {(row["produce"], row["broker"]): row for row in rows}


def _number(cell: str) -> float:
    return float(cell.removesuffix("x").replace(",", ""))


def test_plain_and_transactional_produce_on_kayak_and_apache_kafka(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "transactions.py"), "--brokers", "kayak,kafka",
         "--kayak-flush", "group", "--records", "200", "--partitions", "2",
         "--commit-every", "100", "--runs", "1", "--warm-up", "0",
         "--data-root", str(tmp_path / "data"), "--markdown",
         "--plot", str(tmp_path / "transactions.svg")],
        capture_output=True, text=True, timeout=170, check=False, cwd=REPO,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = _markdown_rows(done.stdout)
    plain, every_100 = "plain (idempotent)", "commit every 100 records"
    assert set(rows) == {(p, b) for p in (plain, every_100) for b in ("kayak (group)", KAFKA)}
    for row in rows.values():
        assert _number(row["records/s"]) > 0
        assert _number(row["broker CPU µs/record"]) >= 0
    for broker in ("kayak (group)", KAFKA):
        transactional = rows[(every_100, broker)]
        assert _number(transactional["transactions/s"]) == pytest.approx(
            _number(transactional["records/s"]) / 100, rel=0.01
        )
        assert _number(transactional["transactional / plain"]) > 0
        assert rows[(plain, broker)]["transactions/s"] == "-"
    assert _number(rows[(every_100, "kayak (group)")]["kayak / Kafka"]) > 0
    assert rows[(every_100, KAFKA)]["kayak / Kafka"] == "-"
    # Every point passed the read_committed check (the 2 x 10 aborted records not read).
    assert done.stdout.count("read_committed read 202 (not the 20 aborted)") == 2
    svg = (tmp_path / "transactions.svg").read_text()
    assert "Apache Kafka" in svg and "commit every 100 records" in svg


def test_the_check_fails_when_a_reader_sees_more_or_fewer_or_aborted_records(
    transactions: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = importlib.import_module("peers")
    protocol_clients = importlib.import_module("protocol_clients")
    with peers.start_kayak(tmp_path, "never") as broker:
        protocol_clients.create_topic(broker.bootstrap, "checked", 2)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for partition in (0, 1):
            producer.produce("checked", b"committed", partition=partition)
        # Outside any transaction, so visible: what an aborted record leaking would look like.
        producer.produce("checked", transactions.ABORTED_VALUE, partition=1)
        assert producer.flush(30) == 0

        def check(committed: int) -> None:
            measured = transactions.Measured(1.0, 0.0, committed, aborted=1)
            transactions.check_committed(broker, "checked", 2, measured)

        with pytest.raises(RuntimeError, match=r"read 3 records \(1 of them aborted\), 3 were"):
            check(3)
        with pytest.raises(RuntimeError, match=r"read 3 records .*, 2 were committed"):
            check(2)
        monkeypatch.setattr(transactions, "TIMEOUT", 3.0)  # a 4th record never comes
        with pytest.raises(RuntimeError, match=r"read 3 records .*, 4 were committed"):
            check(4)
