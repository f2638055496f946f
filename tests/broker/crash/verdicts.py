"""Reading the crash harness's topics back and judging them: every acknowledged record at
its acknowledged offset, no record stored twice (but the retry copies a non-idempotent producer
may leave), offsets without a gap from the log start to the high watermark, every value whole;
and the group's acknowledged commits never going back, in its commit log or in what the broker
reports."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from tests.broker.crash.acks import Ack
from tests.broker.crash.group import committed_offsets
from tests.broker.crash.workload import QUIET, MiB, Writer, parse_value

# -- reading the log back -----------------------------------------------------------------------


@dataclass
class PartitionContents:
    """One partition as read from its log start: offsets, record ids, damaged values."""

    low: int
    high: int
    offsets: list[int] = field(default_factory=list)
    record_ids: list[bytes] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    complete: bool = False

    def id_at(self, offset: int) -> bytes | None:
        index = offset - self.offsets[0] if self.offsets else -1
        if 0 <= index < len(self.offsets) and self.offsets[index] == offset:
            return self.record_ids[index]
        # Not contiguous (a finding of its own): look it up the slow way.
        for known, record_id in zip(self.offsets, self.record_ids, strict=True):
            if known == offset:
                return record_id
        return None

    def gaps(self) -> list[str]:
        """Where the offsets read are not exactly low, low+1, ..., high-1."""
        found = []
        expected = self.low
        for offset in self.offsets:
            if offset != expected:
                found.append(f"offset {offset} follows {expected - 1}")
            expected = offset + 1
        if expected != self.high:
            found.append(f"read up to {expected - 1}, high watermark {self.high}")
        return found


def _reader(bootstrap: str) -> Consumer:
    return Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": "crash-harness-reader",  # never joined: partitions are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.max.bytes": 64 * MiB,
            "max.partition.fetch.bytes": 16 * MiB,
        }
    )


def read_topic(
    bootstrap: str, topic: str, partitions: int, timeout: float = 180.0
) -> dict[int, PartitionContents]:
    """Every record of ``topic`` from each partition's log start to its high watermark."""
    consumer = _reader(bootstrap)
    try:
        contents = {}
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30, cached=False
            )
            contents[partition] = PartitionContents(low, high, complete=low >= high)
        pending = [p for p, c in contents.items() if not c.complete]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout
        while any(not c.complete for c in contents.values()) and time.monotonic() < deadline:
            for msg in consumer.consume(2_000, 0.5):
                _take(contents[msg.partition()], msg)  # type: ignore[index]
        return contents
    finally:
        consumer.close()


def _take(part: PartitionContents, msg: Message) -> None:
    error = msg.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            part.complete = True
        else:
            raise KafkaException(error)
        return
    offset = msg.offset()
    assert offset is not None
    record_id, whole = parse_value(msg.value())  # type: ignore[arg-type]
    part.offsets.append(offset)
    part.record_ids.append(record_id)
    if not whole:
        part.damaged.append(offset)
    if offset >= part.high - 1:
        part.complete = True


# -- verification -------------------------------------------------------------------------------


@dataclass
class TopicVerdict:
    """What reading one writer's topic back found."""

    writer: Writer
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    deleted_by_request: int = 0
    acknowledged_twice_stored: int = 0  # non-idempotent retries: allowed, counted
    lost_ids: set[bytes] = field(default_factory=set)
    duplicated_ids: set[bytes] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)  # lost/duplicated examples
    violations: list[str] = field(default_factory=list)  # any other broken invariant


