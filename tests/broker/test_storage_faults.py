"""Storage faults while the broker runs: a full disk, a failing or slow fdatasync, a segment
deleted under a fetch, and DeleteRecords followed by a crash.

What every test here holds the broker to: a record is acknowledged only once it is on disk;
nothing that was never acknowledged is ever served; offsets stay contiguous (never a gap,
never two records at one offset); a fault is answered KAFKA_STORAGE_ERROR (56) for the
partition it hit and leaves the other partitions working.

Real broker processes and real clients wherever the fault can be real (a full tmpfs, kill -9);
an in-process broker with ``os.fdatasync`` patched where it cannot (an EIO from the disk, an
fsync that takes its time).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as ClientError

from kayak.broker import Broker
from kayak.broker.log import FlushMode, LogConfig, PartitionLog
from kayak.errors import ErrorCode, KafkaError
from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages import (
    DeleteRecordsRequest,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, iter_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.wire import WireClient

STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)
OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)
PRODUCE_V, FETCH_V, LIST_OFFSETS_V, DELETE_RECORDS_V, INIT_PRODUCER_ID_V = 9, 12, 5, 1, 4
LATEST, EARLIEST = -1, -2
FIRST_SEGMENT = f"{0:020d}.log"

Records = list[tuple[int, bytes | None]]  # (offset, value) in log order


# -- the raw wire client, one request per call ---------------------------------------------


def produce(
    wire: WireClient, topic: str, records: bytes, partition: int = 0, acks: int = -1
) -> Any:
    """One Produce of ``records`` (encoded batches); the partition's answer."""
    data = TopicProduceData(topic, [PartitionProduceData(partition, records)])
    request = ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[data])
    response: Any = wire.request(request, PRODUCE_V)
    return response.responses[0].partition_responses[0]


def fetch_request(topic: str, offset: int, partition: int = 0, max_bytes: int = 8 << 20) -> Any:
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                    )
                ],
            )
        ],
    )


def fetch(
    wire: WireClient, topic: str, offset: int, partition: int = 0, max_bytes: int = 8 << 20
) -> Any:
    """One Fetch (no waiting); the partition's answer (``PartitionData``)."""
    response: Any = wire.request(fetch_request(topic, offset, partition, max_bytes), FETCH_V)
    return response.responses[0].partitions[0]


def list_offset(
    wire: WireClient, topic: str, timestamp: int, partition: int = 0
) -> tuple[int, int]:
    """(error code, offset) of ListOffsets for ``timestamp`` (LATEST, EARLIEST)."""
    wanted = ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(topic, [wanted])])
    response: Any = wire.request(request, LIST_OFFSETS_V)
    result = response.topics[0].partitions[0]
    return result.error_code, result.offset


def delete_records(
    wire: WireClient, topic: str, offset: int, partition: int = 0
) -> tuple[int, int]:
    """(error code, low watermark) of DeleteRecords up to ``offset`` (-1: the high watermark)."""
    wanted = DeleteRecordsPartition(partition_index=partition, offset=offset)
    request = DeleteRecordsRequest(topics=[DeleteRecordsTopic(topic, [wanted])], timeout_ms=10_000)
    response: Any = wire.request(request, DELETE_RECORDS_V)
    result = response.topics[0].partitions[0]
    return result.error_code, result.low_watermark


def init_producer_id(wire: WireClient) -> tuple[int, int]:
    """A fresh idempotent producer id and epoch."""
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
    response: Any = wire.request(request, INIT_PRODUCER_ID_V)
    assert response.error_code == 0, f"InitProducerId: {response.error_code}"
    return response.producer_id, response.producer_epoch


def decode(offset: int, records: Any) -> Records:
    """The records at or after ``offset`` in a Fetch answer's records field, CRCs checked."""
    out: Records = []
    for batch in iter_batches(bytes(records or b""), check_crc=True):
        out += [(r.offset, r.value) for r in batch if r.offset >= offset]
    return out


