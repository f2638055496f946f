"""Traffic beside the crash harness's writers, in threads of the harness's process:
DeleteRecords on one partition of a writer's topic, and a change of ``retention.bytes`` on a
throwaway topic with 64 KiB segments that a writer keeps filling, so that retention deletes
segments while the round runs; and :func:`check_retention`, which checks that it did."""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)

from tests.broker.crash.broker import retry
from tests.broker.crash.verdicts import read_topic
from tests.broker.crash.workload import DELIVERY_TIMEOUT_MS, QUIET, MiB, Writer

RETENTION_TOPIC = "crash-retention"
RETENTION_SEGMENT_BYTES = 1 * MiB  # the smallest segment.bytes a broker accepts (KIP-1030)
RETENTION_WRITE_BYTES_PER_S = 4 * MiB
DELETE_RECORDS_PARTITION = (Writer.CONFLUENT_IDEMPOTENT.topic, 0)


class SideTraffic:
    """DeleteRecords on one partition and a retention change on a throwaway topic, with a
    writer keeping that topic's 1 MiB segments coming; all in threads of this process."""

    def __init__(self, bootstrap: str, round_number: int, deleted_below: dict[int, int]) -> None:
        self._bootstrap = bootstrap
        self._round = round_number
        self.deleted_below = deleted_below
        self.retention_bytes = 2 * MiB if round_number % 2 == 0 else 3 * MiB // 2
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.done: list[str] = []
        self._threads: list[threading.Thread] = []

    def start_writer(self) -> None:
        self._spawn("retention writer", self._write_retention_topic)

    def delete_records(self) -> None:
        self._spawn("delete records", self._delete_records)

    def alter_retention(self) -> None:
        self._spawn("alter retention", self._alter_retention)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # reported with the round
                self.errors.append(f"{name}: {exc}")

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _write_retention_topic(self) -> None:
        producer = Producer(
            {**QUIET, "bootstrap.servers": self._bootstrap, "acks": 1, "linger.ms": 20,
             "message.timeout.ms": DELIVERY_TIMEOUT_MS}
        )  # fmt: skip
        value = b"r" * 16_000
        per_tick = RETENTION_WRITE_BYTES_PER_S // 10 // len(value)
        while not self.stop.is_set():
            for _ in range(per_tick):
                with contextlib.suppress(BufferError):
                    producer.produce(RETENTION_TOPIC, value)
            producer.poll(0.1)
        producer.flush(60)

    def _delete_records(self) -> None:
        admin = AdminClient({**QUIET, "bootstrap.servers": self._bootstrap})
        topic, partition = DELETE_RECORDS_PARTITION
        tp = TopicPartition(topic, partition)

        def high_watermark() -> int:
            found = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)
            return int(found[tp].result(15).offset)

        # Wait for records to delete (the producer may not have reached this partition yet).
        before = self.deleted_below.get(partition, 0)
        high = retry("ListOffsets", high_watermark, self.stop, 120)
        while high < before + 200 and not self.stop.wait(0.2):
            high = retry("ListOffsets", high_watermark, self.stop, 120)
        target = max(before, int(high * 0.6))

        def delete() -> int:
            found = admin.delete_records([TopicPartition(topic, partition, target)])
            return int(next(iter(found.values())).result(15).low_watermark)

        low = retry("DeleteRecords", delete, self.stop, 120)
        self.deleted_below[partition] = max(self.deleted_below.get(partition, 0), low)
        self.done.append(f"DeleteRecords {topic}-{partition} before {target}: low watermark {low}")

    def _alter_retention(self) -> None:
        admin = AdminClient({**QUIET, "bootstrap.servers": self._bootstrap})
        configs = {
            "segment.bytes": str(RETENTION_SEGMENT_BYTES),
            "retention.bytes": str(self.retention_bytes),
        }
        # Both APIs, a round each: AlterConfigs replaces the topic's configs,
        # IncrementalAlterConfigs sets the ones named.
        incremental = self._round % 2 == 1
        if incremental:
            entries = [
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                for name, value in configs.items()
            ]
            resource = ConfigResource("topic", RETENTION_TOPIC, incremental_configs=entries)
        else:
            resource = ConfigResource("topic", RETENTION_TOPIC, set_config=configs)

        def alter() -> None:
            if incremental:
                answer = admin.incremental_alter_configs([resource])
            else:
                with warnings.catch_warnings():  # deprecated in the client, not in Kafka
                    warnings.simplefilter("ignore", DeprecationWarning)
                    answer = admin.alter_configs([resource])
            next(iter(answer.values())).result(15)

        api = "IncrementalAlterConfigs" if incremental else "AlterConfigs"
        retry(api, alter, self.stop, 120)
        self.done.append(f"{api} {RETENTION_TOPIC} retention.bytes={self.retention_bytes}")


def check_retention(
    bootstrap: str, data_dir: Path, retention_bytes: int, timeout: float = 20.0
) -> list[str]:
    """Retention must have deleted segments of the throwaway topic, keeping it readable."""
    directory = data_dir / f"{RETENTION_TOPIC}-0"
    bound = retention_bytes // RETENTION_SEGMENT_BYTES + 4
    deadline = time.monotonic() + timeout
    segments = len(list(directory.glob("*.log")))
    while segments > bound and time.monotonic() < deadline:
        time.sleep(0.2)
        segments = len(list(directory.glob("*.log")))
    found = []
    if segments > bound:
        found.append(f"{RETENTION_TOPIC}: {segments} segments left, retention keeps <= {bound}")
    part = read_topic(bootstrap, RETENTION_TOPIC, 1)[0]
    if part.low == 0:
        found.append(f"{RETENTION_TOPIC}: log start still 0, retention deleted nothing")
    found += [f"{RETENTION_TOPIC}-0: {gap}" for gap in part.gaps()[:5]]
    if not part.complete:
        found.append(f"{RETENTION_TOPIC}-0: never reached the high watermark {part.high}")
    return found
