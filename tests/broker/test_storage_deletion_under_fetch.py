"""Storage faults: a segment deleted (by DeleteRecords or retention) while fetches still hold
slices of it. A slice keeps reading the deleted segment's own bytes, never those of a file
that took its descriptor; a fetch answers its partition's own records or OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.log import LogConfig, PartitionLog
from kayak.errors import KafkaError
from kayak.protocol import ClientConnection, Message
from kayak.protocol.records import build_record_batch, iter_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    EARLIEST,
    FETCH_V,
    FIRST_SEGMENT,
    LATEST,
    OUT_OF_RANGE,
    decode,
    delete_records,
    fetch_request,
    list_offset,
    produce,
)
from tests.broker.wire import WireClient

SEGMENT_BYTES = 1 << 20  # the smallest segment.bytes a broker accepts (KIP-1030)


def a_value(offset: int) -> bytes:
    """Topic A's record at ``offset``: recognisable, and different at every offset."""
    return b"A-%010d-" % offset + b"a" * 6000


def b_value(i: int) -> bytes:
    return b"B-%010d-" % i + b"b" * 2000


@pytest.mark.parametrize("deletion", ["delete-records", "retention"])
def test_a_file_slice_outlives_the_deletion_of_its_segment(tmp_path: Path, deletion: str) -> None:
    config = LogConfig(segment_bytes=64 << 10, retention_bytes=128 << 10)
    topic_a = PartitionLog.open(tmp_path / "A-0", config)
    for first in range(0, 200, 4):
        topic_a.append(build_record_batch([a_value(o) for o in range(first, first + 4)]))
    assert len(topic_a.segments) > 3
    found = topic_a.read(0, 1 << 20)
    assert found is not None
    before = found.read()
    assert decode(0, before)[0] == (0, a_value(0))

    if deletion == "retention":
        assert topic_a.apply_retention() > 0
    else:
        topic_a.delete_records_before(topic_a.segments[2].base_offset)
    assert not (tmp_path / "A-0" / FIRST_SEGMENT).exists()
    # New files take the lowest free descriptors: the deleted segment's, if it gave them up.
    topic_b = PartitionLog.open(tmp_path / "B-0", config)
    for i in range(0, 120, 4):
        topic_b.append(build_record_batch([b_value(j) for j in range(i, i + 4)]))
    spare = [os.open(tmp_path / f"spare-{i}", os.O_RDWR | os.O_CREAT) for i in range(8)]
    try:
        for fd in spare:
            os.pwrite(fd, b"X" * len(before), 0)
        assert found.read() == before, "the slice now reads another file's bytes"
    finally:
        for fd in spare:
            os.close(fd)
        topic_b.close()
        topic_a.close()


