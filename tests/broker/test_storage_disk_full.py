"""Storage faults: a full disk. The broker's data directory is a small tmpfs that really fills
up: a write to it is answered KAFKA_STORAGE_ERROR and cut back, and only acknowledged records
are ever served, before and after a clean restart or a ``kill -9``."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError as ClientError

from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    FIRST_SEGMENT,
    LATEST,
    STORAGE_ERROR,
    ack_all,
    check_contiguous,
    confluent_produce,
    confluent_read,
    list_offset,
    one_batch,
    produce,
    read_records,
)
from tests.broker.wire import WireClient


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
