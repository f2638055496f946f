"""The Java client against kayak, checked the way Kafka's own system tests check delivery:
``VerifiableProducer`` (idempotent, acks=all) and a group of three ``VerifiableConsumer``s
with the cooperative-sticky assignor print one JSON event per line, and the test reads them.

While the producer writes enough to roll every partition's 1 MiB segments several times, a
third consumer joins, the first leaves, and the broker is killed with SIGKILL and restarted
on the same port and data directory. Then: every acknowledged record
(``producer_send_success``) was consumed, at its acknowledged partition and offset with its
value; no record is in the log twice; committed offsets (``offsets_committed``) never went
back; the group's final offsets are the last commits the broker acknowledged, beside the
partitions' log end offsets (``kafka-consumer-groups``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import KafkaTools, write_properties

pytestmark = pytest.mark.timeout(420)

TOPIC, GROUP, PARTITIONS = "verified", "verifiers", 3
MESSAGES = 420_000  # ~19 B a record (key 0..99999, value its number): 2.6 MB a partition
THROUGHPUT = 30_000  # records/s: the run lasts long enough for the joins, leaves and kill
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@dataclass
class EventLog:
    """A Verifiable tool's output file, read incrementally: one JSON event per line."""

    path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    _position: int = 0

    def read(self) -> list[dict[str, Any]]:
        """Parse the lines written since the last call; return the new events."""
        with open(self.path, "rb") as f:
            f.seek(self._position)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._position += len(complete)
        new = [json.loads(line) for line in complete.splitlines() if line.startswith(b"{")]
        self.events.extend(new)
        return new

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["name"] == name]


@dataclass
class Tool:
    """One Verifiable tool process and its events."""

    process: subprocess.Popen[bytes]
    log: EventLog

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
        self.process.wait(timeout)
        self.log.read()


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    running = BrokerProcess(tmp_path / "data").start()
    yield running
    if running.process is not None:
        running.stop()


@pytest.fixture
def tools() -> Iterator[list[Tool]]:
    """Every tool a test starts; whatever is still running at the end is killed."""
    started: list[Tool] = []
    yield started
    for tool in started:
        if tool.process.poll() is None:
            tool.stop(signal.SIGKILL)


def start_consumer(
    kafka_tools: KafkaTools, broker: BrokerProcess, directory: Path, name: str, tools: list[Tool]
) -> Tool:
    config = write_properties(directory / "consumer.properties", {"heartbeat.interval.ms": 1000})
    log = directory / f"{name}.log"
    process = kafka_tools.start(
        "kafka-verifiable-consumer", "--bootstrap-server", broker.bootstrap_servers,
        "--topic", TOPIC, "--group-id", GROUP, "--verbose", "--session-timeout", "10000",
        "--assignment-strategy", COOPERATIVE, "--command-config", str(config), log=log,
    )  # fmt: skip
    tools.append(Tool(process, EventLog(log)))
    return tools[-1]


def acked_records(producer: EventLog) -> dict[tuple[int, int], str]:
    return {
        (e["partition"], e["offset"]): e["value"] for e in producer.named("producer_send_success")
    }


def consumed_records(consumers: list[Tool]) -> dict[tuple[int, int], set[str]]:
    seen: dict[tuple[int, int], set[str]] = defaultdict(set)
    for consumer in consumers:
        for e in consumer.log.named("record_data"):
            seen[(e["partition"], e["offset"])].add(e["value"])
    return seen


