"""A broker that stops while it sends Fetch answers never puts a frame out of step.

Fetch answers go out in parts: the frame's head through the transport, the records with
``sendfile`` on a descriptor of the connection's own. A closing transport drops what it is
given; that descriptor does not. A writer that started after ``close()`` once sent the records
of an answer whose head had been dropped, and a Java consumer then read a frame of under four
bytes. Here several readers keep Fetch requests in flight on raw sockets while the broker is
stopped (SIGTERM) again and again: every answer a reader gets before its connection ends must
be whole and answer its own request.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kayak.broker.log.open_files import SegmentFile
from kayak.broker.log.segment import FileSlice
from kayak.protocol.messages import FetchRequest
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.records import build_record_batch
from tests.broker.conftest import BrokerProcess
from tests.broker.test_broker_bad_input import make_topic, produce
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(180)

TOPIC = "backlog"
BATCHES = 24  # of 1,000 records of 1,000 bytes: ~24 MB, read 1 MiB per answer
READERS = 6
IN_FLIGHT = 4
ROUNDS = 10


def _fetch(offset: int) -> FetchRequest:
    partition = FetchPartition(0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return FetchRequest(max_wait_ms=0, max_bytes=1 << 20,
                        topics=[FetchTopic(topic=TOPIC, partitions=[partition])])  # fmt: skip


class Reader(threading.Thread):
    """Keeps ``IN_FLIGHT`` Fetch requests on one connection until the broker closes it;
    ``failure`` is whatever it read that was not a whole answer to its own request."""

    def __init__(self, bootstrap: str, index: int) -> None:
        super().__init__(name=f"reader-{index}", daemon=True)
        self.bootstrap, self.index = bootstrap, index
        self.answers = 0
        self.failure: str | None = None

    def run(self) -> None:
        try:
            client = WireClient(self.bootstrap, timeout=20)
        except OSError:
            return  # the broker stopped before this reader connected
        offset = self.index * 1_000  # readers read different parts of the log
        expected: list[int] = []

        def send() -> None:
            correlation_id, frame = client.protocol.send_request(_fetch(offset), 12)
            expected.append(correlation_id)
            client.sock.sendall(frame)

        try:
            for _ in range(IN_FLIGHT):
                send()
            while True:
                event = client.protocol.next_event()
                if event is None:
                    data = client.sock.recv(1 << 20)
                    if not data:
                        return  # the broker closed the connection: expected at its stop
                    client.protocol.receive_data(data)
                    continue
                assert event.correlation_id == expected.pop(0), "an answer out of order"
                partition = event.response.responses[0].partitions[0]  # type: ignore[attr-defined]
                assert partition.error_code == 0, partition
                self.answers += 1
                send()
        except (ConnectionError, TimeoutError):
            return
        except Exception as exc:  # any other way to end is the finding
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()


def test_every_answer_read_before_a_stop_is_whole(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    broker = BrokerProcess(tmp_path_factory.mktemp("frames") / "data").start()
    try:
        client = WireClient(broker.bootstrap_servers)
        make_topic(client, TOPIC)
        value = bytes(1_000)
        for _ in range(BATCHES):
            assert produce(client, TOPIC, build_record_batch([value] * 1_000)) == 0
        client.close()
        answers = 0
        for round_ in range(ROUNDS):
            readers = [Reader(broker.bootstrap_servers, i) for i in range(READERS)]
            for reader in readers:
                reader.start()
            time.sleep(0.3 + 0.05 * round_)  # answers in full flow when the stop comes
            assert broker.stop(signal.SIGTERM) == 0, broker.log_text()[-2000:]
            for reader in readers:
                reader.join(30)
                assert not reader.is_alive(), f"{reader.name} still reading after the stop"
                assert reader.failure is None, f"round {round_}, {reader.name}: {reader.failure}"
                answers += reader.answers
            broker.start()
        assert answers >= ROUNDS * READERS, f"only {answers} answers: the stops came too early"
    finally:
        if broker.process is not None:
            broker.stop()


def test_a_slice_read_short_of_its_length_is_refused(tmp_path: Path) -> None:
    """On TLS, slices are read into memory: bytes missing from the file (shorter than the
    answer announced) close the connection instead of sending a frame too short."""
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(100))
    file = SegmentFile(os.open(path, os.O_RDONLY))
    assert FileSlice(file, 20, 80).read() == bytes(80)
    with pytest.raises(ConnectionError, match="ended 30 bytes early"):
        FileSlice(file, 50, 80).read()
