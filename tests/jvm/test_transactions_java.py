"""The Java client's transactions, checked the way Kafka's own transactions system test
(``tests/kafkatest/tests/core/transactions_test.py``) checks them, and ``kafka-transactions``
on a transaction left open; against kayak's broker and Apache Kafka 4.3 (the reference).

Copy exactly once: ``VerifiableProducer`` (idempotent, acks=all) seeds an input topic; two
``TransactionalMessageCopier``s (one per input partition, offsets committed to one group, one
with KIP-447 group metadata and one with the group id alone) copy it to an output topic in
transactions of ``TRANSACTION_SIZE`` records. On the way one copier is killed (SIGKILL) and
started again (its successor fences it and aborts its open transaction), and on kayak's broker
the broker itself is killed with SIGKILL and restarted three times (the run's Apache Kafka is
shared, so it is not killed). Then a read_committed ``kafka-console-consumer`` reads the
output: each partition holds its input partition's acknowledged records (the copier keeps
the partition) exactly once and in order, none missing, none twice; what a read_committed
consumer following the output saw during the copy (and the kills) is exactly that committed
output; the group's committed offsets are the input's ends.

``kafka-transactions``: a producer opens a transaction and goes away without ending it.
``list``, ``describe`` and ``describe-producers`` show it; read_committed readers are held at its
first offset (a committed transaction after it stays invisible); ``abort --start-offset``
ends it, after which read_committed readers see the committed records and not the aborted.
Another one left open is ended by ``forceTerminateTransaction``.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.fixtures.jvm import ApacheKafka, KafkaTools, write_properties

pytestmark = pytest.mark.timeout(300)

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
MESSAGES = 20_000
INPUT_PARTITIONS = 2  # one copier each; the output has as many (a copy keeps its partition)
# Small transactions: more of them (and of their markers), and a copy slow enough for the
# faults to land in the middle of it.
TRANSACTION_SIZE = 25
# A killed copier's successor asks for its committed offsets before it calls
# initTransactions, and a read_committed consumer's offset fetch waits (UNSTABLE_OFFSET_COMMIT)
# while the dead copier's transaction holds offsets: only its timeout ends that. Short, then,
# yet longer than a kayak restart, which must not time out a live copier's transaction.
TRANSACTION_TIMEOUT_MS = 10_000
# Small segments, rolled by time as well, so the copy crosses segment boundaries.
TOPIC_CONFIGS = ("--config", "segment.bytes=1048576", "--config", "segment.ms=1000")
# (fraction of the input copied, what happens then); "broker" faults only on kayak.
FAULTS = ((0.25, "broker"), (0.4, "copier"), (0.7, "broker"))

Copied = dict[tuple[int, int], str]  # (partition, offset) -> value
Sequences = dict[int, list[str]]  # partition -> its values in offset order


@dataclass
class Target:
    """The broker under test; ``kayak`` is set when it is kayak's (and may be killed)."""

    bootstrap: str
    kayak: BrokerProcess | None = None


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    running = BrokerProcess(tmp_path_factory.mktemp("txn-java") / "data").start()
    yield running
    if running.process is not None:
        running.stop()