def read_records(wire: WireClient, topic: str, partition: int = 0, start: int = 0) -> Records:
    """Every record from ``start`` up to the high watermark, fetched sequentially.

    Fails on any error code and on any offset that does not follow the previous one.
    """
    out: Records = []
    offset = start
    while True:
        data = fetch(wire, topic, offset, partition)
        assert data.error_code == 0, f"fetch {topic}-{partition}@{offset}: {data.error_code}"
        records = decode(offset, data.records)
        if not records:
            assert offset >= data.high_watermark, (
                f"fetch {topic}-{partition}@{offset} returned nothing below the high "
                f"watermark {data.high_watermark}"
            )
            return out
        for record_offset, value in records:
            assert record_offset == offset, (
                f"{topic}-{partition}: expected {offset}, got {record_offset}"
            )
            out.append((record_offset, value))
            offset += 1


def one_batch(*values: bytes) -> bytes:
    return build_record_batch(list(values))


def ack_all(wire: WireClient, topic: str, values: list[bytes], partition: int = 0) -> Records:
    """Produce each value as its own acks=all batch; every one must be acknowledged."""
    acked: Records = []
    for value in values:
        result = produce(wire, topic, one_batch(value), partition)
        assert result.error_code == 0, f"produce {value[:20]!r}: {result.error_code}"
        acked.append((result.base_offset, value))
    return acked


def check_contiguous(records: Records, start: int = 0) -> None:
    offsets = [offset for offset, _ in records]
    assert offsets == list(range(start, start + len(records))), f"offsets {offsets[:50]}"


# -- third-party clients -------------------------------------------------------------------


def confluent_produce(
    bootstrap: str, topic: str, values: list[bytes], timeout_ms: int = 10_000
) -> list[tuple[int | None, int | None]]:
    """Produce with confluent-kafka, acks=all; per value (offset, error code), one None."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": timeout_ms,
            "retry.backoff.ms": 100,
        }
    )
    reports: dict[bytes, tuple[int | None, int | None]] = {}

    def delivered(err: ClientError | None, msg: Any) -> None:
        if err is not None:
            reports[msg.value()] = (None, err.code())
        else:
            reports[msg.value()] = (msg.offset(), None)

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(timeout_ms / 1000 + 20) == 0, "delivery reports missing"
    return [reports[value] for value in values]


def confluent_read(bootstrap: str, topic: str, timeout: float = 30.0) -> Records:
    """Everything in ``topic``-0 from the beginning to its end, read with confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: Records = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                error = msg.error()
                if error is None:
                    offset = msg.offset()
                    assert offset is not None
                    out.append((offset, msg.value()))
                elif error.code() == ClientError._PARTITION_EOF:
                    return out
                else:
                    raise AssertionError(f"consumer error: {error}")
    finally:
        consumer.close()
    raise AssertionError(f"did not reach the end of {topic} within {timeout}s")


# -- 1. a full disk -------------------------------------------------------------------------


