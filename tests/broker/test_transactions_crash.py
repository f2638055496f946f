"""kill -9 at every step of a transaction: nothing committed lost, nothing aborted shown.

For each crash point of ``kayak/broker/txn/crash_points.py`` (decision durable, markers
appended, markers durable, completion durable) and for both commit and abort, the broker
SIGKILLs itself inside EndTxn (``KAYAK_TXN_CRASH_AT``) while a transaction over three
partitions, large enough to cross segment boundaries (1 MiB segments), ends. Before it, a
committed and an aborted transaction are in the log, and the broker was already killed once.
After a restart without the variable:

- every acknowledged record is in the log exactly once (read_uncommitted);
- read_committed readers (confluent-kafka, and a raw reader that also checks that no Fetch
  passes the last stable offset) see exactly the committed transactions' records, each once;
- no transaction hangs: DescribeTransactions says CompleteCommit / CompleteAbort and the last
  stable offset equals the high watermark of every partition;
- a new producer with the same transactional id initialises (fencing the old epoch) and
  commits another transaction; ``kayak log verify`` finds the data directory sound.

A broker killed with a transaction open (before EndTxn) aborts it by its timeout after the
restart, and the last stable offset is not left stuck.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import KafkaException

from kayak.broker.txn import crash_points
from tests.broker.conftest import BrokerProcess
from tests.broker.crash.broker import kayak_log_verify
from tests.broker.interop_helpers import create_topic
from tests.broker.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    describe_transaction,
    end_offsets,
    read_committed_raw,
    read_confluent,
    send_all,
    txn_producer,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

TOPIC = "payments"
PARTITIONS = 3
TRANSACTIONAL_ID = "crash-txn"
SEGMENT_BYTES = 1 << 20  # the smallest Kafka allows (KIP-1030)
VALUE_BYTES = 1000
CLEANUP_INTERVAL_MS = 200
TXN_TIMEOUT_MS = 8000  # longer than a restart takes, so the restarted broker sees it open
INPUT, GROUP = "input", "copier"  # offsets sent to the transactions (consume-transform-produce)
COMMITTED_OFFSET, ABORTED_OFFSET, ENDING_OFFSET = 100, 200, 300


def records(tag: str, per_partition: int) -> list[tuple[str, int, bytes]]:
    """``per_partition`` records of about 1 kB for each partition, each value unique."""
    pad = b"." * VALUE_BYTES
    return [
        (TOPIC, p, f"{tag}-{p}-{i}|".encode() + pad)
        for i in range(per_partition)
        for p in range(PARTITIONS)
    ]


def new_broker(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        ["--transaction-abort-timed-out-transaction-cleanup-interval-ms", str(CLEANUP_INTERVAL_MS)],
    )


def values_of(found: list[tuple[int, int, bytes]]) -> Counter[bytes]:
    return Counter(value for _, _, value in found)


def expect_exactly(found: list[tuple[int, int, bytes]], expected: list[bytes], what: str) -> None:
    """``found`` holds each of ``expected`` exactly once, and nothing else."""
    counts = values_of(found)
    wanted = Counter(expected)
    missing = [v[:30] for v in wanted if counts[v] == 0]
    doubled = [v[:30] for v, n in counts.items() if n > 1]
    extra = [v[:30] for v in counts if v not in wanted]
    assert (missing, doubled, extra) == ([], [], []), (
        f"{what}: {len(missing)} missing, {len(doubled)} doubled, {len(extra)} unexpected "
        f"(first: {missing[:3]} {doubled[:3]} {extra[:3]})"
    )


def assert_nothing_hangs(bootstrap: str) -> None:
    """The last stable offset equals the high watermark on every partition."""
    stable = end_offsets(bootstrap, TOPIC, PARTITIONS, READ_COMMITTED)
    high = end_offsets(bootstrap, TOPIC, PARTITIONS, READ_UNCOMMITTED)
    assert stable == high, f"last stable offsets {stable} behind high watermarks {high}"


def assert_log_holds(bootstrap: str, committed: list[bytes], acknowledged: list[bytes]) -> None:
    """Every acknowledged record once (read_uncommitted); the committed ones once, nothing
    else, for read_committed (raw, and confluent-kafka)."""
    everything = read_confluent(bootstrap, TOPIC, PARTITIONS, "read_uncommitted")
    expect_exactly(everything, acknowledged, "read_uncommitted")
    expect_exactly(read_committed_raw(bootstrap, TOPIC, PARTITIONS), committed, "raw committed")
    confluent = read_confluent(bootstrap, TOPIC, PARTITIONS, "read_committed")
    expect_exactly(confluent, committed, "confluent-kafka read_committed")


def segments_of(data_dir: Path, partition: int) -> int:
    return len(list((data_dir / f"{TOPIC}-{partition}").glob("*.log")))


def values(batch: list[tuple[str, int, bytes]]) -> list[bytes]:
    return [value for _, _, value in batch]


def send_offset(producer: confluent_kafka.Producer, bootstrap: str, offset: int) -> None:
    """Commit ``offset`` of the input partition for GROUP inside the open transaction."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(INPUT, 0, offset)],
            consumer.consumer_group_metadata(),
            30,
        )
    finally:
        consumer.close()