@pytest.fixture(params=["kayak", "apache-kafka"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return Target(kafka.bootstrap_servers)
    broker: BrokerProcess = request.getfixturevalue("kayak_broker")
    return Target(broker.bootstrap_servers, broker)


def json_events(path: Path) -> list[dict[str, object]]:
    """The JSON lines of a tool's log (other lines, warnings, are skipped)."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and line.endswith("}"):
            events.append(json.loads(line))
    return events


def wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@dataclass
class Copier:
    """One ``TransactionalMessageCopier`` process for one input partition, restartable."""

    tools: KafkaTools
    args: list[str]
    log: Path
    partition_size: int
    process: subprocess.Popen[bytes] | None = None
    runs: list[int] = field(default_factory=list)  # log size at each start

    def start(self) -> None:
        self.runs.append(self.log.stat().st_size if self.log.exists() else 0)
        self.process = self.tools.start(COPIER, *self.args, log=self.log)

    def remaining(self) -> int:
        """Records left to copy, as the running copier last said (all, before it said)."""
        text = self.log.read_text(errors="replace")[self.runs[-1] :]
        for line in reversed(text.splitlines()):
            if line.startswith("{") and '"remaining"' in line and line.endswith("}"):
                return int(json.loads(line)["remaining"])
        return self.partition_size

    def copied(self) -> float:
        return 1 - self.remaining() / self.partition_size

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def finished(self) -> bool:
        """True once the copier exited 0. A copier must ride out broker restarts (as in
        Kafka's test, nothing restarts it but the planned kill): any other exit fails."""
        assert self.process is not None
        code = self.process.poll()
        assert code in (None, 0), (
            f"copier exited {code}:\n{self.log.read_text(errors='replace')[-4000:]}"
        )
        return code == 0

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


def all_copied(copiers: list[Copier], fraction: float) -> bool:
    """Every copier has copied ``fraction`` of its partition, or is done."""
    return all(c.copied() >= fraction or c.finished() for c in copiers)


@pytest.fixture
def copiers() -> Iterator[list[Copier]]:
    started: list[Copier] = []
    yield started
    for copier in started:
        copier.stop()


def sequences(records: Copied) -> Sequences:
    found: Sequences = {p: [] for p in range(INPUT_PARTITIONS)}
    for (partition, _), value in sorted(records.items()):
        found[partition].append(value)
    return found


def seed(kafka_tools: KafkaTools, bootstrap: str, topic: str, directory: Path) -> Sequences:
    """``MESSAGES`` records from ``VerifiableProducer``; each partition's acknowledged values
    in offset order."""
    config = write_properties(
        directory / "producer.properties",
        {"enable.idempotence": "true", "acks": "all", "retries": 2147483647},
    )
    done = kafka_tools.run(
        "kafka-verifiable-producer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--max-messages", str(MESSAGES), "--acks", "-1", "--command-config", str(config),
        timeout=120,
    )  # fmt: skip
    (directory / "producer.log").write_text(done.stdout)
    acked = {
        (int(str(e["partition"])), int(str(e["offset"]))): str(e["value"])
        for e in json_events(directory / "producer.log")
        if e["name"] == "producer_send_success"
    }
    assert len(acked) == MESSAGES, done.stdout[-2000:]
    return sequences(acked)


def read_committed(kafka_tools: KafkaTools, bootstrap: str, topic: str, idle_ms: int) -> Copied:
    """Every record of ``topic`` a read_committed console consumer reads until ``idle_ms``
    pass with nothing new."""
    done = kafka_tools.run(
        "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--from-beginning", "--isolation-level", "read_committed", "--timeout-ms", str(idle_ms),
        "--formatter-property", "print.partition=true",
        "--formatter-property", "print.offset=true",
        "--group", f"check-{uuid.uuid4().hex[:8]}", check=False, timeout=180,
    )  # fmt: skip
    assert "Processed a total of" in done.stderr, done.stderr[-3000:]
    lines = re.finditer(r"^Partition:(\d+)\tOffset:(\d+)\t(.*)$", done.stdout, re.M)
    found = [((int(m[1]), int(m[2])), m[3]) for m in lines]
    assert len(found) == len(dict(found)), "the console consumer printed an offset twice"
    return dict(found)


class ConcurrentReader(threading.Thread):
    """A read_committed consumer (confluent-kafka's, partitions assigned: no group, so no
    rebalance re-reads) following the output while it is written, as Kafka's test runs one:
    what it sees mid-copy, through broker restarts, must be what is committed in the end."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"concurrent-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.seen: Copied = {}
        self.conflicts: list[tuple[tuple[int, int], str, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                message = self.consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue  # errors while the broker restarts: librdkafka retries
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                where, value = (partition, offset), (message.value() or b"").decode()
                if self.seen.setdefault(where, value) != value:
                    self.conflicts.append((where, self.seen[where], value))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def test_copiers_copy_exactly_once_through_kills(
    kafka_tools: KafkaTools, target: Target, tmp_path: Path, copiers: list[Copier]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"copy-in-{suffix}", f"copy-out-{suffix}", f"copiers-{suffix}"
    for topic in (source, sink):
        kafka_tools.run(
            "kafka-topics", "--bootstrap-server", target.bootstrap, "--create", "--topic", topic,
            "--partitions", str(INPUT_PARTITIONS), *TOPIC_CONFIGS,
        )  # fmt: skip
    acked = seed(kafka_tools, target.bootstrap, source, tmp_path)

    for partition in range(INPUT_PARTITIONS):
        args = [
            "--broker-list", target.bootstrap, "--input-topic", source,
            "--input-partition", str(partition), "--output-topic", sink,
            "--consumer-group", group, "--transactional-id", f"copier-{suffix}-{partition}",
            "--transaction-size", str(TRANSACTION_SIZE),
            "--transaction-timeout", str(TRANSACTION_TIMEOUT_MS),
        ]  # fmt: skip
        if partition == 0:
            args.append("--use-group-metadata")  # KIP-447: generation and member id too
        size = len(acked[partition])
        copiers.append(Copier(kafka_tools, args, tmp_path / f"copier-{partition}.log", size))
        copiers[-1].start()

    reader = ConcurrentReader(target.bootstrap, sink, INPUT_PARTITIONS)
    reader.start()
    done_faults = []
    for fraction, fault in FAULTS:
        if fault == "broker" and target.kayak is None:
            continue
        wait_for(
            f"{fraction:.0%} copied before the {fault} fault",
            functools.partial(all_copied, copiers, fraction),
            timeout=90,
        )
        progress = [round(c.copied(), 2) for c in copiers]
        assert min(progress) < 1, f"the copy ended before the {fault} fault at {fraction:.0%}"
        if fault == "copier":
            copiers[0].kill()
            copiers[0].start()
        else:
            assert target.kayak is not None
            assert target.kayak.stop(signal.SIGKILL) == -signal.SIGKILL
            target.kayak.restart()
        done_faults.append((fraction, fault, progress))

    wait_for("every copier done", lambda: all(c.finished() for c in copiers), timeout=150)
    # The console consumer's idle timeout also runs while it joins its group: on a loaded
    # machine it can give up before its first fetch. Read again, waiting longer, while it
    # reads fewer records than were acknowledged; what it then reads is checked in full.
    expected = sum(len(values) for values in acked.values())
    for idle_ms in (2000, 6000, 15000):
        copied = read_committed(kafka_tools, target.bootstrap, sink, idle_ms=idle_ms)
        if len(copied) >= expected:
            break
    output = sequences(copied)
    for partition, values in acked.items():
        got = output[partition]
        repeated = [v for v, n in Counter(got).items() if n > 1]
        missing, unexpected = set(values) - set(got), set(got) - set(values)
        assert got == values, (
            f"partition {partition}: {len(repeated)} copied more than once (e.g. "
            f"{repeated[:3]}), {len(missing)} missing (e.g. {sorted(missing)[:3]}), "
            f"{len(unexpected)} never in the input, or out of order; faults: {done_faults}"
        )
    wait_for("the concurrent reader at the end", lambda: len(reader.seen) >= len(copied), 60)
    reader.stop()
    not_committed = {k: v for k, v in reader.seen.items() if copied.get(k) != v}
    assert not reader.conflicts and not not_committed, (
        f"read_committed saw, mid-copy, records that are not the committed output: "
        f"{list(not_committed.items())[:5]}, conflicts {reader.conflicts[:5]}"
    )
    check_group_at_end(kafka_tools, target.bootstrap, group, acked)
    if target.kayak is not None:
        segments = [
            len(list((target.kayak.data_dir / f"{sink}-{p}").glob("*.log")))
            for p in range(INPUT_PARTITIONS)
        ]
        assert min(segments) >= 3, f"the output's segments: {segments}"


def check_group_at_end(
    kafka_tools: KafkaTools, bootstrap: str, group: str, acked: Sequences
) -> None:
    """The copiers' committed offsets are the input's end offsets (lag 0 everywhere)."""
    described = kafka_tools.run(
        "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group
    ).stdout
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    ends = {p: len(values) for p, values in acked.items()}
    final = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows}
    assert final == {p: (end, end, 0) for p, end in ends.items()}, described


# -- kafka-transactions ---------------------------------------------------------------------

# A transactional producer in its own process: "open" leaves its transaction open (the
# process ends without committing or aborting), "commit" commits.
PRODUCER_SCRIPT = """
import os, sys
from confluent_kafka import Producer
bootstrap, transactional_id, topic, tag, end = sys.argv[1:]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 300000})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(3):
    producer.produce(topic, value=f"{tag}-{i}".encode(), partition=0)
assert producer.flush(30) == 0
if end == "commit":
    producer.commit_transaction(30)
else:
    os._exit(0)
"""


def transactional_producer(
    bootstrap: str, transactional_id: str, topic: str, tag: str, end: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRODUCER_SCRIPT, bootstrap, transactional_id, topic, tag, end],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def read_partition_committed(bootstrap: str, topic: str) -> list[str]:
    """The values a read_committed consumer (confluent-kafka's) reads from partition 0 up to
    its end for read_committed readers, the last stable offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                values.append((message.value() or b"").decode())
            elif error.code() == KafkaError._PARTITION_EOF:
                return values
            else:
                raise KafkaException(error)
    finally:
        consumer.close()
    raise AssertionError(f"{topic}-0 not read to its end in 30 s; read {values}")


def table(text: str) -> list[dict[str, str]]:
    """A kafka-transactions table (a header line, then rows; columns split on whitespace)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row, strict=False)) for row in rows]


def test_kafka_transactions_list_describe_abort_and_force_terminate(
    kafka_tools: KafkaTools, target: Target
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, hanging, later = f"hang-{suffix}", f"hanging-{suffix}", f"later-{suffix}"

    def run(*args: str) -> str:
        return kafka_tools.run(
            "kafka-transactions", "--bootstrap-server", target.bootstrap, *args
        ).stdout

    create_topic(target.bootstrap, topic, 1)
    transactional_producer(target.bootstrap, hanging, topic, "hanging", "open")
    transactional_producer(target.bootstrap, later, topic, "later", "commit")

    listed = {row["TransactionalId"]: row for row in table(run("list"))}
    assert listed[hanging]["TransactionState"] == "Ongoing", listed.get(hanging)
    assert listed[later]["TransactionState"] == "CompleteCommit", listed.get(later)
    (described,) = table(run("describe", "--transactional-id", hanging))
    assert described["TransactionState"] == "Ongoing", described
    assert described["TopicPartitions"] == f"{topic}-0", described
    producers = table(run("describe-producers", "--topic", topic, "--partition", "0"))
    open_ones = [p for p in producers if p["CurrentTransactionStartOffset"] != "None"]
    assert [p["CurrentTransactionStartOffset"] for p in open_ones] == ["0"], producers
    assert open_ones[0]["ProducerId"] == described["ProducerId"], (open_ones, described)
    # Young and known to its coordinator: not hanging yet.
    hanging_found = run("find-hanging", "--topic", topic)
    assert "StartOffset" in hanging_found and table(hanging_found) == [], hanging_found

    # The open transaction holds read_committed readers at its first offset: the committed
    # transaction after it is not visible yet.
    assert read_partition_committed(target.bootstrap, topic) == []
    run("abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    visible = read_partition_committed(target.bootstrap, topic)
    assert visible == [f"later-{i}" for i in range(3)], visible

    # forceTerminateTransaction (4.x): the coordinator aborts the transaction of a
    # transactional id whose producer is gone, bumping its epoch.
    forced = f"forced-{suffix}"
    transactional_producer(target.bootstrap, forced, topic, "forced", "open")
    run("forceTerminateTransaction", "--transactionalId", forced)
    (described,) = table(run("describe", "--transactional-id", forced))
    assert described["TransactionState"] in ("CompleteAbort", "Empty"), described
    assert int(described["ProducerEpoch"]) >= 1, described
    producers = table(run("describe-producers", "--topic", topic, "--partition", "0"))
    assert all(p["CurrentTransactionStartOffset"] == "None" for p in producers), producers
    assert read_partition_committed(target.bootstrap, topic) == visible
