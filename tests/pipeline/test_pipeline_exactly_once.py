"""Exactly once, end to end: a bank's transfers are never seen half applied in the target,
whichever pipeline process is killed with SIGKILL (issue 26).

PostgreSQL → ``kayak cdc run`` (a process of its own, publishing each batch of whole source
transactions in one Kafka transaction) → kayak's broker (a process of its own) → Spark (a
process of its own, ``tests/pipeline/bank_spark_job.py``: read_committed, one database
transaction per task) → PostgreSQL. Each source transaction moves money between two accounts
and books its fee in a second table, so ``SUM(accounts.balance) + SUM(transfers.fee)`` is the
same after every source transaction. A checker reads that sum in the target as often as it can
while the pipeline replicates, and every observation must equal the total: half a transfer
(one account updated, not the other; the fee booked, the money not moved) would show.

While transfers flow, each process is killed with SIGKILL and started again on its own state:

- the capture, twice: the restarted capture aborts the dead one's open Kafka transaction
  (same transactional id, new epoch) and reads the batch again from its slot;
- the broker, once: it restarts on the same data directory and ports (the schema registry's
  too), and the running capture and Spark job ride through it, retrying;
- the Spark job, once, while an apply's transaction is open (written to) in the target: its
  driver dies, and with it its JVM and Python workers; the restarted job resumes from
  Spark's checkpoint.

At the end source == target, as the Spark job's verification says.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from kayak.pipeline.session import is_alive, process_tree
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from tests.broker.conftest import BrokerProcess
from tests.fixtures.postgres import free_port
from tests.pipeline import bank_spark_job
from tests.pipeline.test_pipeline_postgres import target_dsn

ACCOUNTS = 200
TOTAL = ACCOUNTS * 1_000
SNAPSHOT_SUM = "SELECT (SELECT sum(balance) FROM accounts) + (SELECT COALESCE(sum(fee), 0) FROM transfers), (SELECT count(*) FROM accounts)"  # noqa: E501
REPO = Path(__file__).resolve().parents[2]


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
                # ~50 a second: the pipeline keeps up on a busy 2-core machine, and applies
                # the backlog of a restarted Spark job (its JVM's start) in seconds
                time.sleep(0.015)

    def wait_more(self, n: int) -> None:
        """Until ``n`` more transfers are committed in the source."""
        goal = self.committed + n
        wait_for(lambda: self.committed >= goal, "transfers stuck")


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


@dataclass
class Child:
    """A pipeline process started (and restarted) with the same command; its output is
    appended to ``log``, each start announces itself there with ``started``."""

    name: str
    command: list[str]
    log: Path
    started: str
    env: dict[str, str] = field(default_factory=dict)  # added to the environment
    process: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)  # exit codes of the processes ended

    def start(self, timeout_s: float = 60.0) -> None:
        """Start, and wait for the start's announcement (it is running, not still starting)."""
        starts = self.starts()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO,
                env={**os.environ, **self.env},
            )  # fmt: skip
        wait_for(
            lambda: self.starts() > starts or self.exited(),
            lambda: f"{self.name} did not start: {self.tail()}", timeout_s,
        )  # fmt: skip
        assert not self.exited(), f"{self.name} exited: {self.tail()}"

    def kill(self) -> None:
        """SIGKILL the process (not its children)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.exits.append(self.process.wait(10))

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM and the exit code (the process finishes what SIGTERM asks of it)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        self.exits.append(self.process.wait(timeout_s))
        return self.exits[-1]

    def end(self) -> None:
        """Whatever the test's outcome: nothing of this child (and its children) outlives it
        (a test that failed has nothing more to wait for: SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        tree = process_tree(self.process.pid) | set(self.descendants() if self.env else ())
        self.process.kill()
        self.process.wait()
        for pid in tree - {self.process.pid}:
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)

    def descendants(self) -> list[int]:
        """Living processes started from this child, its own included, found by the marker
        in their environment (``env``) even once an exit made them orphans."""
        assert self.env, "an env marker is needed to find the descendants"
        # whole entries: NUL ends each
        marker = b"".join(f"{k}={v}\0".encode() for k, v in self.env.items())
        found = []
        for entry in os.listdir("/proc"):
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes() if entry.isdigit() else b""
            except OSError:
                continue
            if marker in environ and is_alive(int(entry)):
                found.append(int(entry))
        return found

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def starts(self) -> int:
        return self.log.read_text(errors="replace").count(self.started) if self.log.exists() else 0

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


