"""10,000 partitions holding data survive a restart under ``ulimit -n 1024``.

The broker keeps a bounded set of segment files open (an LRU of descriptors; a fetch in
flight pins the files it reads), so the number of descriptors does not grow with the number
of partitions: the real ``kayak broker`` process is restarted with a soft limit of 1024
descriptors, reads back every partition in one Fetch (10,000 slices in one response), takes
one more record in every partition, and stays under the limit throughout.

The broker runs with ``--flush never`` and is stopped with SIGKILL: 10,000 fsyncs per round
would only make the test slow, and the page cache keeps what a killed process wrote, so the
restart recovers (CRC-scans) the last segment of every partition, under the limit too.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kayak.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, iter_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

TOPICS, PARTITIONS = 10, 1000  # 10,000 partitions
FD_LIMIT = 1024
PRODUCE_V, FETCH_V, CREATE_TOPICS_V = 9, 12, 5


def topic_name(t: int) -> str:
    return f"many-{t:02d}"


def value(topic: str, partition: int, round_: int) -> bytes:
    return f"{topic}/{partition}/{round_}".encode()


def create_topics(wire: WireClient) -> None:
    topics = [CreatableTopic(topic_name(t), PARTITIONS, 1) for t in range(TOPICS)]
    response: Any = wire.request(CreateTopicsRequest(topics=topics, timeout_ms=60_000),
                                 CREATE_TOPICS_V)  # fmt: skip
    for result in response.topics:
        assert result.error_code == 0, f"create {result.name}: {result.error_message}"


def produce_everywhere(wire: WireClient, round_: int) -> None:
    """One record into every partition, one acks=all Produce per topic."""
    for t in range(TOPICS):
        name = topic_name(t)
        data = [
            PartitionProduceData(p, build_record_batch([value(name, p, round_)]))
            for p in range(PARTITIONS)
        ]
        request = ProduceRequest(acks=-1, timeout_ms=30_000,
                                 topic_data=[TopicProduceData(name, data)])  # fmt: skip
        response: Any = wire.request(request, PRODUCE_V)
        for answer in response.responses[0].partition_responses:
            assert answer.error_code == 0, f"produce {name}-{answer.index}: {answer.error_code}"
            assert answer.base_offset == round_, f"{name}-{answer.index} at {answer.base_offset}"


def read_everything(wire: WireClient, rounds: int) -> None:
    """One Fetch of all 10,000 partitions from offset 0; every record checked."""
    topics = [
        FetchTopic(
            topic=topic_name(t),
            partitions=[
                FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 16)
                for p in range(PARTITIONS)
            ],
        )
        for t in range(TOPICS)
    ]
    request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=256 << 20, topics=topics)
    response: Any = wire.request(request, FETCH_V)
    seen = 0
    for topic in response.responses:
        for data in topic.partitions:
            where = f"{topic.topic}-{data.partition_index}"
            assert data.error_code == 0, f"fetch {where}: {data.error_code}"
            records = [
                (r.offset, r.value)
                for batch in iter_batches(bytes(data.records or b""), check_crc=True)
                for r in batch
            ]
            expected = [(i, value(topic.topic, data.partition_index, i)) for i in range(rounds)]
            assert records == expected, f"{where}: {records}"
            seen += 1
    assert seen == TOPICS * PARTITIONS


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_with_fd_limit(broker: BrokerProcess, limit: int) -> None:
    """Start the broker with a soft RLIMIT_NOFILE of ``limit`` (what ``ulimit -n`` sets)."""
    broker.fd_limit = limit
    try:
        broker.start(timeout=120)
    finally:
        broker.fd_limit = None


@pytest.mark.timeout(300)
def test_ten_thousand_partitions_restart_and_read_under_ulimit_1024(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--flush", "never"]).start()
    try:
        wire = WireClient(broker.bootstrap_servers, timeout=120)
        create_topics(wire)
        produce_everywhere(wire, 0)
        wire.close()
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

        start_with_fd_limit(broker, FD_LIMIT)
        assert broker.process is not None
        pid = broker.process.pid
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert any(
            line.startswith("Max open files") and line.split()[3] == str(FD_LIMIT)
            for line in limits.splitlines()
        ), limits
        after_start = open_descriptors(pid)
        assert after_start < FD_LIMIT // 2, f"{after_start} descriptors open after the start"

        wire = WireClient(broker.bootstrap_servers, timeout=120)
        read_everything(wire, rounds=1)
        produce_everywhere(wire, 1)  # every active segment written again, under the limit
        read_everything(wire, rounds=2)
        wire.close()
        after_reads = open_descriptors(pid)
        assert after_reads < FD_LIMIT, f"{after_reads} descriptors open after the reads"
        assert "Too many open files" not in broker.log_text()
    finally:
        if broker.process is not None:
            broker.stop(signal.SIGKILL)
