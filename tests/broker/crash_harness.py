"""A crash harness: ``kill -9`` a real kayak broker under acks=all load, then prove that no
acknowledged record was lost or stored twice.

One :class:`CrashHarness` owns a ``kayak broker`` process (or a ``--shards 2`` cluster) on one
data directory, at the default segment size, so that the crash hits large *active* segments,
the ones recovery has to rescan. Each round (:meth:`CrashHarness.run_round`):

* three producer processes write to their own 4-partition topics with acks=all:
  confluent-kafka idempotent, confluent-kafka non-idempotent and kayak's own (idempotent)
  producer. Values are 24 B to ~9 kB with a unique id in each, plus now and then a burst of
  more than 1 MiB to one partition (one record batch). Each producer appends every
  acknowledgement (partition, offset, id, size) to its own file as it goes: the broker dies,
  the producers do not, and their record of what was acknowledged must outlive the broker;
* a confluent-kafka consumer group (another process) reads the three topics and commits
  synchronously every few hundred records, logging each acknowledged commit;
* in this process: DeleteRecords on one partition, and a change of ``retention.bytes``
  (AlterConfigs and IncrementalAlterConfigs, a round each) on a throwaway topic with 64 KiB
  segments that a writer keeps filling, so that retention deletes segments during the round
  (the broker runs ``--retention-check-interval-ms 200``);
* once the producers have had at least ``mib_per_round`` acknowledged (and the group two
  commits), at a random point, the broker (or one shard of the cluster) gets SIGKILL, and is
  started again on the same data directory and port (or restarted by its supervisor); the
  producers retry through that, are stopped once each has had records acknowledged after the
  restart (and the group a commit), and drain;
* then everything is read back from the log start with a raw reader (confluent-kafka,
  ``assign`` from ``OFFSET_BEGINNING``) and checked: see :func:`verify_topic`; the group's
  committed offsets must never go back (:func:`commit_regressions`, and the broker's answer
  right after the restart and at the end); retention must have deleted segments.

Acknowledgements accumulate over rounds, so every round re-checks everything acknowledged
before. :meth:`CrashHarness.finish` stops the broker cleanly and runs ``kayak log verify`` over
the data directory when that command exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self, TextIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from tests.broker.conftest import BrokerProcess

log = logging.getLogger(__name__)

MiB = 1024 * 1024
PARTITIONS = 4
GROUP = "crash-harness"
RETENTION_TOPIC = "crash-retention"
RETENTION_SEGMENT_BYTES = 64 * 1024
RETENTION_WRITE_BYTES_PER_S = 1 * MiB
MAX_MESSAGE_BYTES = 8 * MiB  # topic max.message.bytes: room for the > 1 MiB bursts
BURST_BYTES = int(1.5 * MiB)  # one partition's share of a burst: one batch above 1 MiB
COMMIT_EVERY = 300
# librdkafka logs every refused connection while the broker is down; those are expected, and
# anything that matters reaches the harness through delivery reports, error_cb and exceptions.
QUIET = {"log_level": 2}
DELIVERY_TIMEOUT_MS = 600_000  # retry through any restart; the round's deadlines come first
DRAIN_TIMEOUT_S = 180.0
_RECOVERY_LINE = re.compile(
    r"torn tail|corrupt|rebuilding|unclean start|Traceback|ERROR|CRITICAL", re.IGNORECASE
)


# -- records ----------------------------------------------------------------------------------


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


DELETE_RECORDS_PARTITION = (Writer.CONFLUENT_IDEMPOTENT.topic, 0)


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


# -- acknowledgement files ----------------------------------------------------------------------


class Ack(NamedTuple):
    partition: int
    offset: int
    record_id: bytes
    size: int


class AckFile:
    """Appends what the broker acknowledged to a file, flushed as it goes.

    Lines: ``A partition offset id size`` (acknowledged), ``F id error`` (delivery failed),
    ``X error`` (the producer stopped on a fatal error), ``D sent acked failed unfinished``
    (the producer's last line).
    """

    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", encoding="ascii")  # noqa: SIM115 - closed by close()
        self.sent = self.acked = self.failed = 0
        self._dirty = False

    def ack(self, partition: int, offset: int, record_id: bytes, size: int) -> None:
        self._file.write(f"A {partition} {offset} {record_id.decode()} {size}\n")
        self.acked += 1
        self._dirty = True

    def fail(self, record_id: bytes, error: object) -> None:
        message = " ".join(str(error).split())
        self._file.write(f"F {record_id.decode()} {message}\n")
        self.failed += 1
        self._dirty = True

    def fatal(self, error: object) -> None:
        self._file.write("X " + " ".join(str(error).split()) + "\n")
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self._file.flush()
            self._dirty = False

    def close(self, unfinished: int) -> None:
        self._file.write(f"D {self.sent} {self.acked} {self.failed} {unfinished}\n")
        self._file.close()


@dataclass
class AckFileContents:
    acks: list[Ack] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    done: tuple[int, ...] | None = None


def read_ack_file(path: Path) -> AckFileContents:
    contents = AckFileContents()
    text = path.read_text(encoding="ascii") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # being written
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "A":
            partition, offset, record_id, size = rest.split()
            contents.acks.append(Ack(int(partition), int(offset), record_id.encode(), int(size)))
        elif kind == "F":
            contents.failures.append(rest)
        elif kind == "X":
            contents.fatal.append(rest)
        elif kind == "D":
            contents.done = tuple(int(n) for n in rest.split())
    return contents


# -- producer processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerJob:
    """What a producer process needs (picklable: it crosses a spawn)."""

    writer: Writer
    bootstrap: str
    round_number: int
    seed: int
    ack_path: str


@dataclass
class Counters:
    """Shared with a child process (``RawValue``s): records and bytes acknowledged (a
    producer), records consumed and commits acknowledged (the group member)."""

    records: ctypes.c_longlong
    bytes: ctypes.c_longlong
    commits: ctypes.c_longlong


def run_producer(job: ProducerJob, stop: Any, counters: Counters) -> None:
    """Entry point of a producer process: produce until ``stop`` is set, then drain."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s producer %(message)s")
    # The producers could take every core; the broker and the group member must keep up.
    os.nice(5)
    if job.writer is Writer.KAYAK:
        asyncio.run(_produce_with_kayak(job, stop, counters))
    else:
        _produce_with_confluent(job, stop, counters)


