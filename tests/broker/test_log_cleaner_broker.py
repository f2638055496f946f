"""The log cleaner in a real broker process: a compacted topic updated many times per key is
read back by librdkafka (confluent-kafka), Kafka's Java console consumer and kayak's own
consumer with only each key's latest value, at its original offset; and ``kill -9`` at every
step of a segment swap leaves a log that ``kayak log verify`` finds clean and that serves
every key's latest value."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kayak.broker.log.cleaner import swap
from kayak.client.sync import Consumer as KayakConsumer
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.fixtures.jvm import KafkaTools

KEYS, ROUNDS = 30, 12
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
}
Latest = dict[bytes, tuple[int, bytes]]  # key -> (offset, value)


def produce_updates(
    bootstrap: str, topic: str, rounds: int = ROUNDS, pause: float = 0.35
) -> Latest:
    """``rounds`` updates of every key, pausing between rounds so segments roll; returns
    each key's latest (offset, value) as the delivery reports gave them."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    latest: Latest = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        key = msg.key()
        if key not in latest or latest[key][0] < msg.offset():
            latest[key] = (msg.offset(), msg.value())

    for r in range(rounds):
        for k in range(KEYS):
            producer.produce(topic, key=b"key-%02d" % k, value=b"round-%02d-" % r + b"x" * 200,
                             partition=0, on_delivery=delivered)  # fmt: skip
        assert producer.flush(30) == 0
        time.sleep(pause)
    return latest


def confluent_read(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Everything from the beginning to the high watermark: (offset, key, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False, "check.crcs": True})  # fmt: skip
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        read: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 30
        position = 0
        while position < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                position = consumer.position([TopicPartition(topic, 0)])[0].offset
                continue
            assert msg.error() is None, msg.error()
            read.append((msg.offset(), msg.key(), msg.value()))
            position = msg.offset() + 1
        assert position >= high, f"stuck at {position} of {high}"
        return read
    finally:
        consumer.close()


def kayak_read(bootstrap: str, topic: str) -> Latest:
    """What kayak's own (sync) consumer reads of ``topic``: key -> (offset, value)."""
    consumer = KayakConsumer(bootstrap_servers=bootstrap, group_id=f"kayak-{time.time()}",
                             auto_offset_reset="earliest")  # fmt: skip
    try:
        consumer.subscribe([topic])
        read: Latest = {}
        deadline = time.monotonic() + 30
        while len(read) < KEYS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    assert r.key is not None and r.value is not None
                    assert r.key not in read, f"{r.key!r} read twice"
                    read[r.key] = (r.offset, r.value)
        return read
    finally:
        consumer.close()


def wait_for(what: str, check: Callable[[], bool], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def as_latest(read: list[tuple[int, bytes, bytes]]) -> Latest:
    return {key: (offset, value) for offset, key, value in read}


def verify_data_dir(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kayak", "log", "verify", str(data_dir)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.timeout(300)
def test_librdkafka_and_the_java_consumer_read_only_latest_values(
    tmp_path: Path, kafka_tools: KafkaTools
) -> None:
    broker = BrokerProcess(tmp_path / "data", ["--log-cleaner-backoff-ms", "200"]).start()
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "changes", configs=COMPACTED)
        latest = produce_updates(bootstrap, "changes")
        wait_for("the topic compacted to one record per key",
                 lambda: len(confluent_read(bootstrap, "changes")) == KEYS)  # fmt: skip
        read = confluent_read(bootstrap, "changes")
        assert as_latest(read) == latest and len(read) == KEYS
        assert [offset for offset, _, _ in read] == sorted(offset for offset, _ in latest.values())

        done = kafka_tools.run(
            "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", "changes",
            "--from-beginning", "--max-messages", str(KEYS), "--timeout-ms", "30000",
            "--formatter-property", "print.offset=true",
            "--formatter-property", "print.key=true",
        )  # fmt: skip
        java = {}
        for line in done.stdout.splitlines():
            found = re.match(r"Offset:(\d+)\s+(\S+)\s+(\S+)$", line)
            assert found is not None, line
            java[found[2].encode()] = (int(found[1]), found[3].encode())
        assert java == latest
        assert kayak_read(bootstrap, "changes") == latest
    finally:
        broker.stop()
    verified = verify_data_dir(broker.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.timeout(240)
@pytest.mark.parametrize("step", swap.STEPS)
def test_kill_9_at_each_step_of_a_swap(
    tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(swap.CRASH_ENV, step)
    broker = BrokerProcess(tmp_path / "data", ["--log-cleaner-backoff-ms", "200"]).start()
    assert broker.process is not None
    bootstrap = broker.bootstrap_servers
    # min.compaction.lag.ms: no cleaning (and so no kill) before every update is acknowledged
    create_topic(bootstrap, "changes", configs={**COMPACTED, "min.compaction.lag.ms": "6000"})
    latest = produce_updates(bootstrap, "changes", rounds=6, pause=0.2)
    code = broker.process.wait(60)  # the cleaner's first swap kills the broker at ``step``
    assert code == -signal.SIGKILL, broker.log_text()[-3000:]
    broker.process = None
    monkeypatch.delenv(swap.CRASH_ENV)
    broker.start()
    try:
        read = confluent_read(broker.bootstrap_servers, "changes")
        assert as_latest(read) == latest
    finally:
        broker.stop()
    verified = verify_data_dir(broker.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    leftovers = [p.name for p in (broker.data_dir / "changes-0").iterdir()
                 if p.name.endswith((".cleaned", ".swap"))]  # fmt: skip
    assert not leftovers