@pytest.fixture
def tmpfs_dir(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs: a disk that really fills up."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def small_disk_broker(tmpfs_dir: Path) -> Iterator[BrokerProcess]:
    """A broker whose data directory is the tmpfs itself (its log file lives outside it)."""
    broker = BrokerProcess(tmpfs_dir).start()
    yield broker
    if broker.process is not None:
        broker.stop(signal.SIGKILL)


def fill_disk(directory: Path) -> Path:
    """Write a filler file until the file system has no page left; returns its path."""
    path = directory / "filler"
    with open(path, "wb", buffering=0) as f:
        for block in (1 << 20, 64 << 10, 4096, 512):
            data = b"\xff" * block
            while True:
                try:
                    f.write(data)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    free = os.statvfs(directory)
    assert free.f_bavail * free.f_frsize < 8192, "the disk did not fill up"
    return path


def big_value(tag: str, i: int) -> bytes:
    # Larger than any slack left in the last page of a segment file, so the write must fail.
    return b"%s-%04d-" % (tag.encode(), i) + b"n" * (64 << 10)


def acked_values(tag: str, count: int) -> list[bytes]:
    return [b"%s-%04d-" % (tag.encode(), i) + b"a" * 1000 for i in range(count)]


@pytest.mark.timeout(120)
def test_disk_full_answers_storage_error_and_serves_only_acknowledged_records(
    small_disk_broker: BrokerProcess,
) -> None:
    broker = small_disk_broker
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "full")
    wire = WireClient(bootstrap)
    acked = ack_all(wire, "full", acked_values("ack", 40))
    check_contiguous(acked)

    filler = fill_disk(broker.data_dir)
    segment = broker.data_dir / "full-0" / FIRST_SEGMENT
    size_before = segment.stat().st_size
    result = produce(wire, "full", one_batch(big_value("never-wire", 0)))
    assert result.error_code == STORAGE_ERROR, f"a write to a full disk answered {result}"
    assert segment.stat().st_size == size_before, "the failed append was not cut back"

    # librdkafka retries a storage error until its message timeout: every attempt must fail
    # cleanly, and none may be acknowledged.
    reports = confluent_produce(
        bootstrap, "full", [big_value("never-client", i) for i in range(3)], timeout_ms=4000
    )
    for offset, code in reports:
        assert offset is None, f"a write to a full disk was acknowledged at {offset}"
        assert code in (ClientError.KAFKA_STORAGE_ERROR, ClientError._MSG_TIMED_OUT), code
    assert segment.stat().st_size == size_before, "a failed append was not cut back"
    assert read_records(wire, "full") == acked

    filler.unlink()
    after = ack_all(wire, "full", acked_values("after-wire", 10))
    check_contiguous(after, start=len(acked))
    client_reports = confluent_produce(bootstrap, "full", acked_values("after-client", 10))
    assert all(code is None for _, code in client_reports), client_reports
    client_offsets = range(len(acked) + 10, len(acked) + 20)
    assert [offset for offset, _ in client_reports] == list(client_offsets), client_reports
    expected = (
        acked + after + list(zip(client_offsets, acked_values("after-client", 10), strict=True))
    )

    consumed = confluent_read(bootstrap, "full")
    assert consumed == expected, "the consumer read something other than what was acknowledged"
    assert not any((value or b"").startswith(b"never") for _, value in consumed)

    wire.close()
    assert broker.stop() == 0
    broker.restart()
    wire = WireClient(broker.bootstrap_servers)
    assert read_records(wire, "full") == expected, "a clean restart changed the log"
    wire.close()


@pytest.mark.timeout(120)
def test_disk_full_then_kill_9_restarts_with_exactly_the_acknowledged_records(
    small_disk_broker: BrokerProcess,
) -> None:
    broker = small_disk_broker
    create_topic(broker.bootstrap_servers, "full")
    create_topic(broker.bootstrap_servers, "spare")
    wire = WireClient(broker.bootstrap_servers)
    acked = ack_all(wire, "full", acked_values("ack", 30))
    spare = ack_all(wire, "spare", acked_values("spare", 5))

    filler = fill_disk(broker.data_dir)
    for attempt in range(3):
        result = produce(wire, "full", one_batch(big_value("never", attempt)))
        assert result.error_code == STORAGE_ERROR, f"attempt {attempt}: {result}"
    wire.close()
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    filler.unlink()
    broker.restart()

    wire = WireClient(broker.bootstrap_servers)
    assert read_records(wire, "full") == acked
    assert list_offset(wire, "full", LATEST) == (0, len(acked))
    assert read_records(wire, "spare") == spare
    more = ack_all(wire, "full", acked_values("more", 5))
    check_contiguous(more, start=len(acked))
    assert read_records(wire, "full") == acked + more
    wire.close()


# -- in-process brokers with an injected fdatasync -----------------------------------------


class FailingFdatasync:
    """``os.fdatasync`` that raises EIO while ``failing`` is set (a disk that lost a write)."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.failing = False
        self.failures = 0

    def __call__(self, fd: int) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "injected fdatasync failure")
        self.real(fd)


class BlockingFdatasync:
    """``os.fdatasync`` that, while ``armed``, waits for ``release`` (a slow disk)."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.armed:
            self.entered.set()
            self.release.wait(30)
        self.real(fd)


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking client call without blocking the in-process broker's event loop."""
    return await asyncio.to_thread(fn, *args)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS], ids=lambda m: m.value)