def verify_topic(
    writer: Writer,
    contents: dict[int, PartitionContents],
    acks: Sequence[Ack],
    deleted_below: dict[int, int],
) -> TopicVerdict:
    """Check one topic against everything its producer had acknowledged.

    * every acknowledged record is at its acknowledged offset (unless DeleteRecords reported a
      low watermark above that offset);
    * idempotent producers: no id is stored twice; the non-idempotent one: no id that was never
      acknowledged is stored twice (an acknowledged one may be, after a retry);
    * offsets run without a gap from the low to the high watermark; every value is intact;
    * no low watermark is below one DeleteRecords reported.
    """
    verdict = TopicVerdict(writer, acknowledged=len(acks))
    for partition, part in contents.items():
        if not part.complete:
            verdict.violations.append(
                f"{writer.topic}-{partition}: read {len(part.offsets)} records, never reached "
                f"the high watermark {part.high}"
            )
        verdict.violations += [f"{writer.topic}-{partition}: {gap}" for gap in part.gaps()[:5]]
        if part.damaged:
            verdict.violations.append(
                f"{writer.topic}-{partition}: {len(part.damaged)} damaged values, first at "
                f"offset {part.damaged[0]}"
            )
        if part.low < deleted_below.get(partition, 0):
            verdict.violations.append(
                f"{writer.topic}-{partition}: low watermark {part.low} is below "
                f"{deleted_below[partition]}, which DeleteRecords reported"
            )
    _check_acknowledged(verdict, contents, acks, deleted_below)
    _check_duplicates(verdict, contents, acks)
    return verdict


def _check_acknowledged(
    verdict: TopicVerdict,
    contents: dict[int, PartitionContents],
    acks: Sequence[Ack],
    deleted_below: dict[int, int],
) -> None:
    topic = verdict.writer.topic
    for ack in acks:
        part = contents[ack.partition]
        if ack.offset < part.low and ack.offset < deleted_below.get(ack.partition, 0):
            verdict.deleted_by_request += 1
            continue
        stored = part.id_at(ack.offset)
        if stored == ack.record_id:
            continue
        verdict.lost += 1
        verdict.lost_ids.add(ack.record_id)
        if len(verdict.problems) < 10:
            where = (
                f"below the low watermark {part.low}"
                if ack.offset < part.low
                else f"beyond the high watermark {part.high}"
                if ack.offset >= part.high
                else f"holding {stored!r}"
            )
            verdict.problems.append(
                f"lost: {ack.record_id.decode()} acknowledged at {topic}-{ack.partition}@"
                f"{ack.offset}, {where}"
            )


def _check_duplicates(
    verdict: TopicVerdict, contents: dict[int, PartitionContents], acks: Sequence[Ack]
) -> None:
    stored = Counter(record_id for part in contents.values() for record_id in part.record_ids)
    acknowledged = {ack.record_id for ack in acks}
    for record_id, copies in stored.items():
        if copies == 1:
            continue
        if not verdict.writer.idempotent and record_id in acknowledged:
            verdict.acknowledged_twice_stored += copies - 1
            continue
        verdict.duplicated += copies - 1
        verdict.duplicated_ids.add(record_id)
        if len(verdict.problems) < 20:
            verdict.problems.append(
                f"duplicated: {record_id.decode()} stored {copies} times in {verdict.writer.topic}"
            )


# -- the group's commits -------------------------------------------------------------------------


def commit_regressions(commits: Sequence[tuple[str, int, int]]) -> list[str]:
    """Acknowledged commits lower than an earlier acknowledged commit of the same partition."""
    highest: dict[tuple[str, int], int] = {}
    found = []
    for topic, partition, offset in commits:
        before = highest.get((topic, partition), -1)
        if offset < before:
            found.append(f"commit of {topic}-{partition} went back from {before} to {offset}")
        highest[(topic, partition)] = max(before, offset)
    return found


def highest_commits(commits: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    highest: dict[tuple[str, int], int] = {}
    for topic, partition, offset in commits:
        highest[(topic, partition)] = max(highest.get((topic, partition), -1), offset)
    return highest


def commits_kept(bootstrap: str, expected: dict[tuple[str, int], int], when: str) -> list[str]:
    """The group's committed offsets, as the broker reports them, must not be below the
    highest commits it had acknowledged."""
    if not expected:
        return []
    stored = committed_offsets(bootstrap)
    return [
        f"committed offset of {topic}-{partition} {when} is {stored.get((topic, partition))}, "
        f"below the acknowledged {offset}"
        for (topic, partition), offset in sorted(expected.items())
        if stored.get((topic, partition), -1) < offset
    ]