class PipelinedClient:
    """A raw connection that sends several requests before reading any answer.

    With a small receive buffer the broker has to hold the file slices of later fetches
    while it waits to write earlier ones: the window in which a segment can be deleted.
    """

    def __init__(self, bootstrap: str, receive_buffer: int = 16 << 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(20)
        self.sock.connect((host, int(port)))
        self.protocol = ClientConnection(client_id="kayak-tests")

    def send(self, message: Message, version: int) -> None:
        _, frame = self.protocol.send_request(message, version)
        self.sock.sendall(frame)

    def receive(self) -> Any:
        while (event := self.protocol.next_event()) is None:
            data = self.sock.recv(16 << 10)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    def close(self) -> None:
        self.sock.close()


def check_a_answer(offset: int, data: Any) -> list[str]:
    """Problems with one Fetch answer for A at ``offset``: anything but A's own records."""
    if data.error_code == OUT_OF_RANGE:
        return []  # deleted before this fetch was read: a correct answer
    if data.error_code != 0:
        return [f"A@{offset}: error {data.error_code}"]
    try:
        batches = list(iter_batches(bytes(data.records or b""), check_crc=True))
    except KafkaError as exc:
        return [f"A@{offset}: undecodable records: {exc}"]
    if batches and not batches[0].base_offset <= offset <= batches[0].last_offset:
        return [f"A@{offset}: first batch is {batches[0].base_offset}..{batches[0].last_offset}"]
    problems = []
    for batch in batches:
        for record in batch:
            if record.value != a_value(record.offset):
                shown = (record.value or b"")[:14]
                problems.append(f"A@{offset}: record {record.offset} is {shown!r}")
    return problems


class Churn:
    """Producers on A and B, DeleteRecords on A (and B), and pipelined fetchers of A."""

    DEPTH = 12

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.problems: list[str] = []
        self.a_next = 0
        self.fetched_batches = 0
        self.deletions = 0
        self.threads: list[threading.Thread] = []

    def produce_a(self, wire: WireClient) -> None:
        values = [a_value(o) for o in range(self.a_next, self.a_next + 8)]
        result = produce(wire, "A", build_record_batch(values))
        assert (result.error_code, result.base_offset) == (0, self.a_next), result
        self.a_next += 8

    def run_a_producer(self) -> None:
        wire = WireClient(self.bootstrap)
        while not self.stop.is_set():
            self.produce_a(wire)
            time.sleep(0.005)
        wire.close()

    def run_b_producer(self) -> None:
        wire = WireClient(self.bootstrap)
        i = 0
        while not self.stop.is_set():
            result = produce(wire, "B", build_record_batch([b_value(j) for j in range(i, i + 8)]))
            assert result.error_code == 0, result
            i += 8
            time.sleep(0.002)
        wire.close()

    def run_deleter(self) -> None:
        wire = WireClient(self.bootstrap)
        while not self.stop.is_set():
            time.sleep(0.02)
            for topic in ("A", "B"):
                _, start = list_offset(wire, topic, EARLIEST)
                _, end = list_offset(wire, topic, LATEST)
                if end - start > 64:
                    code, _ = delete_records(wire, topic, start + (end - start) // 2)
                    assert code == 0, f"DeleteRecords {topic}: {code}"
                    self.deletions += topic == "A"
        wire.close()

    def run_fetcher(self) -> None:
        wire = WireClient(self.bootstrap)
        client = PipelinedClient(self.bootstrap)
        try:
            while not self.stop.is_set():
                _, start = list_offset(wire, "A", EARLIEST)
                _, end = list_offset(wire, "A", LATEST)
                offsets = [start + (end - start) * k // self.DEPTH for k in range(self.DEPTH)]
                for offset in offsets:
                    client.send(fetch_request("A", offset), FETCH_V)
                time.sleep(0.05)  # the slices wait while A's segments go and B's arrive
                for offset in offsets:
                    data = client.receive().responses[0].partitions[0]
                    self.problems += check_a_answer(offset, data)
                    self.fetched_batches += len(list(iter_batches(bytes(data.records or b""))))
        except (ConnectionError, OSError) as exc:
            self.problems.append(f"fetch connection failed: {exc!r}")
        finally:
            client.close()
            wire.close()

    def start(self, fetchers: int) -> None:
        targets = [self.run_a_producer, self.run_b_producer, self.run_deleter]
        targets += [self.run_fetcher] * fetchers
        for target in targets:
            thread = threading.Thread(target=self._guarded, args=(target,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # a worker's failure is the test's failure
            self.problems.append(f"{target.__name__}: {exc!r}")
            self.stop.set()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive(), "a worker hung"


@pytest.mark.timeout(90)
def test_fetches_never_serve_another_segments_bytes_while_segments_are_deleted(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = broker_process.bootstrap_servers
    for name in ("A", "B"):
        create_topic(bootstrap, name, configs={"segment.bytes": str(SEGMENT_BYTES)})
    churn = Churn(bootstrap)
    wire = WireClient(bootstrap)
    for _ in range(88):  # ~4 MiB of A (48 KB batches): 4 segments before the churn starts
        churn.produce_a(wire)
    wire.close()

    churn.start(fetchers=3)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not churn.stop.is_set():
        time.sleep(0.1)
    churn.finish()

    assert not churn.problems, f"{len(churn.problems)} problems, first: {churn.problems[:5]}"
    assert churn.deletions >= 10 and churn.fetched_batches >= 100, (
        f"too little churn to mean anything: {churn.deletions} deletions, "
        f"{churn.fetched_batches} batches fetched"
    )
    assert broker_process.process is not None and broker_process.process.poll() is None