def test_failed_fdatasync_takes_the_partition_offline_until_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: FlushMode
) -> None:
    fdatasync = FailingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    data_dir = tmp_path / "data"
    failed_values = {b"idem-0", b"failed-1"}  # may or may not survive the restart

    async def while_failing() -> tuple[Records, bytes]:
        async with Broker(data_dir, port=0, flush=mode) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "bad")
            await in_thread(create_topic, bootstrap, "good")
            wire: WireClient = await in_thread(WireClient, bootstrap)
            acked = await in_thread(ack_all, wire, "bad", [b"acked-%d" % i for i in range(5)])
            producer_id, epoch = await in_thread(init_producer_id, wire)
            idempotent = build_record_batch(
                [b"idem-0"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0
            )

            fdatasync.failing = True
            first = await in_thread(produce, wire, "bad", idempotent)
            assert first.error_code == STORAGE_ERROR, f"fsync failed, produce answered {first}"
            second = await in_thread(produce, wire, "bad", one_batch(b"failed-1"))
            assert second.error_code == STORAGE_ERROR, f"second produce answered {second}"
            fdatasync.failing = False
            assert fdatasync.failures >= 1

            # The disk works again, but the partition lost a write it cannot account for.
            retry = await in_thread(produce, wire, "bad", idempotent)
            assert retry.error_code == STORAGE_ERROR, (
                f"the idempotent retry of a never-durable batch answered {retry}"
            )
            later = await in_thread(produce, wire, "bad", one_batch(b"rejected-offline"))
            assert later.error_code == STORAGE_ERROR, f"produce to an offline partition: {later}"
            data = await in_thread(fetch, wire, "bad", 0)
            assert data.error_code == STORAGE_ERROR, f"fetch from an offline partition: {data}"

            good = await in_thread(ack_all, wire, "good", [b"good-%d" % i for i in range(3)])
            assert await in_thread(read_records, wire, "good") == good
            wire.close()
            return acked, idempotent

    async def after_restart(acked: Records, idempotent: bytes) -> None:
        async with Broker(data_dir, port=0, flush=mode) as broker:
            wire: WireClient = await in_thread(WireClient, broker.bootstrap_servers)
            stored = await in_thread(read_records, wire, "bad")
            check_contiguous(stored)
            assert stored[: len(acked)] == acked, "an acknowledged record is missing"
            extra = [value for _, value in stored[len(acked) :]]
            assert set(extra) <= failed_values and len(extra) == len(set(extra)), extra

            retry = await in_thread(produce, wire, "bad", idempotent)
            assert retry.error_code == 0, f"after the restart the retry answered {retry}"
            fresh = await in_thread(ack_all, wire, "bad", [b"fresh"])
            stored = await in_thread(read_records, wire, "bad")
            check_contiguous(stored)
            values = [value for _, value in stored]
            assert values.count(b"idem-0") == 1, "the idempotent batch is stored twice or never"
            assert b"rejected-offline" not in values
            assert stored[-1] == fresh[0]
            wire.close()

    acked, idempotent = asyncio.run(while_failing())
    monkeypatch.setattr(os, "fdatasync", fdatasync.real)
    asyncio.run(after_restart(acked, idempotent))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.GROUP, FlushMode.ALWAYS], ids=lambda m: m.value)
