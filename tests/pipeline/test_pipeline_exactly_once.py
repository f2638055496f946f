"""Exactly once, end to end: a bank's transfers are never seen half applied in the target.

PostgreSQL → ``kayak cdc run`` (a process of its own, publishing each batch of whole source
transactions in one Kafka transaction) → kayak's broker → Spark (read_committed, one database
transaction per task) → PostgreSQL. Each source transaction moves money between two accounts
and books its fee in a second table, so ``SUM(accounts.balance) + SUM(transfers.fee)`` is the
same after every source transaction. A checker reads that sum in the target as often as it can
while the pipeline replicates, and every observation must equal the total: half a transfer
(one account updated, not the other; the fee booked, the money not moved) would show. The
capture is killed with SIGKILL mid-stream, twice (its open Kafka transaction is aborted by the
restarted capture, which reads the batch again from its slot). At the end source == target.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from kayak.pipeline.from_topics import TopicsPipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from tests.pipeline.conftest import CdcBroker
from tests.pipeline.test_pipeline_postgres import target_dsn

ACCOUNTS = 200
TOTAL = ACCOUNTS * 1_000
SNAPSHOT_SUM = "SELECT (SELECT sum(balance) FROM accounts) + (SELECT COALESCE(sum(fee), 0) FROM transfers), (SELECT count(*) FROM accounts)"  # noqa: E501


class Transfers(threading.Thread):
    """Source transactions: debit one account (amount + fee), credit another, book the fee."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="transfers")
        self.dsn = dsn
        self.stop = threading.Event()
        self.committed = 0

    def run(self) -> None:
        rng = random.Random(7)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
                amount, fee = rng.randint(1, 50), rng.randint(1, 3)
                with conn.transaction():
                    conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s",
                                 (amount + fee, a))  # fmt: skip
                    conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                                 (amount, b))  # fmt: skip
                    conn.execute("INSERT INTO transfers (fee) VALUES (%s)", (fee,))
                self.committed += 1
                time.sleep(0.002)


class Checker(threading.Thread):
    """Reads the target's total as often as it can: every observation is kept."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="checker")
        self.dsn = dsn
        self.stop = threading.Event()
        self.observations: list[tuple[int, int]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                try:
                    row = conn.execute(SNAPSHOT_SUM).fetchone()
                except psycopg.errors.UndefinedTable:
                    time.sleep(0.05)
                    continue
                except psycopg.Error as e:
                    self.errors.append(str(e))
                    time.sleep(0.05)
                    continue
                assert row is not None
                self.observations.append((int(row[0] or 0), int(row[1])))
                time.sleep(0.005)


def start_capture(source: str, broker: CdcBroker, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "kayak", "-v", "cdc", "run", source, "public.accounts",
             "public.transfers", "-b", broker.bootstrap_servers, "--registry-url",
             broker.registry_url, "--slot", "bank", "--status-interval", "0.5"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def wait_for(condition: Any, what: Any, timeout_s: float = 60.0) -> None:
    """Until ``condition()``; ``what`` (text, or a function making it) says what did not come."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)


def test_transfers_are_never_half_applied_through_capture_kills(
    spark: object, postgres_dsn: str, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)")
        conn.execute("CREATE TABLE transfers (id bigserial PRIMARY KEY, fee int NOT NULL)")
        # a row in each table's snapshot, so that both exist in the target from the start
        conn.execute("INSERT INTO transfers (fee) VALUES (0)")
        conn.execute("INSERT INTO accounts SELECT g, 1000 FROM generate_series(1, %s) g",
                     (ACCOUNTS,))  # fmt: skip
    target = target_dsn(postgres_dsn)
    spec = PipelineSpec(
        source=postgres_dsn, tables=["public.accounts", "public.transfers"], target=target,
        work_dir=tmp_path / "work", bootstrap_servers=cdc_broker.bootstrap_servers,
        registry_url=cdc_broker.registry_url, slot_name="bank",
        from_topics=r"kayak\.public\.(accounts|transfers)", input_format="kayak",
    )  # fmt: skip
    prepare_source(spec)
    capture_log = tmp_path / "capture.log"
    capture = start_capture(postgres_dsn, cdc_broker, capture_log)
    transfers, checker = Transfers(postgres_dsn), Checker(target)
    killed: list[tuple[int, int]] = []
    try:
        with TopicsPipeline(spec, spark) as pipeline:
            checker.start()
            # The snapshot (not one source transaction: rows come in any number of batches)
            # first; from then on every observation must hold the total.
            wait_for(
                lambda: pipeline.check() or (TOTAL, ACCOUNTS) in checker.observations,
                lambda: (
                    f"no snapshot: {checker.observations[-3:]} {checker.errors[-3:]} "
                    f"{capture_log.read_text()[-3000:]}"
                ),
                120,
            )
            watched_from = checker.observations.index((TOTAL, ACCOUNTS))
            transfers.start()
            started = 1
            for _ in range(2):
                goal = transfers.committed + 300
                wait_for(lambda g=goal: transfers.committed >= g, "transfers stuck")  # type: ignore[misc]
                os.kill(capture.pid, signal.SIGKILL)  # mid-stream: batches are in flight
                killed.append((capture.pid, capture.wait(10)))
                goal = transfers.committed + 100
                wait_for(lambda g=goal: transfers.committed >= g, "transfers stuck")  # type: ignore[misc]
                capture = start_capture(postgres_dsn, cdc_broker, capture_log)
                # running (and streaming) before the next kill, not still starting
                wait_for(lambda n=started + 1: _starts(capture_log) >= n, "no restart")  # type: ignore[misc]
                started += 1
            goal = transfers.committed + 300
            wait_for(lambda g=goal: transfers.committed >= g, "transfers stuck")  # type: ignore[misc]
            transfers.stop.set()
            transfers.join(10)
            with psycopg.connect(postgres_dsn) as conn:
                (booked,) = conn.execute("SELECT count(*) FROM transfers").fetchone() or (0,)
            wait_for(lambda: _count(target, "transfers") == booked, "not caught up", 120)
            pipeline.catch_up()
            results = pipeline.verify()
    finally:
        transfers.stop.set()
        checker.stop.set()
        checker.join(10)
        if capture.poll() is None:
            capture.send_signal(signal.SIGTERM)
            try:
                capture.wait(20)
            except subprocess.TimeoutExpired:
                capture.kill()
    for result in results:
        assert result.equal, (result.table_schema.name, result.differences)
    watched = checker.observations[watched_from:]
    broken = [o for o in watched if o != (TOTAL, ACCOUNTS)]
    assert not broken, f"{len(broken)} of {len(watched)} observations off the total: {broken[:5]}"
    # the checker kept watching while the target moved: many observations, many states
    assert len(watched) > 200, len(watched)
    assert booked >= 700
    text = capture_log.read_text()
    # two captures died by SIGKILL; each start fenced the last (a new epoch of one id)
    assert [code for _, code in killed] == [-signal.SIGKILL] * 2, killed
    assert len({pid for pid, _ in killed}) == 2, killed
    assert _starts(capture_log) == 3, text[-3000:]


def _count(dsn: str, table: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    except psycopg.errors.UndefinedTable:
        return -1
    return int(row[0]) if row else -1


def _starts(log: Path) -> int:
    """Captures that started publishing (each announces its transactional id)."""
    return log.read_text().count("publishing in Kafka transactions")
