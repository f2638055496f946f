"""Storage faults: DeleteRecords up to the high watermark, then ``kill -9``. The broker comes
back with the log start where DeleteRecords left it and goes on at the next offset."""

from __future__ import annotations

import signal

import pytest

from kayak.protocol.records import build_record_batch
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    EARLIEST,
    FIRST_SEGMENT,
    LATEST,
    OUT_OF_RANGE,
    confluent_produce,
    delete_records,
    fetch,
    list_offset,
    produce,
    read_records,
)
from tests.broker.wire import WireClient


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
