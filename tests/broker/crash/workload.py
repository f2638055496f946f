"""What the crash harness writes: the three writers and their topics, the value format that
lets a reader tell a whole value from a damaged one, and each producer's stream of records;
plus the settings every client of the harness shares."""

from __future__ import annotations

import random
from enum import StrEnum

MiB = 1024 * 1024
PARTITIONS = 4
MAX_MESSAGE_BYTES = 8 * MiB  # topic max.message.bytes: room for the > 1 MiB bursts
BURST_BYTES = int(1.5 * MiB)  # one partition's share of a burst: one batch above 1 MiB
# librdkafka logs every refused connection while the broker is down; those are expected, and
# anything that matters reaches the harness through delivery reports, error_cb and exceptions.
QUIET = {"log_level": 2}
DELIVERY_TIMEOUT_MS = 600_000  # retry through any restart; the round's deadlines come first
DRAIN_TIMEOUT_S = 180.0


class Writer(StrEnum):
    """The three producers, each with its own topic."""

    CONFLUENT_IDEMPOTENT = "confluent-idempotent"
    CONFLUENT_PLAIN = "confluent-plain"
    KAYAK = "kayak-idempotent"

    @property
    def idempotent(self) -> bool:
        return self is not Writer.CONFLUENT_PLAIN

    @property
    def topic(self) -> str:
        return f"crash-{self.value}"

    @property
    def code(self) -> str:
        """The prefix of this producer's record ids."""
        return _WRITER_CODES[self.value]


_WRITER_CODES = {"confluent-idempotent": "ci", "confluent-plain": "cp", "kayak-idempotent": "ki"}


def make_value(record_id: bytes, size: int) -> bytes:
    """A value of ``size`` bytes (at least its header) that names ``record_id`` and whose
    padding is derived from it, so that a reader can tell a damaged value from a whole one."""
    head = b"%s|%d|" % (record_id, size)
    pad = size - len(head)
    if pad <= 0:
        return head
    unit = record_id + b"."
    return head + (unit * (pad // len(unit) + 1))[:pad]


def parse_value(value: bytes) -> tuple[bytes, bool]:
    """The record id in ``value`` and whether the value is exactly what was produced."""
    try:
        record_id, size, _ = value.split(b"|", 2)
        return record_id, value == make_value(record_id, int(size))
    except ValueError:
        return value[:32], False


class Workload:
    """What one producer writes: ids, varied sizes, partitions; now and then a burst."""

    def __init__(self, writer: Writer, round_number: int, seed: int) -> None:
        self._rng = random.Random(seed)
        self._prefix = b"%s%03d-" % (writer.code.encode(), round_number)
        self._seq = 0
        self._partition = 0
        self._run_left = 0

    def _next_id(self) -> bytes:
        self._seq += 1
        return self._prefix + b"%09d" % self._seq

    def _size(self) -> int:
        roll = self._rng.random()
        if roll < 0.5:
            return self._rng.randint(24, 500)
        if roll < 0.8:
            return self._rng.randint(500, 4_000)
        return self._rng.randint(4_000, 9_200)

    def next_records(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """(partition, [(id, value), ...]): one record, or a burst of > 1 MiB."""
        if self._rng.random() < 1 / 1_500:
            partition = self._rng.randrange(PARTITIONS)
            records, total = [], 0
            while total < BURST_BYTES:
                record_id, size = self._next_id(), self._rng.randint(4_000, 9_200)
                records.append((record_id, make_value(record_id, size)))
                total += size
            return partition, records
        # Runs of records to one partition, so batches fill up as they would in real traffic.
        if self._run_left == 0:
            self._partition = self._rng.randrange(PARTITIONS)
            self._run_left = self._rng.randint(20, 200)
        self._run_left -= 1
        record_id = self._next_id()
        return self._partition, [(record_id, make_value(record_id, self._size()))]
