"""kill -9 under a realistic acks=all load loses and duplicates nothing acknowledged.

Each case runs :class:`tests.broker.crash.CrashHarness`: three producers (confluent-kafka
idempotent and not, kayak's own) and a committing consumer group against a real broker at the
default 1 GiB segment size, DeleteRecords and a retention change on the side; at least 50 MiB
per round, then SIGKILL of the broker (or of one shard), a restart on the same data directory,
and every partition read back from its log start. On one shard a transactional producer runs
beside them, and a read_committed reader checks its transactions (committed ones exactly once,
aborted ones never, none left open). Acknowledgements accumulate over rounds, so a second round
re-checks the first round's records after another crash.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kayak.broker.log.loader import LOG_END
from tests.broker.conftest import BrokerProcess
from tests.broker.crash import CrashHarness, HarnessConfig, RoundResult, Writer
from tests.broker.crash.transactions import TOPIC as TXN_TOPIC
from tests.broker.crash.transactions import TxnLog, verify_transactions
from tests.broker.crash.workload import PARTITIONS
from tests.broker.interop_helpers import create_topic
from tests.broker.txn_support import send_all, txn_producer

MIB_PER_ROUND = 50.0


def run_rounds(work_dir: Path, shards: int, flush: str, rounds: int) -> None:
    config = HarnessConfig(work_dir, shards=shards, flush=flush, mib_per_round=MIB_PER_ROUND)
    results: list[RoundResult] = []
    with CrashHarness(config) as harness:
        for _ in range(rounds):
            results.append(harness.run_round())
        checked = harness.finish()
    report = "\n".join(result.describe() for result in results)

    for result in results:
        assert result.mib_before_kill >= MIB_PER_ROUND, report
        assert result.records_acked > 0, report
    assert len(harness.lost_ids) == 0, f"acknowledged records lost:\n{report}"
    assert len(harness.duplicated_ids) == 0, f"records stored twice:\n{report}"
    assert [v for result in results for v in result.violations] == [], report
    # `kayak log verify` is checked whenever this kayak has the command.
    assert not checked.available or checked.returncode == 0, checked.output


@pytest.mark.timeout(300)
def test_one_shard_flush_group_two_rounds(tmp_path: Path) -> None:
    run_rounds(tmp_path, shards=1, flush="group", rounds=2)


@pytest.mark.timeout(300)
def test_one_shard_flush_always(tmp_path: Path) -> None:
    run_rounds(tmp_path, shards=1, flush="always", rounds=1)


@pytest.mark.timeout(300)
def test_two_shards_kill_a_shard_twice(tmp_path: Path) -> None:
    run_rounds(tmp_path, shards=2, flush="group", rounds=2)


def drop_plain_tail(data_dir: Path) -> None:
    """What a broker that acknowledged writes it never made durable would leave after a
    crash: the second half of the non-idempotent producer's largest partition is gone (the
    last MiB or so may never have been acknowledged: records in flight). Such a broker would
    not have recorded those records durable either, so the record of the log's end goes too
    (kayak itself takes a log that ends below its record offline)."""
    logs = data_dir.glob(f"{Writer.CONFLUENT_PLAIN.topic}-*/*.log")
    largest = max(logs, key=lambda path: path.stat().st_size)
    os.truncate(largest, largest.stat().st_size // 2)
    (largest.parent / LOG_END).unlink(missing_ok=True)


@pytest.mark.timeout(300)
def test_the_harness_reports_records_the_broker_lost(tmp_path: Path) -> None:
    config = HarnessConfig(tmp_path, mib_per_round=10, after_kill=drop_plain_tail)
    with CrashHarness(config) as harness:
        result = harness.run_round()
    assert result.lost > 0, result.describe()
    assert any(problem.startswith("lost: cp000-") for problem in result.problems)
    assert len(harness.lost_ids) == result.lost


def test_the_transaction_checks_report_what_read_committed_must_not_show(
    broker_process: BrokerProcess,
) -> None:
    """verify_transactions against a real log: a committed and an aborted transaction pass;
    claimed the other way round, or with a record that never came, they are reported."""
    bootstrap = broker_process.bootstrap_servers
    create_topic(bootstrap, TXN_TOPIC, PARTITIONS)
    producer = txn_producer(bootstrap, "harness-check")
    written: dict[str, list[bytes]] = {}
    for name, commit in (("kept", True), ("dropped", False)):
        written[name] = [f"{name}-{i}".encode() for i in range(8)]
        producer.begin_transaction()
        send_all(producer, [(TXN_TOPIC, i % PARTITIONS, v) for i, v in enumerate(written[name])])
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    honest = TxnLog(dict(written), committed={"kept"}, aborted={"dropped"})
    assert verify_transactions(bootstrap, honest) == []
    swapped = TxnLog(dict(written), committed={"dropped"}, aborted={"kept"})
    assert sorted(verify_transactions(bootstrap, swapped)) == [
        "aborted kept: 8 records read by read_committed",
        "committed dropped: 8 of 8 records lost",
    ]
    short = TxnLog({"kept": written["kept"][:-1], "ghost": [b"never-written"]}, {"kept", "ghost"})
    assert sorted(verify_transactions(bootstrap, short)) == [
        "committed ghost: 1 of 1 records lost",
        "read_committed read b'kept-7' of no transaction",
    ]