def test_high_watermark_is_the_durable_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: FlushMode
) -> None:
    fdatasync = BlockingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def scenario() -> None:
        async with Broker(tmp_path / "data", port=0, flush=mode) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "hw")
            reader: WireClient = await in_thread(WireClient, bootstrap)
            writer: WireClient = await in_thread(WireClient, bootstrap)
            synced = await in_thread(ack_all, reader, "hw", [b"synced-%d" % i for i in range(10)])

            fdatasync.armed = True
            ack = asyncio.ensure_future(in_thread(produce, writer, "hw", one_batch(b"unsynced")))
            try:
                assert await in_thread(fdatasync.entered.wait, 10), "no fdatasync started"
                data = await in_thread(fetch, reader, "hw", 0)
                assert data.error_code == 0
                assert decode(0, data.records) == synced, (
                    "a fetch returned a record not yet on disk"
                )
                assert data.high_watermark == 10, f"high watermark {data.high_watermark}"
                at_end = await in_thread(fetch, reader, "hw", 10)
                assert (at_end.error_code, decode(10, at_end.records)) == (0, []), at_end
                assert await in_thread(list_offset, reader, "hw", LATEST) == (0, 10)
                assert not ack.done(), "acknowledged before its fdatasync finished"
            finally:
                fdatasync.armed = False
                fdatasync.release.set()
            result = await ack
            assert (result.error_code, result.base_offset) == (0, 10), result
            data = await in_thread(fetch, reader, "hw", 0)
            assert decode(0, data.records) == [*synced, (10, b"unsynced")]
            assert data.high_watermark == 11
            assert await in_thread(list_offset, reader, "hw", LATEST) == (0, 11)
            reader.close()
            writer.close()

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_flush_never_high_watermark_is_the_log_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fdatasync = BlockingFdatasync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def scenario() -> None:
        async with Broker(tmp_path / "data", port=0, flush=FlushMode.NEVER) as broker:
            bootstrap = broker.bootstrap_servers
            await in_thread(create_topic, bootstrap, "hw")
            wire: WireClient = await in_thread(WireClient, bootstrap)
            fdatasync.armed = True  # a disk that never syncs must not hold anything up
            try:
                acked = await in_thread(ack_all, wire, "hw", [b"v-%d" % i for i in range(5)])
                data = await in_thread(fetch, wire, "hw", 0)
                assert decode(0, data.records) == acked
                assert data.high_watermark == 5
                assert await in_thread(list_offset, wire, "hw", LATEST) == (0, 5)
            finally:
                fdatasync.armed = False
                fdatasync.release.set()
            wire.close()

    asyncio.run(scenario())


# -- 4. a fetch whose segment is deleted under it -------------------------------------------


def a_value(offset: int) -> bytes:
    """Topic A's record at ``offset``: recognisable, and different at every offset."""
    return b"A-%010d-" % offset + b"a" * 2000


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
        create_topic(bootstrap, name, configs={"segment.bytes": str(64 << 10)})
    churn = Churn(bootstrap)
    wire = WireClient(bootstrap)
    for _ in range(64):  # ~1 MiB of A: 16 segments before the churn starts
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


# -- 5. DeleteRecords, then a crash ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_delete_records_to_the_end_survives_kill_9(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    create_topic(bootstrap, "trimmed")
    wire = WireClient(bootstrap)
    end = 0
    while end < 4800:  # 64 records of 1 KiB per batch: > 4 MiB in the active segment
        values = [b"old-%06d-" % (end + i) + b"o" * 1024 for i in range(64)]
        result = produce(wire, "trimmed", build_record_batch(values))
        assert (result.error_code, result.base_offset) == (0, end), result
        end += 64
    segment = broker_process.data_dir / "trimmed-0" / FIRST_SEGMENT
    assert segment.stat().st_size > 4 << 20
    assert delete_records(wire, "trimmed", -1) == (0, end)
    wire.close()

    assert broker_process.stop(signal.SIGKILL) == -signal.SIGKILL
    broker_process.restart()
    wire = WireClient(broker_process.bootstrap_servers)
    assert list_offset(wire, "trimmed", EARLIEST) == (0, end), "low watermark after restart"
    assert list_offset(wire, "trimmed", LATEST) == (0, end), "high watermark after restart"
    assert fetch(wire, "trimmed", 0).error_code == OUT_OF_RANGE
    wire.close()

    values = [b"new-%06d" % i for i in range(2000)]
    reports = confluent_produce(broker_process.bootstrap_servers, "trimmed", values)
    assert all(code is None for _, code in reports), [r for r in reports if r[1] is not None][:3]
    offsets = [offset for offset, _ in reports]
    assert offsets == list(range(end, end + 2000)), f"offsets {offsets[:5]}...{offsets[-5:]}"
    wire = WireClient(broker_process.bootstrap_servers)
    stored = read_records(wire, "trimmed", start=end)
    assert stored == list(zip(range(end, end + 2000), values, strict=True))
    wire.close()
