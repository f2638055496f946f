"""A partition whose newest data is gone never starts short, silently.

Real broker processes, records produced with confluent-kafka (acks=all) across several 1 MiB
segments, a clean stop (SIGTERM) or a crash (kill -9), then the files a partial restore or an
operator's mistake leaves: the newest ``.log`` removed, cut mid-batch, cut at a batch
boundary, the two newest segments gone. The restart takes that partition offline
(KAFKA_STORAGE_ERROR, as a gap in the middle does) with one error line naming it and both
ends, serves every other partition, changes no file, and ``kayak log verify`` reports it.
A removed ``.index`` is no loss: indexes are rebuilt and the partition serves everything.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as ClientError

from kayak.broker.log.loader import LOG_END_INTERVAL_S
from kayak.protocol.records import scan_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    LATEST,
    STORAGE_ERROR,
    fetch,
    list_offset,
    one_batch,
    produce,
)
from tests.broker.wire import WireClient

SEGMENT_BYTES = 1 << 20
RECORDS = 10_000  # of ~300 B: four segments, three sealed
VALUE_BYTES = 300

# A damage: (data dir, topic) -> the offset the damaged log now ends at.
Damage = Callable[[Path, str], int]


def value(topic: str, offset: int) -> bytes:
    head = b"%s-%06d-" % (topic.encode(), offset)
    return head + b"v" * (VALUE_BYTES - len(head))


def produce_all(bootstrap: str, topics: list[str], count: int) -> None:
    """``count`` records to partition 0 of each topic with confluent-kafka, acks=all; each
    must be acknowledged at the offset its value names."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    failures: list[str] = []

    def delivered(err: ClientError | None, msg: Any) -> None:
        expected = int(msg.value().split(b"-")[-2])
        if err is not None or msg.offset() != expected:
            failures.append(f"{msg.topic()}: {err} at {msg.offset()}, expected {expected}")

    for topic in topics:
        for offset in range(count):
            producer.produce(topic, value(topic, offset), partition=0, on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(120) == 0, "delivery reports missing"
    assert failures == [], failures[:5]


def partition_dir(data_dir: Path, topic: str) -> Path:
    return data_dir / f"{topic}-0"


def logs(data_dir: Path, topic: str) -> list[Path]:
    return sorted(partition_dir(data_dir, topic).glob("*.log"))


def listing(directory: Path) -> dict[str, bytes]:
    """Every file of a partition directory with its bytes."""
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


# -- what a partial restore or a mistake leaves --------------------------------------------


def remove_newest_log(data_dir: Path, topic: str) -> int:
    newest = logs(data_dir, topic)[-1]
    newest.unlink()
    return int(newest.stem)


def remove_last_two_segments(data_dir: Path, topic: str) -> int:
    second, newest = logs(data_dir, topic)[-2:]
    for segment in (second, newest):
        for suffix in (".log", ".index", ".timeindex"):
            segment.with_suffix(suffix).unlink(missing_ok=True)
    return int(second.stem)


def cut_newest_mid_batch(data_dir: Path, topic: str) -> int:
    newest = logs(data_dir, topic)[-1]
    headers = list(scan_batches(newest.read_bytes()))
    middle = headers[len(headers) // 2]
    os.truncate(newest, middle.position + 40)
    return middle.base_offset


def cut_newest_at_a_batch(data_dir: Path, topic: str) -> int:
    """What is left is a valid log, only shorter: nothing but the record can tell."""
    newest = logs(data_dir, topic)[-1]
    headers = list(scan_batches(newest.read_bytes()))
    middle = headers[len(headers) // 2]
    os.truncate(newest, middle.position)
    return middle.base_offset


def remove_indexes(data_dir: Path, topic: str) -> int:
    """The newest segment's indexes and an older one's: rebuilt, nothing is missing."""
    segments = logs(data_dir, topic)
    segments[-1].with_suffix(".index").unlink()
    segments[-1].with_suffix(".timeindex").unlink()
    segments[1].with_suffix(".index").unlink()
    return -1


# -- the broker around them ----------------------------------------------------------------


@dataclass
class Restarted:
    broker: BrokerProcess
    log_mark: int
    ends: dict[str, int]  # damaged topic -> where its log now ends
    files: dict[str, dict[str, bytes]]  # damaged topic -> its files after the damage

    def new_log(self) -> str:
        return self.broker.log_text()[self.log_mark :]


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for broker in started:
        if broker.process is not None:
            broker.stop(signal.SIGKILL)


def start_broker(tmp_path: Path, brokers: list[BrokerProcess]) -> BrokerProcess:
    broker = BrokerProcess(tmp_path / "data", ["--flush", "group"])
    brokers.append(broker)
    broker.start()
    return broker


def damage_and_restart(
    broker: BrokerProcess, stop: int, damage: dict[str, Damage], untouched: list[str]
) -> Restarted:
    config = {"segment.bytes": str(SEGMENT_BYTES)}
    topics = [*damage, *untouched]
    for topic in topics:
        create_topic(broker.bootstrap_servers, topic, configs=config)
    produce_all(broker.bootstrap_servers, topics, RECORDS)
    if stop == signal.SIGKILL:
        # The durable offset is recorded at most every LOG_END_INTERVAL_S: one more
        # acknowledged record after that long is recorded, and so every one before it.
        time.sleep(LOG_END_INTERVAL_S + 0.5)
        wire = WireClient(broker.bootstrap_servers)
        for topic in topics:
            result = produce(wire, topic, one_batch(value(topic, RECORDS)))
            assert (result.error_code, result.base_offset) == (0, RECORDS), result
        wire.close()
    for topic in topics:
        assert len(logs(broker.data_dir, topic)) >= 4, f"{topic}: too few segments"
    assert broker.stop(stop) == (0 if stop == signal.SIGTERM else -stop)
    ends = {topic: spoil(broker.data_dir, topic) for topic, spoil in damage.items()}
    files = {topic: listing(partition_dir(broker.data_dir, topic)) for topic in damage}
    mark = len(broker.log_text())
    broker.start()
    return Restarted(broker, mark, ends, files)


def check_offline(restarted: Restarted, topic: str, reached: int) -> None:
    """One error line names the partition and both ends; every request for it is refused
    with KAFKA_STORAGE_ERROR."""
    found = restarted.ends[topic]
    lines = [line for line in restarted.new_log().splitlines() if f"{topic}-0" in line]
    errors = [line for line in lines if " ERROR " in line]
    assert len(errors) == 1, f"{topic}: expected one error line: {lines}"
    assert "partition offline" in errors[0], errors[0]
    assert f"the log ends at offset {found}, but reached offset {reached}" in errors[0], errors[0]
    assert re.search(r"\d{20}\.log", errors[0]), f"no segment file named: {errors[0]}"
    wire = WireClient(restarted.broker.bootstrap_servers)
    try:
        assert produce(wire, topic, one_batch(b"late")).error_code == STORAGE_ERROR
        for offset in (0, found - 1, found):
            assert fetch(wire, topic, offset).error_code == STORAGE_ERROR, f"{topic}@{offset}"
        assert list_offset(wire, topic, LATEST)[0] == STORAGE_ERROR
    finally:
        wire.close()


def consume(bootstrap: str, serving: dict[str, int], offline: list[str]) -> dict[str, Any]:
    """Read every topic from offset 0 with confluent-kafka until each serving one reports its
    end, and two seconds more: what each topic delivered (records, and whether it ended)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "missing-tail-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
            "log_level": 2,
        }
    )
    topics = [*serving, *offline]
    consumer.assign([TopicPartition(topic, 0, 0) for topic in topics])
    seen: dict[str, Any] = {topic: {"values": [], "ended": False} for topic in topics}
    deadline = time.monotonic() + 90
    grace: float | None = None
    try:
        while time.monotonic() < (grace or deadline):
            for msg in consumer.consume(1000, 0.5):
                topic, error = msg.topic(), msg.error()
                if error is None:
                    seen[topic]["values"].append(msg.value())
                elif error.code() == ClientError._PARTITION_EOF:
                    seen[topic]["ended"] = True
            if grace is None and all(seen[topic]["ended"] for topic in serving):
                grace = time.monotonic() + 2
    finally:
        consumer.close()
    return seen


def check_serving(restarted: Restarted, serving: dict[str, int], offline: list[str]) -> None:
    """Every other partition serves every record and takes appends; the offline ones give a
    consumer no record."""
    seen = consume(restarted.broker.bootstrap_servers, serving, offline)
    for topic, count in serving.items():
        assert seen[topic]["values"] == [value(topic, i) for i in range(count)], topic
    for topic in offline:
        assert seen[topic]["values"] == [], f"{topic}: a consumer read it"
    wire = WireClient(restarted.broker.bootstrap_servers)
    try:
        for topic, count in serving.items():
            result = produce(wire, topic, one_batch(b"after-restart"))
            assert (result.error_code, result.base_offset) == (0, count), result
    finally:
        wire.close()


def check_files_unchanged(restarted: Restarted) -> None:
    for topic, files in restarted.files.items():
        now = listing(partition_dir(restarted.broker.data_dir, topic))
        assert now.keys() == files.keys(), f"{topic}: files added or removed"
        changed = [name for name in files if files[name] != now[name]]
        assert changed == [], f"{topic}: rewritten: {changed}"


def kayak_log_verify(data_dir: Path, topic: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kayak", "log", "verify", "--topic", topic, str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )


def check_verify(data_dir: Path, topic: str, found: int, reached: int) -> None:
    result = kayak_log_verify(data_dir, topic)
    assert result.returncode == 1, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert f"the log ends at offset {found}, but reached offset {reached}" in text, text
    assert text.count(" missing") == 1, text  # one line for it (a cut file: the torn one)


# -- the tests -----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_clean_stop_then_missing_newest_data_keeps_the_partition_offline(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    damage: dict[str, Damage] = {
        "newest-removed": remove_newest_log,
        "last-two-removed": remove_last_two_segments,
        "newest-cut-mid-batch": cut_newest_mid_batch,
        "newest-cut-at-a-batch": cut_newest_at_a_batch,
    }
    broker = start_broker(tmp_path, brokers)
    restarted = damage_and_restart(broker, signal.SIGTERM, damage, ["indexes-removed", "healthy"])
    for topic in damage:
        check_offline(restarted, topic, RECORDS)
    check_serving(restarted, {"indexes-removed": RECORDS, "healthy": RECORDS}, list(damage))
    check_files_unchanged(restarted)
    broker.stop(signal.SIGTERM)
    check_files_unchanged(restarted)
    for topic in damage:
        check_verify(broker.data_dir, topic, restarted.ends[topic], RECORDS)
    for topic in ("indexes-removed", "healthy"):
        result = kayak_log_verify(broker.data_dir, topic)
        assert result.returncode == 0, result.stdout + result.stderr
    # It stays offline, and the same, however often the broker starts.
    again = Restarted(broker, len(broker.log_text()), restarted.ends, restarted.files)
    broker.start()
    check_offline(again, "newest-removed", RECORDS)
    check_files_unchanged(again)


@pytest.mark.timeout(300)
def test_after_kill_9_data_missing_below_the_durable_offset_keeps_the_partition_offline(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    """After a crash the record is a lower bound: the durable offset of a recent checkpoint.
    A log that ends before it lost records that were on disk and acknowledged; a cut file is
    not mistaken for a torn write and cut further."""
    damage: dict[str, Damage] = {
        "crash-newest-removed": remove_newest_log,
        "crash-newest-cut": cut_newest_mid_batch,
    }
    broker = start_broker(tmp_path, brokers)
    restarted = damage_and_restart(broker, signal.SIGKILL, damage, ["crash-healthy"])
    for topic in damage:
        check_offline(restarted, topic, RECORDS + 1)
    check_serving(restarted, {"crash-healthy": RECORDS + 1}, list(damage))
    check_files_unchanged(restarted)
    broker.stop(signal.SIGTERM)
    check_files_unchanged(restarted)
    for topic in damage:
        check_verify(broker.data_dir, topic, restarted.ends[topic], RECORDS + 1)