def test_every_acknowledged_record_is_consumed_across_a_broker_kill(
    kafka_tools: KafkaTools, broker: BrokerProcess, tmp_path: Path, tools: list[Tool]
) -> None:
    bootstrap = broker.bootstrap_servers
    kafka_tools.run(
        "kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
        "--partitions", str(PARTITIONS), "--config", "segment.bytes=1048576",
    )  # fmt: skip
    first, second = (start_consumer(kafka_tools, broker, tmp_path, n, tools) for n in ("c1", "c2"))
    wait_for("two consumers assigned", lambda: all(
        c.log.read() is not None and c.log.named("partitions_assigned") for c in (first, second)
    ))  # fmt: skip

    producer_config = write_properties(
        tmp_path / "producer.properties",
        # VerifiableProducer sets retries=0 unless told: idempotence needs retries.
        {
            "enable.idempotence": "true",
            "acks": "all",
            "retries": 2147483647,
            "delivery.timeout.ms": 180000,
        },
    )
    producer_args = (
        "--bootstrap-server", bootstrap, "--topic", TOPIC, "--max-messages", str(MESSAGES),
        "--throughput", str(THROUGHPUT), "--acks", "-1", "--repeating-keys", "100000",
        "--command-config", str(producer_config),
    )  # fmt: skip
    log = tmp_path / "producer.log"
    producer = Tool(
        kafka_tools.start("kafka-verifiable-producer", *producer_args, log=log), EventLog(log)
    )
    tools.append(producer)

    def acked_at_least(fraction: float) -> Callable[[], bool]:
        def reached() -> bool:
            producer.log.read()
            return len(producer.log.named("producer_send_success")) >= fraction * MESSAGES

        return reached

    wait_for("a fifth acknowledged", acked_at_least(0.2))
    third = start_consumer(kafka_tools, broker, tmp_path, "c3", tools)  # joins
    wait_for("two fifths acknowledged", acked_at_least(0.4))
    first.stop()  # leaves the group cleanly
    wait_for("over half acknowledged", acked_at_least(0.55))
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    broker.restart()
    assert broker.bootstrap_servers == bootstrap  # the same port and data directory

    assert producer.process.wait(300) == 0, producer.log.path.read_text()[-3000:]
    producer.log.read()
    assert not producer.log.named("producer_send_error")
    (summary,) = producer.log.named("tool_data")
    assert summary["sent"] == summary["acked"] == MESSAGES
    acked = acked_records(producer.log)
    assert len(acked) == MESSAGES  # each acknowledged at its own offset

    consumers = [first, second, third]
    live = [second, third]

    def everything_consumed() -> bool:
        for consumer in live:
            consumer.log.read()
        seen = consumed_records(consumers)
        return all(key in seen for key in acked)

    wait_for("every acknowledged record consumed", everything_consumed, timeout=180)
    # While the two remaining members are running, the group is described as Kafka would.
    state = kafka_tools.run("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                            "--describe", "--group", GROUP, "--state").stdout  # fmt: skip
    assert "cooperative-sticky" in state and "Stable" in state, state
    for consumer in live:
        consumer.stop()

    seen = consumed_records(consumers)
    wrong = {key: (value, seen[key]) for key, value in acked.items() if seen[key] != {value}}
    assert not wrong, f"{len(wrong)} records differ, e.g. {list(wrong.items())[:5]}"
    values = [v for values in seen.values() for v in values]
    assert len(values) == len(set(values)) == MESSAGES, "a record is in the log twice"
    assert third.log.named("partitions_assigned"), "the joining consumer got no partition"

    last_commits = check_commits_never_go_back(consumers)
    check_final_offsets(kafka_tools, bootstrap, acked, last_commits)
    segments = {
        p: sorted((broker.data_dir / f"{TOPIC}-{p}").glob("*.log")) for p in range(PARTITIONS)
    }
    assert all(len(files) >= 3 for files in segments.values()), segments


def check_commits_never_go_back(consumers: list[Tool]) -> dict[int, int]:
    """Every acknowledged commit, in time order, never goes below one before it; returns the
    last acknowledged commit of each partition."""
    commits = sorted(
        (e["timestamp"], o["partition"], o["offset"])
        for consumer in consumers
        for e in consumer.log.named("offsets_committed")
        if e["success"]
        for o in e["offsets"]
    )
    assert commits
    highest: dict[int, int] = {}
    for timestamp, partition, offset in commits:
        assert offset >= highest.get(partition, 0), (
            f"partition {partition}: committed {offset} at {timestamp} after {highest[partition]}"
        )
        highest[partition] = offset
    return highest


def check_final_offsets(
    kafka_tools: KafkaTools, bootstrap: str, acked: dict[tuple[int, int], str],
    last_commits: dict[int, int],
) -> None:  # fmt: skip
    """The group's committed offsets are the last commits the broker acknowledged, and its
    log end offsets the partitions' ends. (A consumer's last commits may be refused while it
    rebalances: the Java consumer then reads on to the end and has nothing left to commit
    after it, which is why the last acknowledged commit, not the end, is expected.)"""
    described = kafka_tools.run("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                                "--describe", "--group", GROUP).stdout  # fmt: skip
    rows = [line.split() for line in described.splitlines() if line.startswith(GROUP)]
    ends = {p: 1 + max(o for q, o in acked if q == p) for p in range(PARTITIONS)}
    final = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows}
    expected = {p: (last_commits[p], end, end - last_commits[p]) for p, end in ends.items()}
    assert final == expected, described
