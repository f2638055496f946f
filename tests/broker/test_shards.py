"""kayak broker --shards N: one cluster of N processes, partitions spread, moved, re-routed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kayak.protocol.messages import ProduceRequest
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"]).start()
    deadline = time.monotonic() + 30
    shards: dict[str, list[object]] = {}
    while time.monotonic() < deadline:
        path = broker.data_dir / "shards.json"
        if path.exists():
            shards = json.loads(path.read_text())["shards"]
            if len(shards) == 2:
                break
        time.sleep(0.05)
    assert len(shards) == 2, broker.log_text()[-2000:]
    addresses = [f"{shards[str(n)][0]}:{shards[str(n)][1]}" for n in range(2)]
    yield broker, addresses
    broker.stop()


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values()}


def read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    done: set[int] = set()
    deadline = time.monotonic() + 30
    while len(done) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
            else:
                values.append(msg.value())
    consumer.close()
    return values


def test_partitions_spread_over_shards_and_both_serve(
    cluster: tuple[BrokerProcess, list[str]],
) -> None:
    _, addresses = cluster
    create(addresses[1], "spread", 4)
    assert leaders(addresses[0], "spread") == {0: 0, 1: 1, 2: 0, 3: 1}
    meta = AdminClient({"bootstrap.servers": addresses[0]}).list_topics(timeout=10)
    assert sorted(meta.brokers) == [0, 1]
    assert len({b.port for b in meta.brokers.values()}) == 2

    producer = Producer({"bootstrap.servers": addresses[0], "enable.idempotence": True})
    for i in range(400):
        producer.produce("spread", value=b"v%d" % i, partition=i % 4)
    assert producer.flush(20) == 0
    assert sorted(read_all(addresses[0], "spread", 4)) == sorted(b"v%d" % i for i in range(400))

    # the wrong shard refuses with NOT_LEADER_OR_FOLLOWER
    wire = WireClient(addresses[1])
    data = TopicProduceData("spread", [PartitionProduceData(0, build_record_batch([b"x"]))])
    response = wire.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data]), 9)
    assert response.responses[0].partition_responses[0].error_code == 6  # type: ignore[attr-defined]


def test_moving_a_partition_mid_produce_loses_and_duplicates_nothing(
    cluster: tuple[BrokerProcess, list[str]],
) -> None:
    broker, addresses = cluster
    create(addresses[0], "moving", 2)
    producer = Producer(
        {
            "bootstrap.servers": addresses[0],
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60_000,
        }
    )
    acked: list[bytes] = []
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce(
                    "moving",
                    value=b"m%06d" % i,
                    partition=0,
                    on_delivery=lambda e, m: e is None and acked.append(m.value()),
                )
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
            time.sleep(0.0005)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(1.0)
    moved = subprocess.run(
        [sys.executable, "-m", "kayak", "partitions", "move", "moving", "0", "--to", "1",
         "--data-dir", str(broker.data_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    time.sleep(1.5)
    stop.set()
    worker.join()
    assert producer.flush(60) == 0
    assert leaders(addresses[0], "moving")[0] == 1
    values = read_all(addresses[1], "moving", 2)
    assert len(values) == len(set(values)), "a record was stored twice"
    assert set(acked) <= set(values)
    assert values == sorted(values), "records were reordered across the move"
    assert len(acked) > 100


def test_move_cli_errors_clearly(cluster: tuple[BrokerProcess, list[str]]) -> None:
    broker, _ = cluster
    result = subprocess.run(
        [sys.executable, "-m", "kayak", "partitions", "move", "nope", "0", "--to", "1",
         "--data-dir", str(broker.data_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "nope-0 does not exist" in result.stderr
    assert result.stderr.strip().count("\n") <= 1
