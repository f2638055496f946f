"""kill -9 during an acks=all idempotent produce load loses nothing that was acknowledged."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from kayak.protocol.messages import CreateTopicsRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic
from tests.broker.confluent_support import (
    Acked,
    idempotent_producer,
    read_topic_to_end,
    record_deliveries,
)
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

TOPIC, PARTITIONS, ROUNDS = "durable", 3, 3


def produce_until(
    p: Producer,
    tag: str,
    stop: threading.Event,
    acked: list[Acked],
    failed: list[str],
) -> None:
    delivered = record_deliveries(acked, failed)
    i = 0
    while not stop.is_set():
        try:
            p.produce(
                TOPIC,
                key=b"%d" % (i % 17),
                value=b"%s-%08d" % (tag.encode(), i),
                on_delivery=delivered,
            )
            i += 1
        except BufferError:
            p.poll(0.01)
        p.poll(0)


def read_log(bootstrap: str) -> dict[int, dict[int, bytes | None]]:
    read = read_topic_to_end(bootstrap, TOPIC, PARTITIONS)
    return {partition: dict(records) for partition, records in read.records.items()}


@pytest.mark.timeout(300)
def test_kill_9_loses_no_acknowledged_record(broker_process: BrokerProcess) -> None:
    wire = WireClient(broker_process.bootstrap_servers)
    create = CreateTopicsRequest(topics=[CreatableTopic(TOPIC, PARTITIONS, 1)])
    assert wire.request(create, 5).topics[0].error_code == 0  # type: ignore[attr-defined]
    wire.close()

    acked: list[Acked] = []
    failed: list[str] = []
    for round_number in range(ROUNDS):
        p = idempotent_producer(broker_process.bootstrap_servers, linger_ms=2)
        stop = threading.Event()
        worker = threading.Thread(
            target=produce_until, args=(p, f"r{round_number}", stop, acked, failed)
        )
        worker.start()
        before = len(acked)
        deadline = time.monotonic() + 20
        while len(acked) - before < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker_process.stop(signal.SIGKILL) == -signal.SIGKILL
        time.sleep(0.3)
        broker_process.restart()
        time.sleep(0.5)
        stop.set()
        worker.join()
        assert p.flush(90) == 0, "records still undelivered after the restart"
    assert not failed, f"deliveries failed: {failed[:3]}"

    log = read_log(broker_process.bootstrap_servers)
    for partition, offset, value in acked:
        assert log[partition].get(offset) == value, (
            f"acked {value!r} missing at {partition}/{offset}"
        )
    stored = [v for part in log.values() for v in part.values()]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    for part in log.values():
        for tag in (f"r{r}".encode() for r in range(ROUNDS)):
            sequence = [v for _, v in sorted(part.items()) if v.startswith(tag + b"-")]
            assert sequence == sorted(sequence), "records were reordered"
    assert len(acked) >= ROUNDS * 2000
    assert broker_process.log_text().count("unclean start") >= ROUNDS
