"""The crash harness itself: :class:`CrashHarness` runs rounds of load, ``kill -9`` and
verification against one broker data directory (see the package's docstring for a round),
configured by :class:`HarnessConfig`; each round reports a :class:`RoundResult`."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.crash.acks import Ack, Counters, read_ack_file, read_commit_file
from tests.broker.crash.broker import BrokerUnderTest, LogVerify, kayak_log_verify
from tests.broker.crash.group import run_group_consumer
from tests.broker.crash.producers import ProducerJob, run_producer
from tests.broker.crash.side_traffic import (
    DELETE_RECORDS_PARTITION,
    RETENTION_SEGMENT_BYTES,
    RETENTION_TOPIC,
    SideTraffic,
    check_retention,
)
from tests.broker.crash.transactions import TOPIC as TXN_TOPIC
from tests.broker.crash.transactions import TxnJob, TxnLog, run_txn_producer, verify_transactions
from tests.broker.crash.verdicts import (
    commit_regressions,
    commits_kept,
    highest_commits,
    read_topic,
    verify_topic,
)
from tests.broker.crash.workload import (
    DRAIN_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    PARTITIONS,
    QUIET,
    MiB,
    Writer,
)

log = logging.getLogger(__name__)


@dataclass
class HarnessConfig:
    """One harness run: where, which broker layout, how much per round."""

    work_dir: Path
    shards: int = 1
    flush: str = "group"
    mib_per_round: float = 50.0
    seed: int | None = None
    reach_timeout_s: float = 300.0  # to write mib_per_round before the kill
    after_restart_mib: float = 2.0  # acknowledged after the restart before the producers stop
    # A transactional producer beside the others, checked by a read_committed reader. Only on
    # one shard: kayak refuses a transaction over partitions of several shards.
    transactions: bool = True
    # Called with the data directory while a one-process broker is down after the kill: the
    # harness's own tests damage what the broker left there to prove the checks catch it.
    after_kill: Callable[[Path], None] | None = None

    @property
    def variant(self) -> str:
        return f"shards={self.shards} flush={self.flush}"


@dataclass
class RoundResult:
    """What one round wrote, where the crash hit and what reading back found."""

    round_number: int
    variant: str
    mib_written: float = 0.0
    mib_before_kill: float = 0.0
    records_acked: int = 0  # this round
    total_acked: int = 0  # every round so far, all re-verified
    lost: int = 0
    duplicated: int = 0
    deleted_by_request: int = 0
    acknowledged_twice_stored: int = 0
    commits_acked: int = 0
    group_consumed: int = 0
    transactions: str = ""  # what the transactional producer did, when there is one
    killed: str = ""
    came_back: str = ""
    restart_s: float = 0.0
    verify_s: float = 0.0
    round_s: float = 0.0
    side_traffic: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    recovery_lines: list[str] = field(default_factory=list)

    @property
    def torn_tail_cuts(self) -> int:
        return sum("torn tail" in line for line in self.recovery_lines)

    def describe(self) -> str:
        """A multi-line account for assertion messages and reports."""
        lines = [
            f"round {self.round_number} [{self.variant}]: {self.mib_written:.1f} MiB written "
            f"({self.mib_before_kill:.1f} before the kill of {self.killed}; {self.came_back}), "
            f"{self.records_acked} records acknowledged this round, {self.total_acked} in all: "
            f"lost {self.lost}, duplicated {self.duplicated}, deleted by DeleteRecords "
            f"{self.deleted_by_request}, plain-producer retry copies "
            f"{self.acknowledged_twice_stored}; the group consumed {self.group_consumed} records, "
            f"{self.commits_acked} commits acknowledged",
            *([f"  transactions: {self.transactions}"] if self.transactions else []),
            *self.side_traffic,
            *(f"  {p}" for p in self.problems[:20]),
            *(f"  violation: {v}" for v in self.violations[:20]),
            *(f"  broker: {line}" for line in self.recovery_lines[:20]),
        ]
        return "\n".join(lines)


@dataclass
class _Workers:
    stop: Any
    producers: dict[Writer, tuple[SpawnProcess, Counters]]
    consumer: tuple[SpawnProcess, Counters]
    ack_paths: dict[Writer, Path]
    commit_path: Path
    transactional: tuple[SpawnProcess, Counters, Path] | None = None

    def acked_bytes(self) -> int:
        return sum(c.bytes.value for _, c in self.producers.values())

    def running(self) -> set[Writer]:
        """The producers still producing (not stopped early by a fatal error)."""
        return {w for w, (process, _) in self.producers.items() if process.is_alive()}

    def commits(self) -> int:
        return int(self.consumer[1].commits.value)

    def transactions_ended(self) -> int:
        """Transactions the transactional producer saw acknowledged (0 without one)."""
        return 0 if self.transactional is None else int(self.transactional[1].commits.value)

    def acked_records(self) -> dict[Writer, int]:
        return {w: c.records.value for w, (_, c) in self.producers.items()}


class CrashHarness:
    """Rounds of load, ``kill -9`` and verification against one broker data directory.

    Use as a context manager: it starts the broker and creates the topics, and stops the
    broker on the way out. :meth:`run_round` as often as wanted, then :meth:`finish`.
    """

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config
        self.seed = config.seed if config.seed is not None else random.randrange(2**32)
        self.rng = random.Random(self.seed)
        self.broker = BrokerUnderTest(config.work_dir / "data", config.shards, config.flush)
        self._ctx: SpawnContext = multiprocessing.get_context("spawn")
        self._acks: dict[Writer, list[Ack]] = {w: [] for w in Writer}
        self._commits: list[tuple[str, int, int]] = []
        self._txns = TxnLog()
        self._deleted_below: dict[int, int] = {}
        self._rounds = 0
        # Over the whole run: a record lost in one round stays lost in the next ones.
        self.lost_ids: set[bytes] = set()
        self.duplicated_ids: set[bytes] = set()

    @property
    def acknowledged(self) -> int:
        """Records acknowledged in every round so far (each verified after every round)."""
        return sum(len(acks) for acks in self._acks.values())

    def __enter__(self) -> Self:
        self.broker.start()
        try:
            self._create_topics()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.broker.stop()

    def _create_topics(self) -> None:
        admin = AdminClient({**QUIET, "bootstrap.servers": self.broker.bootstrap})
        big = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
        topics = [NewTopic(w.topic, PARTITIONS, 1, config=big) for w in Writer]
        if self._with_transactions:
            topics.append(NewTopic(TXN_TOPIC, PARTITIONS, 1))
        topics.append(
            NewTopic(RETENTION_TOPIC, 1, 1, config={"segment.bytes": str(RETENTION_SEGMENT_BYTES)})
        )
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result(60)

    @property
    def _with_transactions(self) -> bool:
        return self.config.transactions and self.config.shards == 1

    # -- one round --------------------------------------------------------------------------

    def run_round(self) -> RoundResult:
        """Load, crash at a random point past ``mib_per_round``, recover, drain, verify."""
        number = self._rounds
        self._rounds += 1
        result = RoundResult(number, f"{self.config.variant} seed={self.seed}")
        started = time.monotonic()
        log_offset = self.broker.log_offset()
        workers = self._start_workers(number)
        side = SideTraffic(self.broker.bootstrap, number, self._deleted_below)
        try:
            side.start_writer()
            self._load_then_crash(workers, side, result)
            self._drain(workers, result)
        finally:
            self._stop_workers(workers)
            side.join()
        result.side_traffic = [f"  {line}" for line in side.done]
        result.violations += side.errors
        self._collect(workers, result)
        verify_started = time.monotonic()
        self._verify(result, side.retention_bytes)
        result.verify_s = time.monotonic() - verify_started
        result.recovery_lines = self.broker.recovery_lines_since(log_offset)
        result.round_s = time.monotonic() - started
        log.info("%s", result.describe())
        return result

    def _start_workers(self, number: int) -> _Workers:
        stop = self._ctx.Event()
        acks_dir = self.config.work_dir / "acks"
        acks_dir.mkdir(parents=True, exist_ok=True)
        # The group member first: it is the slowest to get going (spawn, join, assignment).
        commit_path = acks_dir / f"commits-r{number}.txt"
        group_counters = self._counters()
        consumer = self._ctx.Process(
            target=run_group_consumer,
            args=(self.broker.bootstrap, str(commit_path), stop, group_counters),
            name="group consumer",
        )
        consumer.start()
        producers = {}
        ack_paths = {}
        for writer in Writer:
            ack_paths[writer] = acks_dir / f"{writer.value}-r{number}.txt"
            job = ProducerJob(
                writer, self.broker.bootstrap, number, self.rng.getrandbits(32),
                str(ack_paths[writer]),
            )  # fmt: skip
            counters = self._counters()
            process = self._ctx.Process(
                target=run_producer, args=(job, stop, counters), name=f"producer {writer}"
            )
            process.start()
            producers[writer] = (process, counters)
        workers = _Workers(stop, producers, (consumer, group_counters), ack_paths, commit_path)
        if self._with_transactions:
            txn_path = acks_dir / f"transactions-r{number}.txt"
            txn_job = TxnJob(self.broker.bootstrap, number, self.rng.getrandbits(32), str(txn_path))
            counters = self._counters()
            process = self._ctx.Process(
                target=run_txn_producer, args=(txn_job, stop, counters), name="txn producer"
            )
            process.start()
            workers.transactional = (process, counters, txn_path)
        return workers

    def _counters(self) -> Counters:
        return Counters(*(self._ctx.RawValue(ctypes.c_longlong, 0) for _ in range(3)))

    def _load_then_crash(self, workers: _Workers, side: SideTraffic, result: RoundResult) -> None:
        target = int(self.config.mib_per_round * MiB * self.rng.uniform(1.0, 1.25))
        deadline = time.monotonic() + self.config.reach_timeout_s
        side_effects = [
            (0.35 * target, side.delete_records),
            (0.5 * target, side.alter_retention),
        ]
        # The crash must also find the group committing: wait for its first commits too.
        while workers.acked_bytes() < target or workers.commits() < 2:
            while side_effects and workers.acked_bytes() >= side_effects[0][0]:
                side_effects.pop(0)[1]()
            if not workers.running():
                result.violations.append("every producer stopped before the kill")
                break
            if time.monotonic() > deadline:
                result.violations.append(
                    f"only {workers.acked_bytes() / MiB:.1f} MiB and {workers.commits()} commits "
                    f"acknowledged in {self.config.reach_timeout_s:.0f} s"
                )
                break
            time.sleep(0.05)
        for _, effect in side_effects:
            effect()
        result.mib_before_kill = workers.acked_bytes() / MiB
        before_kill = highest_commits(read_commit_file(workers.commit_path))
        result.killed = self.broker.kill(self.rng)
        killed_at = time.monotonic()
        log.info("killed %s at %.1f MiB", result.killed, result.mib_before_kill)
        if self.config.after_kill is not None and self.config.shards == 1:
            self.config.after_kill(self.broker.data_dir)
        time.sleep(self.rng.uniform(0.0, 0.5))
        result.came_back = self.broker.recover()
        result.restart_s = time.monotonic() - killed_at
        result.violations += commits_kept(self.broker.bootstrap, before_kill, "after the restart")

    def _drain(self, workers: _Workers, result: RoundResult) -> None:
        """Let every producer have records acknowledged after the restart, and the group a
        commit, then stop them."""
        at_restart = workers.acked_records()
        bytes_at_restart = workers.acked_bytes()
        commits_at_restart = workers.commits()
        txns_at_restart = workers.transactions_ended()
        enough = self.config.after_restart_mib * MiB
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # A producer that stopped on its own (a fatal error) reports why in its file.
            running = workers.running()
            progressed = all(n > at_restart[w] for w, n in workers.acked_records().items()
                             if w in running)  # fmt: skip
            committed = workers.commits() > commits_at_restart
            # The transactional producer must end transactions again after the restart too.
            if workers.transactional is not None:
                committed = committed and workers.transactions_ended() > txns_at_restart
            if progressed and committed and workers.acked_bytes() - bytes_at_restart >= enough:
                return
            time.sleep(0.05)
        stuck = [
            w.value
            for w, n in workers.acked_records().items()
            if n <= at_restart[w] and w in workers.running()
        ]
        if workers.commits() == commits_at_restart:
            stuck.append("the group's commits")
        if workers.transactional is not None and workers.transactions_ended() == txns_at_restart:
            stuck.append("the transactions")
        result.violations.append(f"nothing acknowledged after the restart for {stuck} in 120 s")

    def _stop_workers(self, workers: _Workers) -> None:
        workers.stop.set()
        processes = [p for p, _ in workers.producers.values()] + [workers.consumer[0]]
        if workers.transactional is not None:
            processes.append(workers.transactional[0])
        deadline = time.monotonic() + DRAIN_TIMEOUT_S + 60
        for process in processes:
            process.join(timeout=max(1.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("%s did not stop: terminating it", process.name)
                process.terminate()
                process.join(10)

    def _collect(self, workers: _Workers, result: RoundResult) -> None:
        """Read the acknowledgement and commit files of the round."""
        for writer, path in workers.ack_paths.items():
            contents = read_ack_file(path)
            self._acks[writer] += contents.acks
            result.records_acked += len(contents.acks)
            result.mib_written += sum(a.size for a in contents.acks) / MiB
            if contents.failures:
                result.violations.append(
                    f"{writer}: {len(contents.failures)} deliveries failed, first: "
                    f"{contents.failures[0]}"
                )
            result.violations += [f"{writer} stopped: {error}" for error in contents.fatal]
            if contents.done is None:
                result.violations.append(f"{writer}: the producer did not finish its file")
            elif contents.done[3]:
                result.violations.append(f"{writer}: {contents.done[3]} records never answered")
        commits = read_commit_file(workers.commit_path)
        result.commits_acked = len(commits)
        result.group_consumed = workers.consumer[1].records.value
        self._commits += commits
        result.violations += commit_regressions(self._commits)
        result.total_acked = self.acknowledged
        if workers.transactional is not None:
            self._txns.read(workers.transactional[2])
            txns = self._txns
            result.transactions = (
                f"{len(txns.committed)} committed, {len(txns.aborted)} aborted, "
                f"{len(txns.uncertain)} uncertain (every round so far)"
            )

    def _verify(self, result: RoundResult, retention_bytes: int) -> None:
        bootstrap = self.broker.bootstrap
        for writer in Writer:
            contents = read_topic(bootstrap, writer.topic, PARTITIONS)
            deleted = self._deleted_below if writer.topic == DELETE_RECORDS_PARTITION[0] else {}
            verdict = verify_topic(writer, contents, self._acks[writer], deleted)
            result.lost += verdict.lost
            self.lost_ids |= verdict.lost_ids
            self.duplicated_ids |= verdict.duplicated_ids
            result.duplicated += verdict.duplicated
            result.deleted_by_request += verdict.deleted_by_request
            result.acknowledged_twice_stored += verdict.acknowledged_twice_stored
            result.problems += verdict.problems
            result.violations += verdict.violations
        result.violations += commits_kept(bootstrap, highest_commits(self._commits), "at the end")
        result.violations += check_retention(bootstrap, self.broker.data_dir, retention_bytes)
        if self._with_transactions:
            result.violations += verify_transactions(bootstrap, self._txns)

    # -- the end ---------------------------------------------------------------------------------

    def finish(self) -> LogVerify:
        """Stop the broker cleanly, then check the data directory with ``kayak log verify``."""
        self.broker.stop()
        return kayak_log_verify(self.broker.data_dir)