def committed_offset(bootstrap: str) -> int:
    """GROUP's committed input offset, asked as librdkafka asks (require_stable: an offset
    still pending in a transaction is retried until it settles, so a hung one times out)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        (found,) = consumer.committed([confluent_kafka.TopicPartition(INPUT, 0)], 15)
    finally:
        consumer.close()
    return int(found.offset)


def run_before_the_crash(broker: BrokerProcess) -> tuple[list[bytes], list[bytes]]:
    """A committed and an aborted transaction (each with an offset of GROUP), then a kill -9
    with none open; what is committed and what was acknowledged."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES)})
    create_topic(bootstrap, INPUT, 1)
    producer = txn_producer(bootstrap, TRANSACTIONAL_ID)
    committed, aborted = records("committed", 400), records("aborted", 400)
    producer.begin_transaction()
    send_all(producer, committed)
    send_offset(producer, bootstrap, COMMITTED_OFFSET)
    producer.commit_transaction(30)
    producer.begin_transaction()
    send_all(producer, aborted)
    send_offset(producer, bootstrap, ABORTED_OFFSET)
    producer.abort_transaction(30)
    broker.stop(signal.SIGKILL)
    return values(committed), values(committed) + values(aborted)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("point", crash_points.POINTS)
def test_kill_at_a_step_of_end_txn(tmp_path: Path, point: str, commit: bool) -> None:
    data_dir = tmp_path / "data"
    broker = new_broker(data_dir).start()
    committed, acknowledged = run_before_the_crash(broker)

    broker.env = {"KAYAK_TXN_CRASH_AT": point}
    bootstrap = broker.restart().bootstrap_servers
    producer = txn_producer(bootstrap, TRANSACTIONAL_ID)
    ending = records(f"ending-{'commit' if commit else 'abort'}", 800)
    producer.begin_transaction()
    send_all(producer, ending)
    send_offset(producer, bootstrap, ENDING_OFFSET)
    acknowledged += values(ending)
    with pytest.raises(KafkaException):  # the broker dies inside EndTxn: no answer
        if commit:
            producer.commit_transaction(1)
        else:
            producer.abort_transaction(1)
    assert broker.process is not None
    assert broker.process.wait(30) == -signal.SIGKILL, f"the broker did not die at {point}"
    broker.process = None
    # 1.6 MB per partition: the aborted and the ending transaction cross a segment boundary.
    assert all(segments_of(data_dir, p) >= 2 for p in range(PARTITIONS)), "no segment rolled"

    broker.env = {}
    bootstrap = broker.restart().bootstrap_servers
    # Every crash point lies after the decision was made durable: it stands.
    if commit:
        committed += values(ending)
    outcome = "CompleteCommit" if commit else "CompleteAbort"
    wait_until(
        f"the transaction {outcome}",
        lambda: describe_transaction(bootstrap, TRANSACTIONAL_ID).transaction_state == outcome,
        timeout=10,
    )
    assert_nothing_hangs(bootstrap)
    assert_log_holds(bootstrap, committed, acknowledged)
    assert committed_offset(bootstrap) == (ENDING_OFFSET if commit else COMMITTED_OFFSET)

    successor = txn_producer(bootstrap, TRANSACTIONAL_ID)
    after = records("after", 50)
    successor.begin_transaction()
    send_all(successor, after)
    send_offset(successor, bootstrap, ENDING_OFFSET + 1)
    successor.commit_transaction(30)
    assert describe_transaction(bootstrap, TRANSACTIONAL_ID).transaction_state == "CompleteCommit"
    assert committed_offset(bootstrap) == ENDING_OFFSET + 1
    assert_nothing_hangs(bootstrap)
    assert_log_holds(bootstrap, committed + values(after), acknowledged + values(after))
    broker.stop()
    if point == crash_points.MARKERS_APPENDED:  # markers (and index entries) written twice
        verified = kayak_log_verify(data_dir)
        assert not verified.available or verified.returncode == 0, verified.output