class Timeline:
    """What happened when (seconds since the test's start): printed as it goes (pytest shows
    it with a failure) and kept in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = time.monotonic()

    def mark(self, what: str) -> None:
        line = f"{time.monotonic() - self.start:6.1f}s {what}"
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


def wait_for(condition: Any, what: Any, timeout_s: float = 60.0) -> None:
    """Until ``condition()``; ``what`` (text, or a function making it) says what did not come."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)


def test_transfers_are_never_half_applied_through_kills_of_each_process(
    postgres_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)")
        conn.execute("CREATE TABLE transfers (id bigserial PRIMARY KEY, fee int NOT NULL)")
        # a row in each table's snapshot, so that both exist in the target from the start
        conn.execute("INSERT INTO transfers (fee) VALUES (0)")
        conn.execute("INSERT INTO accounts SELECT g, 1000 FROM generate_series(1, %s) g",
                     (ACCOUNTS,))  # fmt: skip
    target = target_dsn(postgres_dsn)
    # The registry's port is fixed (a later --schema-registry-port wins over the fixture's
    # 0), so that the broker restarted after its kill serves it where the clients look.
    registry_port = free_port()
    broker = BrokerProcess(
        tmp_path / "broker", extra_args=["--schema-registry-port", str(registry_port)]
    ).start()
    registry = f"http://127.0.0.1:{registry_port}"
    spec = PipelineSpec(
        source=postgres_dsn, tables=["public.accounts", "public.transfers"], target=target,
        work_dir=tmp_path / "work", bootstrap_servers=broker.bootstrap_servers,
        registry_url=registry, slot_name="bank",
        from_topics=r"kayak\.public\.(accounts|transfers)", input_format="kayak",
    )  # fmt: skip
    prepare_source(spec)
    (tmp_path / "spec.json").write_text(json.dumps(asdict(spec), default=str))
    result_path = tmp_path / "verified.json"
    capture = Child(
        "capture",
        [sys.executable, "-m", "kayak", "-v", "cdc", "run", postgres_dsn, "public.accounts",
         "public.transfers", "-b", broker.bootstrap_servers, "--registry-url", registry,
         "--slot", "bank", "--status-interval", "0.5"],
        tmp_path / "capture.log", started="publishing in Kafka transactions",
    )  # fmt: skip
    spark_job = Child(
        "Spark job",
        [sys.executable, "-m", "tests.pipeline.bank_spark_job", str(tmp_path / "spec.json"),
         str(result_path)],
        tmp_path / "spark-job.log", started=bank_spark_job.STARTED,
        env={"KAYAK_BANK_SPARK_JOB": str(tmp_path)},  # marks its JVM and Python workers
    )  # fmt: skip
    transfers, checker = Transfers(postgres_dsn), Checker(target)
    timeline = Timeline(tmp_path / "timeline.txt")
    try:
        capture.start()
        timeline.mark("capture started")
        spark_job.start(120)
        timeline.mark("Spark job started")
        checker.start()
        # The snapshot (not one source transaction: rows come in any number of batches)
        # first; from then on every observation must hold the total.
        wait_for(
            lambda: (TOTAL, ACCOUNTS) in checker.observations or spark_job.exited(),
            lambda: (
                f"no snapshot: {checker.observations[-3:]} {checker.errors[-3:]} {capture.tail()}"
            ),
            120,
        )
        assert not spark_job.exited(), spark_job.tail()
        watched_from = checker.observations.index((TOTAL, ACCOUNTS))
        timeline.mark("snapshot in the target; transfers start")
        transfers.start()

        def through_now() -> Callable[[], bool]:
            """A condition: every transfer committed by now is in the target (the snapshot's
            row besides): captured, published and applied after what came before."""
            now = transfers.committed
            return lambda: _count(target, "transfers") > now

        kill_capture(capture, transfers, through_now, timeline)
        # The broker: the capture and the Spark job keep running, retrying, and go on.
        transfers.wait_more(200)
        broker_exit = broker.stop(signal.SIGKILL)
        timeline.mark(f"broker killed ({broker_exit})")
        transfers.wait_more(50)
        broker.restart()
        timeline.mark("broker restarted")
        through = through_now()
        wait_for(lambda: through() or capture.exited() or spark_job.exited(),
                 "not through the broker's restart", 60)  # fmt: skip
        assert not capture.exited(), f"capture died with the broker: {capture.tail()}"
        assert not spark_job.exited(), f"Spark job died with the broker: {spark_job.tail()}"
        timeline.mark("through the broker's restart")
        # The Spark job, while it applies: its driver, and with it its JVM and workers.
        transfers.wait_more(200)
        running = spark_job.descendants()
        wait_for_open_write(target)
        spark_job.kill()
        timeline.mark(f"Spark job killed ({spark_job.exits[-1]}) while applying")
        assert len(running) >= 2, running  # the driver, its JVM (and the Python workers)
        wait_for(lambda: not spark_job.descendants(),
                 lambda: f"Spark's processes outlive their driver: {spark_job.descendants()}",
                 30)  # fmt: skip
        timeline.mark(f"its processes are gone: {running}")
        transfers.wait_more(50)
        spark_job.start(120)
        timeline.mark("Spark job restarted")
        wait_for(through_now(), lambda: f"not through the Spark job's restart: {spark_job.tail()}",
                 120)  # fmt: skip
        timeline.mark("through the Spark job's restart")
        kill_capture(capture, transfers, through_now, timeline)
        transfers.wait_more(200)
        transfers.stop.set()
        transfers.join(10)
        with psycopg.connect(postgres_dsn) as conn:
            (booked,) = conn.execute("SELECT count(*) FROM transfers").fetchone() or (0,)
        timeline.mark(f"transfers stopped: {booked} rows")
        wait_for(lambda: _count(target, "transfers") == booked,
                 lambda: f"not caught up: {spark_job.tail()}", 120)  # fmt: skip
        timeline.mark("caught up")
        # SIGTERM: the job catches up, verifies source == target and exits 0 when equal.
        assert spark_job.stop() == 0, spark_job.tail()
        timeline.mark("verified")
        verified = json.loads(result_path.read_text())
    finally:
        transfers.stop.set()
        checker.stop.set()
        checker.join(10)
        # what the Spark job left behind, once it exited by itself (none, it says below)
        orphans = spark_job.descendants()
        for child in (spark_job, capture):
            child.end()
        if broker.process is not None:
            broker.stop()
    assert set(verified) == {"public.accounts", "public.transfers"}, verified
    for table, result in verified.items():
        assert result["equal"], (table, result["differences"])
    assert verified["public.transfers"]["rows"] == booked
    watched = checker.observations[watched_from:]
    broken = [o for o in watched if o != (TOTAL, ACCOUNTS)]
    assert not broken, f"{len(broken)} of {len(watched)} observations off the total: {broken[:5]}"
    # the checker kept watching while the target moved: many observations, many states
    assert len(watched) > 200, len(watched)
    assert booked >= 1_000
    # every kill happened (SIGKILL, not an exit of its own), and every restart started
    assert capture.exits == [-signal.SIGKILL] * 2, capture.exits
    assert broker_exit == -signal.SIGKILL
    assert spark_job.exits == [-signal.SIGKILL, 0], spark_job.exits
    # each capture start fenced the last (a new epoch of one id); two Spark job starts
    assert capture.starts() == 3, capture.tail()
    assert spark_job.starts() == 2, spark_job.tail()
    assert not orphans, f"processes left behind: {orphans}"


def kill_capture(
    capture: Child, transfers: Transfers, through_now: Callable[[], Callable[[], bool]],
    timeline: Timeline,
) -> None:  # fmt: skip
    """SIGKILL the capture mid-stream (batches in flight), let the source run ahead, restart
    it, and wait until what the source committed meanwhile is in the target."""
    transfers.wait_more(200)
    capture.kill()
    timeline.mark(f"capture killed ({capture.exits[-1]})")
    transfers.wait_more(50)
    capture.start()
    timeline.mark("capture restarted")
    wait_for(through_now(), lambda: f"not through the capture's restart: {capture.tail()}")
    timeline.mark("through the capture's restart")


def wait_for_open_write(dsn: str, timeout_s: float = 30.0) -> None:
    """Until a transaction that has written (it has an id) is open in the target: an apply
    mid-way, which a kill now cuts off (the test's own sessions only read)."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.002)
    raise AssertionError(f"no apply writing in the target for {timeout_s} s")


def _count(dsn: str, table: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    except psycopg.errors.UndefinedTable:
        return -1
    return int(row[0]) if row else -1
