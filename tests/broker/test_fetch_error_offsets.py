"""A partition that cannot be read answers no offsets (-1), as Kafka does.

A high watermark of 0 beside an error told confluent-kafka "end of partition at offset 0" for
a partition that was offline or out of range; Kafka answers -1 for the high watermark, the
last stable offset and the log start offset of every failed partition read.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kayak.broker import Broker
from kayak.errors import ErrorCode
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import ack_all, fetch
from tests.broker.wire import WireClient


def test_failed_partition_reads_answer_no_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Broker(tmp_path / "data", port=0) as broker:
            bootstrap = broker.bootstrap_servers
            await asyncio.to_thread(create_topic, bootstrap, "t")
            wire = await asyncio.to_thread(WireClient, bootstrap)
            try:
                await asyncio.to_thread(ack_all, wire, "t", [b"a", b"b", b"c"])
                ok = await asyncio.to_thread(fetch, wire, "t", 0)
                assert (ok.error_code, ok.high_watermark, ok.log_start_offset) == (0, 3, 0)
                failures = {
                    "out of range": (await asyncio.to_thread(fetch, wire, "t", 99),
                                     ErrorCode.OFFSET_OUT_OF_RANGE),
                    "no partition": (await asyncio.to_thread(fetch, wire, "t", 0, 7),
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                }  # fmt: skip
                for name, (data, code) in failures.items():
                    answered = (data.error_code, data.high_watermark, data.last_stable_offset,
                                data.log_start_offset)  # fmt: skip
                    assert answered == (code, -1, -1, -1), (name, answered)
            finally:
                wire.close()

    asyncio.run(scenario())