def test_kill_with_a_transaction_open_aborts_it_by_its_timeout(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = new_broker(data_dir).start()
    committed, acknowledged = run_before_the_crash(broker)
    bootstrap = broker.restart().bootstrap_servers

    timeout = {"transaction.timeout.ms": TXN_TIMEOUT_MS}
    producer = txn_producer(bootstrap, TRANSACTIONAL_ID, **timeout)
    hung = records("hung", 800)
    before = end_offsets(bootstrap, TOPIC, PARTITIONS, READ_UNCOMMITTED)
    producer.begin_transaction()
    send_all(producer, hung)
    send_offset(producer, bootstrap, ENDING_OFFSET)
    acknowledged += values(hung)
    opened = time.monotonic()
    broker.stop(signal.SIGKILL)

    bootstrap = broker.restart().bootstrap_servers
    # Still open after the restart: read_committed readers stay behind it.
    assert describe_transaction(bootstrap, TRANSACTIONAL_ID).transaction_state == "Ongoing"
    assert end_offsets(bootstrap, TOPIC, PARTITIONS, READ_COMMITTED) == before
    # The open transaction crosses into a new segment: reads stop at its start, before it.
    open_reads = read_committed_raw(bootstrap, TOPIC, PARTITIONS)
    assert time.monotonic() - opened < TXN_TIMEOUT_MS / 1000, "restarted too slowly to tell"
    expect_exactly(open_reads, committed, "read_committed while it is open")
    wait_until(
        "the open transaction aborted by its timeout",
        lambda: (
            describe_transaction(bootstrap, TRANSACTIONAL_ID).transaction_state == "CompleteAbort"
        ),
        timeout=TXN_TIMEOUT_MS / 1000 + 10,
    )
    assert time.monotonic() - opened >= TXN_TIMEOUT_MS / 1000 - 0.5
    assert_nothing_hangs(bootstrap)
    assert_log_holds(bootstrap, committed, acknowledged)
    assert committed_offset(bootstrap) == COMMITTED_OFFSET

    successor = txn_producer(bootstrap, TRANSACTIONAL_ID)
    after = records("after", 50)
    successor.begin_transaction()
    send_all(successor, after)
    successor.commit_transaction(30)
    assert_nothing_hangs(bootstrap)
    assert_log_holds(bootstrap, committed + values(after), acknowledged + values(after))
    broker.stop()
    verified = kayak_log_verify(data_dir)
    assert not verified.available or verified.returncode == 0, verified.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "kill-9"])
def test_an_open_transaction_survives_a_restart_and_commits(tmp_path: Path, sig: int) -> None:
    """The coordinator's state and the partitions' open transactions come back from disk:
    the same producer goes on and commits, and its records are read exactly once."""
    data_dir = tmp_path / "data"
    broker = new_broker(data_dir).start()
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, PARTITIONS)
    create_topic(bootstrap, INPUT, 1)
    producer = txn_producer(bootstrap, TRANSACTIONAL_ID, **{"transaction.timeout.ms": 60_000})
    first, second = records("first", 50), records("second", 50)
    producer.begin_transaction()
    send_all(producer, first)
    send_offset(producer, bootstrap, COMMITTED_OFFSET)
    broker.stop(sig)

    bootstrap = broker.restart().bootstrap_servers
    assert describe_transaction(bootstrap, TRANSACTIONAL_ID).transaction_state == "Ongoing"
    assert end_offsets(bootstrap, TOPIC, PARTITIONS, READ_COMMITTED) == {0: 0, 1: 0, 2: 0}
    assert read_committed_raw(bootstrap, TOPIC, PARTITIONS) == []
    send_all(producer, second)
    producer.commit_transaction(30)
    assert_nothing_hangs(bootstrap)
    both = values(first) + values(second)
    assert_log_holds(bootstrap, both, both)
    assert committed_offset(bootstrap) == COMMITTED_OFFSET
    broker.stop()