def _confluent_producer_config(job: ProducerJob) -> dict[str, object]:
    return {
        **QUIET,
        "bootstrap.servers": job.bootstrap,
        "acks": "all",
        "enable.idempotence": job.writer.idempotent,
        "linger.ms": 5,
        # Batches of up to 2 MiB from one producer, 512 KiB from the other.
        "batch.size": 2 * MiB if job.writer.idempotent else 512 * 1024,
        "message.max.bytes": MAX_MESSAGE_BYTES,
        "queue.buffering.max.kbytes": 8 * 1024,
        "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }


def _produce_with_confluent(job: ProducerJob, stop: Any, counters: Counters) -> None:
    out = AckFile(job.ack_path)
    fatal: list[str] = []

    def on_error(error: KafkaError) -> None:
        if error.fatal():
            fatal.append(str(error))

    def delivered(record_id: bytes, size: int, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            out.fail(record_id, error)
            return
        out.ack(msg.partition(), msg.offset(), record_id, size)  # type: ignore[arg-type]
        counters.records.value += 1
        counters.bytes.value += size

    config = _confluent_producer_config(job)
    producer = Producer({**config, "error_cb": on_error})
    work = Workload(job.writer, job.round_number, job.seed)
    topic = job.writer.topic
    try:
        while not fatal and not stop.is_set():
            for _ in range(32):
                partition, records = work.next_records()
                for record_id, value in records:
                    callback = functools.partial(delivered, record_id, len(value))
                    if not _produce_one(producer, topic, partition, value, callback, out, stop):
                        break
                    out.sent += 1
                producer.poll(0)
            out.flush()
    except KafkaException as exc:
        fatal.append(str(exc))
    for error in fatal:
        out.fatal(error)
    unfinished = _drain_confluent(producer, out)
    out.close(unfinished)


def _produce_one(
    producer: Producer,
    topic: str,
    partition: int,
    value: bytes,
    callback: Callable[[KafkaError | None, Message], None],
    out: AckFile,
    stop: Any,
) -> bool:
    """Hand one record to librdkafka, waiting while its queue is full (the broker may be
    down); False if stopped before it was taken."""
    while True:
        try:
            producer.produce(topic, value, partition=partition, on_delivery=callback)
            return True
        except BufferError:
            producer.poll(0.05)
            out.flush()
            if stop.is_set():
                return False


def _drain_confluent(producer: Producer, out: AckFile) -> int:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while len(producer) > 0 and time.monotonic() < deadline:
        producer.poll(0.2)
        out.flush()
    out.flush()
    return len(producer)


def _kayak_producer_config(job: ProducerJob) -> dict[str, object]:
    return {
        "bootstrap.servers": job.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 2 * MiB,  # a burst (send_batch, 1.5 MiB) is one batch
        "max.request.size": MAX_MESSAGE_BYTES,
        "buffer.memory": 8 * MiB,
        "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
        "max.block.ms": DELIVERY_TIMEOUT_MS,
        "retry.backoff.ms": 50,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }


async def _produce_with_kayak(job: ProducerJob, stop: Any, counters: Counters) -> None:
    from kayak.client import Producer as KayakProducer
    from kayak.client.producer.record_metadata import RecordMetadata, RecordMetadataList

    out = AckFile(job.ack_path)

    def one_done(record_id: bytes, size: int, future: asyncio.Future[RecordMetadata]) -> None:
        if future.exception() is not None:
            out.fail(record_id, future.exception())
            return
        meta = future.result()
        out.ack(meta.partition, meta.offset, record_id, size)
        counters.records.value += 1
        counters.bytes.value += size

    def batch_done(
        records: list[tuple[bytes, bytes]], future: asyncio.Future[RecordMetadataList]
    ) -> None:
        if future.exception() is not None:
            for record_id, _ in records:
                out.fail(record_id, future.exception())
            return
        for (record_id, value), meta in zip(records, future.result(), strict=True):
            out.ack(meta.partition, meta.offset, record_id, len(value))
            counters.records.value += 1
            counters.bytes.value += len(value)

    async def flush_periodically() -> None:
        while True:
            await asyncio.sleep(0.02)
            out.flush()

    work = Workload(job.writer, job.round_number, job.seed)
    topic = job.writer.topic
    unfinished = 0
    async with KayakProducer(_kayak_producer_config(job)) as producer:
        flusher = asyncio.create_task(flush_periodically())
        try:
            while not stop.is_set():
                for _ in range(32):
                    partition, records = work.next_records()
                    out.sent += len(records)
                    if len(records) == 1:
                        record_id, value = records[0]
                        one = await producer.send(topic, value, partition=partition)
                        one.add_done_callback(functools.partial(one_done, record_id, len(value)))
                    else:
                        values = [value for _, value in records]
                        many = await producer.send_batch(topic, values, partition=partition)
                        many.add_done_callback(functools.partial(batch_done, records))
            try:
                await producer.flush(DRAIN_TIMEOUT_S)
            except Exception as exc:  # whatever stopped the drain is the finding
                out.fatal(exc)
                unfinished = out.sent - out.acked - out.failed
        except Exception as exc:
            out.fatal(exc)
        finally:
            flusher.cancel()
    out.close(unfinished)


# -- the consumer group process ---------------------------------------------------------------


def run_group_consumer(bootstrap: str, commit_path: str, stop: Any, counters: Counters) -> None:
    """Entry point of the group member: consume the data topics, commit synchronously every
    ``COMMIT_EVERY`` records, log each acknowledged commit as ``C topic partition offset time``
    and each failed one as ``E error``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s consumer %(message)s")
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            "fetch.max.bytes": 16 * MiB,
            "max.partition.fetch.bytes": MAX_MESSAGE_BYTES,
        }
    )
    consumer.subscribe([w.topic for w in Writer])
    with open(commit_path, "a", encoding="ascii") as out:
        since_commit = 0
        while not stop.is_set():
            for msg in consumer.consume(100, 0.2):
                if msg.error() is None:
                    since_commit += 1
                    counters.records.value += 1
            if since_commit >= COMMIT_EVERY:
                _commit(consumer, out, counters)
                since_commit = 0
        _commit(consumer, out, counters)
        consumer.close()


def _commit(consumer: Consumer, out: TextIO, counters: Counters) -> None:
    try:
        committed = consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            out.write(f"E {time.time():.3f} " + " ".join(str(exc).split()) + "\n")
        return
    now = time.time()
    for tp in committed or []:
        if tp.error is None and tp.offset >= 0:
            out.write(f"C {tp.topic} {tp.partition} {tp.offset} {now:.3f}\n")
    out.flush()
    counters.commits.value += 1


def read_commit_file(path: Path) -> list[tuple[str, int, int]]:
    """The acknowledged commits in the order they were acknowledged."""
    commits = []
    text = path.read_text(encoding="ascii") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if line.startswith("C ") and line.endswith("\n"):
            _, topic, partition, offset, _when = line.split()
            commits.append((topic, int(partition), int(offset)))
    return commits


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


# -- the broker under test ------------------------------------------------------------------------


def free_ports(count: int) -> int:
    """A base port such that base .. base+count-1 are free now."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65_000:
            continue
        if all(_port_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def child_pids(pid: int) -> list[int]:
    """The live (not yet reaped) child processes of ``pid``."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    return [p for p in pids if not _is_zombie(p)]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


class BrokerUnderTest:
    """``kayak broker`` (one process, or a ``--shards N`` supervisor with N children) on fixed
    ports, so that a restart comes back where the clients look for it."""

    def __init__(self, data_dir: Path, shards: int, flush: str) -> None:
        self.shards = shards
        self.base_port = free_ports(shards)
        extra = ["--flush", flush, "--retention-check-interval-ms", "200"]
        if shards > 1:
            extra += ["--shards", str(shards)]
        self.process = BrokerProcess(data_dir, extra_args=extra, port=self.base_port)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(self.shards))

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    def start(self) -> None:
        self.process.start(timeout=120)
        # The log names whichever shard listened last: the cluster's ports are fixed.
        self.process.port = self.base_port
        self._wait_listening(time.monotonic() + 120)

    def _wait_listening(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if all(_accepts(self.base_port + i) for i in range(self.shards)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker not listening: {self.process.log_text()[-3000:]}")

    def kill(self, rng: random.Random) -> str:
        """SIGKILL the broker, or one shard of the cluster; says which."""
        assert self.process.process is not None
        if self.shards == 1:
            pid = self.process.process.pid
            self.process.stop(signal.SIGKILL)  # and wait until it is gone
            return f"broker pid {pid}"
        shards = child_pids(self.process.process.pid)
        if not shards:
            raise RuntimeError("the supervisor has no shard processes")
        victim = rng.choice(shards)
        os.kill(victim, signal.SIGKILL)
        self._killed = victim
        return f"shard pid {victim} of {len(shards)}"

    def recover(self, timeout: float = 120.0) -> str:
        """Bring the broker back after :meth:`kill`; says how it came back."""
        deadline = time.monotonic() + timeout
        if self.shards == 1:
            self.start()
            return "restarted"
        supervisor = self.process.process
        assert supervisor is not None
        while time.monotonic() < deadline:
            if supervisor.poll() is not None:
                self.process.stop()
                self.start()
                return "supervisor stopped the cluster: restarted it"
            shards = child_pids(supervisor.pid)
            if len(shards) == self.shards and self._killed not in shards:
                self._wait_listening(deadline)
                return "supervisor restarted the shard"
            time.sleep(0.05)
        raise RuntimeError("the cluster neither came back nor stopped after a shard was killed")

    def stop(self) -> int:
        if self.process.process is None:
            return 0
        return self.process.stop(signal.SIGTERM, timeout=120)

    def log_offset(self) -> int:
        path = self.process.log_path
        return path.stat().st_size if path is not None and path.exists() else 0

    def log_since(self, offset: int) -> str:
        path = self.process.log_path
        if path is None or not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


@dataclass
class LogVerify:
    """The outcome of ``kayak log verify DATA_DIR`` (``available`` False: no such command)."""

    available: bool
    returncode: int = 0
    output: str = ""


def kayak_log_verify(data_dir: Path) -> LogVerify:
    kayak = [sys.executable, "-m", "kayak"]
    probe = subprocess.run([*kayak, "log", "--help"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return LogVerify(available=False, output=probe.stderr.strip()[-500:])
    done = subprocess.run(
        [*kayak, "log", "verify", str(data_dir)], capture_output=True, text=True, timeout=600
    )
    return LogVerify(True, done.returncode, (done.stdout + done.stderr).strip()[-3000:])


# -- side traffic: DeleteRecords, retention ------------------------------------------------------


def _retry(what: str, action: Callable[[], Any], stop: threading.Event, timeout: float) -> Any:
    """Run an admin call until it succeeds (the broker may be down for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except Exception as exc:  # any failure while the broker restarts
            if stop.is_set() or time.monotonic() > deadline:
                raise RuntimeError(f"{what} kept failing: {exc}") from exc
            time.sleep(0.2)


class SideTraffic:
    """DeleteRecords on one partition and a retention change on a throwaway topic, with a
    writer keeping that topic's 64 KiB segments coming; all in threads of this process."""

    def __init__(self, bootstrap: str, round_number: int, deleted_below: dict[int, int]) -> None:
        self._bootstrap = bootstrap
        self._round = round_number
        self.deleted_below = deleted_below
        self.retention_bytes = 256 * 1024 if round_number % 2 == 0 else 192 * 1024
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
        high = _retry("ListOffsets", high_watermark, self.stop, 120)
        while high < before + 200 and not self.stop.wait(0.2):
            high = _retry("ListOffsets", high_watermark, self.stop, 120)
        target = max(before, int(high * 0.6))

        def delete() -> int:
            found = admin.delete_records([TopicPartition(topic, partition, target)])
            return int(next(iter(found.values())).result(15).low_watermark)

        low = _retry("DeleteRecords", delete, self.stop, 120)
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
        _retry(api, alter, self.stop, 120)
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


# -- the harness ---------------------------------------------------------------------------------


@dataclass
class HarnessConfig:
    """One harness run: where, which broker layout, how much per round."""

    work_dir: Path
    shards: int = 1
    flush: str = "group"
    mib_per_round: float = 50.0
    seed: int | None = None
    reach_timeout_s: float = 300.0  # to write mib_per_round before the kill
    after_restart_mib: float = 2.0  # acknowledged after the restart before the producers stop
    # Called with the data directory while a one-process broker is down after the kill: the
    # harness's own tests damage what the broker left there to prove the checks catch it.
    after_kill: Callable[[Path], None] | None = None

    @property
    def variant(self) -> str:
        return f"shards={self.shards} flush={self.flush}"


@dataclass
class RoundResult:
    """What one round wrote, where the crash hit and what reading back found."""

    round_number: int
    variant: str
    mib_written: float = 0.0
    mib_before_kill: float = 0.0
    records_acked: int = 0  # this round
    total_acked: int = 0  # every round so far, all re-verified
    lost: int = 0
    duplicated: int = 0
    deleted_by_request: int = 0
    acknowledged_twice_stored: int = 0
    commits_acked: int = 0
    group_consumed: int = 0
    killed: str = ""
    came_back: str = ""
    restart_s: float = 0.0
    verify_s: float = 0.0
    round_s: float = 0.0
    side_traffic: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    recovery_lines: list[str] = field(default_factory=list)

    @property
    def torn_tail_cuts(self) -> int:
        return sum("torn tail" in line for line in self.recovery_lines)

    def describe(self) -> str:
        """A multi-line account for assertion messages and reports."""
        lines = [
            f"round {self.round_number} [{self.variant}]: {self.mib_written:.1f} MiB written "
            f"({self.mib_before_kill:.1f} before the kill of {self.killed}; {self.came_back}), "
            f"{self.records_acked} records acknowledged this round, {self.total_acked} in all: "
            f"lost {self.lost}, duplicated {self.duplicated}, deleted by DeleteRecords "
            f"{self.deleted_by_request}, plain-producer retry copies "
            f"{self.acknowledged_twice_stored}; the group consumed {self.group_consumed} records, "
            f"{self.commits_acked} commits acknowledged",
            *self.side_traffic,
            *(f"  {p}" for p in self.problems[:20]),
            *(f"  violation: {v}" for v in self.violations[:20]),
            *(f"  broker: {line}" for line in self.recovery_lines[:20]),
        ]
        return "\n".join(lines)


@dataclass
class _Workers:
    stop: Any
    producers: dict[Writer, tuple[SpawnProcess, Counters]]
    consumer: tuple[SpawnProcess, Counters]
    ack_paths: dict[Writer, Path]
    commit_path: Path

    def acked_bytes(self) -> int:
        return sum(c.bytes.value for _, c in self.producers.values())

    def running(self) -> set[Writer]:
        """The producers still producing (not stopped early by a fatal error)."""
        return {w for w, (process, _) in self.producers.items() if process.is_alive()}

    def commits(self) -> int:
        return int(self.consumer[1].commits.value)

    def acked_records(self) -> dict[Writer, int]:
        return {w: c.records.value for w, (_, c) in self.producers.items()}


class CrashHarness:
    """Rounds of load, ``kill -9`` and verification against one broker data directory.

    Use as a context manager: it starts the broker and creates the topics, and stops the
    broker on the way out. :meth:`run_round` as often as wanted, then :meth:`finish`.
    """

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config
        self.seed = config.seed if config.seed is not None else random.randrange(2**32)
        self.rng = random.Random(self.seed)
        self.broker = BrokerUnderTest(config.work_dir / "data", config.shards, config.flush)
        self._ctx: SpawnContext = multiprocessing.get_context("spawn")
        self._acks: dict[Writer, list[Ack]] = {w: [] for w in Writer}
        self._commits: list[tuple[str, int, int]] = []
        self._deleted_below: dict[int, int] = {}
        self._rounds = 0
        # Over the whole run: a record lost in one round stays lost in the next ones.
        self.lost_ids: set[bytes] = set()
        self.duplicated_ids: set[bytes] = set()

    @property
    def acknowledged(self) -> int:
        """Records acknowledged in every round so far (each verified after every round)."""
        return sum(len(acks) for acks in self._acks.values())

    def __enter__(self) -> Self:
        self.broker.start()
        try:
            self._create_topics()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.broker.stop()

    def _create_topics(self) -> None:
        admin = AdminClient({**QUIET, "bootstrap.servers": self.broker.bootstrap})
        big = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
        topics = [NewTopic(w.topic, PARTITIONS, 1, config=big) for w in Writer]
        topics.append(
            NewTopic(RETENTION_TOPIC, 1, 1, config={"segment.bytes": str(RETENTION_SEGMENT_BYTES)})
        )
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result(60)

    # -- one round --------------------------------------------------------------------------

    def run_round(self) -> RoundResult:
        """Load, crash at a random point past ``mib_per_round``, recover, drain, verify."""
        number = self._rounds
        self._rounds += 1
        result = RoundResult(number, f"{self.config.variant} seed={self.seed}")
        started = time.monotonic()
        log_offset = self.broker.log_offset()
        workers = self._start_workers(number)
        side = SideTraffic(self.broker.bootstrap, number, self._deleted_below)
        try:
            side.start_writer()
            self._load_then_crash(workers, side, result)
            self._drain(workers, result)
        finally:
            self._stop_workers(workers)
            side.join()
        result.side_traffic = [f"  {line}" for line in side.done]
        result.violations += side.errors
        self._collect(workers, result)
        verify_started = time.monotonic()
        self._verify(result, side.retention_bytes)
        result.verify_s = time.monotonic() - verify_started
        result.recovery_lines = [
            line.strip()
            for line in self.broker.log_since(log_offset).splitlines()
            if _RECOVERY_LINE.search(line)
        ]
        result.round_s = time.monotonic() - started
        log.info("%s", result.describe())
        return result

    def _start_workers(self, number: int) -> _Workers:
        stop = self._ctx.Event()
        acks_dir = self.config.work_dir / "acks"
        acks_dir.mkdir(parents=True, exist_ok=True)
        # The group member first: it is the slowest to get going (spawn, join, assignment).
        commit_path = acks_dir / f"commits-r{number}.txt"
        group_counters = self._counters()
        consumer = self._ctx.Process(
            target=run_group_consumer,
            args=(self.broker.bootstrap, str(commit_path), stop, group_counters),
            name="group consumer",
        )
        consumer.start()
        producers = {}
        ack_paths = {}
        for writer in Writer:
            ack_paths[writer] = acks_dir / f"{writer.value}-r{number}.txt"
            job = ProducerJob(
                writer, self.broker.bootstrap, number, self.rng.getrandbits(32),
                str(ack_paths[writer]),
            )  # fmt: skip
            counters = self._counters()
            process = self._ctx.Process(
                target=run_producer, args=(job, stop, counters), name=f"producer {writer}"
            )
            process.start()
            producers[writer] = (process, counters)
        return _Workers(stop, producers, (consumer, group_counters), ack_paths, commit_path)

    def _counters(self) -> Counters:
        return Counters(*(self._ctx.RawValue(ctypes.c_longlong, 0) for _ in range(3)))

    def _load_then_crash(self, workers: _Workers, side: SideTraffic, result: RoundResult) -> None:
        target = int(self.config.mib_per_round * MiB * self.rng.uniform(1.0, 1.25))
        deadline = time.monotonic() + self.config.reach_timeout_s
        side_effects = [
            (0.35 * target, side.delete_records),
            (0.5 * target, side.alter_retention),
        ]
        # The crash must also find the group committing: wait for its first commits too.
        while workers.acked_bytes() < target or workers.commits() < 2:
            while side_effects and workers.acked_bytes() >= side_effects[0][0]:
                side_effects.pop(0)[1]()
            if not workers.running():
                result.violations.append("every producer stopped before the kill")
                break
            if time.monotonic() > deadline:
                result.violations.append(
                    f"only {workers.acked_bytes() / MiB:.1f} MiB and {workers.commits()} commits "
                    f"acknowledged in {self.config.reach_timeout_s:.0f} s"
                )
                break
            time.sleep(0.05)
        for _, effect in side_effects:
            effect()
        result.mib_before_kill = workers.acked_bytes() / MiB
        before_kill = highest_commits(read_commit_file(workers.commit_path))
        result.killed = self.broker.kill(self.rng)
        killed_at = time.monotonic()
        log.info("killed %s at %.1f MiB", result.killed, result.mib_before_kill)
        if self.config.after_kill is not None and self.config.shards == 1:
            self.config.after_kill(self.broker.data_dir)
        time.sleep(self.rng.uniform(0.0, 0.5))
        result.came_back = self.broker.recover()
        result.restart_s = time.monotonic() - killed_at
        result.violations += self._committed_not_below(before_kill, "after the restart")

    def _drain(self, workers: _Workers, result: RoundResult) -> None:
        """Let every producer have records acknowledged after the restart, and the group a
        commit, then stop them."""
        at_restart = workers.acked_records()
        bytes_at_restart = workers.acked_bytes()
        commits_at_restart = workers.commits()
        enough = self.config.after_restart_mib * MiB
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # A producer that stopped on its own (a fatal error) reports why in its file.
            running = workers.running()
            progressed = all(n > at_restart[w] for w, n in workers.acked_records().items()
                             if w in running)  # fmt: skip
            committed = workers.commits() > commits_at_restart
            if progressed and committed and workers.acked_bytes() - bytes_at_restart >= enough:
                return
            time.sleep(0.05)
        stuck = [
            w.value
            for w, n in workers.acked_records().items()
            if n <= at_restart[w] and w in workers.running()
        ]
        if workers.commits() == commits_at_restart:
            stuck.append("the group's commits")
        result.violations.append(f"nothing acknowledged after the restart for {stuck} in 120 s")

    def _stop_workers(self, workers: _Workers) -> None:
        workers.stop.set()
        processes = [p for p, _ in workers.producers.values()] + [workers.consumer[0]]
        deadline = time.monotonic() + DRAIN_TIMEOUT_S + 60
        for process in processes:
            process.join(timeout=max(1.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("%s did not stop: terminating it", process.name)
                process.terminate()
                process.join(10)

    def _collect(self, workers: _Workers, result: RoundResult) -> None:
        """Read the acknowledgement and commit files of the round."""
        for writer, path in workers.ack_paths.items():
            contents = read_ack_file(path)
            self._acks[writer] += contents.acks
            result.records_acked += len(contents.acks)
            result.mib_written += sum(a.size for a in contents.acks) / MiB
            if contents.failures:
                result.violations.append(
                    f"{writer}: {len(contents.failures)} deliveries failed, first: "
                    f"{contents.failures[0]}"
                )
            result.violations += [f"{writer} stopped: {error}" for error in contents.fatal]
            if contents.done is None:
                result.violations.append(f"{writer}: the producer did not finish its file")
            elif contents.done[3]:
                result.violations.append(f"{writer}: {contents.done[3]} records never answered")
        commits = read_commit_file(workers.commit_path)
        result.commits_acked = len(commits)
        result.group_consumed = workers.consumer[1].records.value
        self._commits += commits
        result.violations += commit_regressions(self._commits)
        result.total_acked = self.acknowledged

    def _committed_not_below(self, expected: dict[tuple[str, int], int], when: str) -> list[str]:
        """The group's committed offsets, as the broker reports them, must not be below the
        highest commits it had acknowledged."""
        if not expected:
            return []
        admin = AdminClient({**QUIET, "bootstrap.servers": self.broker.bootstrap})
        request = [ConsumerGroupTopicPartitions(GROUP)]

        def committed() -> dict[tuple[str, int], int]:
            answer = admin.list_consumer_group_offsets(request, request_timeout=10)
            group = answer[GROUP].result(15)
            return {(tp.topic, tp.partition): tp.offset for tp in group.topic_partitions}

        stored = _retry("OffsetFetch", committed, threading.Event(), 120)
        return [
            f"committed offset of {topic}-{partition} {when} is {stored.get((topic, partition))}, "
            f"below the acknowledged {offset}"
            for (topic, partition), offset in sorted(expected.items())
            if stored.get((topic, partition), -1) < offset
        ]

    def _verify(self, result: RoundResult, retention_bytes: int) -> None:
        bootstrap = self.broker.bootstrap
        for writer in Writer:
            contents = read_topic(bootstrap, writer.topic, PARTITIONS)
            deleted = self._deleted_below if writer.topic == DELETE_RECORDS_PARTITION[0] else {}
            verdict = verify_topic(writer, contents, self._acks[writer], deleted)
            result.lost += verdict.lost
            self.lost_ids |= verdict.lost_ids
            self.duplicated_ids |= verdict.duplicated_ids
            result.duplicated += verdict.duplicated
            result.deleted_by_request += verdict.deleted_by_request
            result.acknowledged_twice_stored += verdict.acknowledged_twice_stored
            result.problems += verdict.problems
            result.violations += verdict.violations
        result.violations += self._committed_not_below(highest_commits(self._commits), "at the end")
        result.violations += check_retention(bootstrap, self.broker.data_dir, retention_bytes)

    # -- the end ---------------------------------------------------------------------------------

    def finish(self) -> LogVerify:
        """Stop the broker cleanly, then check the data directory with ``kayak log verify``."""
        self.broker.stop()
        return kayak_log_verify(self.broker.data_dir)


__all__ = [
    "CrashHarness",
    "HarnessConfig",
    "LogVerify",
    "RoundResult",
    "Writer",
    "kayak_log_verify",
    "make_value",
    "parse_value",
    "verify_topic",
]
