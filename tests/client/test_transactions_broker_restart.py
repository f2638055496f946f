"""A transactional producer rides through its broker's restart (kill -9, same port).

The partition of a new transaction is registered with the coordinator in the background
(AddPartitionsToTxn); while the broker is down that request cannot connect. Java's producer
retries it until the coordinator is back, and so must kayak's: a capture publishing in Kafka
transactions would otherwise die with every broker restart. The records sent while the broker
was down are committed with the transaction once it is back, and read_committed sees exactly
the committed ones.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from kayak.client import sync
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes | None]:
    consumer = sync.Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
         "auto.offset.reset": "earliest", "group.id": "restart-check"},
    )  # fmt: skip
    values: list[bytes | None] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(0.5).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    return values


def test_a_transaction_commits_across_a_broker_kill_and_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    producer = sync.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "restarting",
         "delivery.timeout.ms": 60_000},
    )  # fmt: skip
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"before")
        producer.commit_transaction()
        broker.stop(signal.SIGKILL)
        producer.begin_transaction()
        # The broker is back a second later, while AddPartitionsToTxn keeps failing to connect.
        restart = threading.Timer(1.0, broker.restart)
        restart.start()
        producer.send("t", b"during")
        restart.join()
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("t", b"after")
        producer.commit_transaction()
        assert _read_committed(broker.bootstrap_servers, "t", 3) == [b"before", b"during", b"after"]
    finally:
        producer.close()
        if broker.process is not None:
            broker.stop()
