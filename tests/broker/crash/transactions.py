"""Transactions in the crash harness: a confluent-kafka transactional producer (a spawned
process, like the others) runs small transactions over the partitions of its own topic, each
committed or (one in four) aborted, through the broker's kill and restart; a read_committed
reader then checks what the log shows.

The producer writes its outcome of each transaction to its file as it goes, one line each:
``R <txn> <id> <id> ...`` before ending it (the ids of the records in it), then ``C <txn>``
once the commit was acknowledged, ``A <txn>`` once the abort was, or ``U <txn>`` when it
cannot know (the broker died inside EndTxn and the producer had to start again: the decision
may have been made durable or not). A transaction with no outcome line is uncertain too.

:func:`verify_transactions`: every record of each acknowledged committed transaction is read
by read_committed exactly once, no record of an acknowledged abort is, an uncertain
transaction is all there or not at all, and the last stable offset of every partition catches
up with the high watermark (no transaction left hanging).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.broker.crash.acks import Counters
from tests.broker.crash.workload import PARTITIONS, QUIET
from tests.broker.txn_support import READ_COMMITTED, READ_UNCOMMITTED, end_offsets

TOPIC = "crash-transactional"
TRANSACTIONAL_ID = "crash-harness-txn"
RECORDS_PER_TXN = 16
ABORT_ONE_IN = 4
TXN_TIMEOUT_MS = 10_000  # a transaction orphaned by a killed producer ends this soon
RETRY_FOR_S = 60.0  # commit/abort retries through a restart

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TxnJob:
    bootstrap: str
    round_number: int
    seed: int
    path: str


def _producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "transactional.id": TRANSACTIONAL_ID,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "linger.ms": 5,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
    )
    deadline = time.monotonic() + RETRY_FOR_S
    while True:  # the broker may be down right now
        try:
            producer.init_transactions(10)
            return producer
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _end(producer: Producer, commit: bool) -> bool:
    """End the open transaction; True once the broker acknowledged that outcome, False when
    it cannot be known (the producer must start again)."""
    deadline = time.monotonic() + RETRY_FOR_S
    while time.monotonic() < deadline:
        try:
            if commit:
                producer.commit_transaction(10)
            else:
                producer.abort_transaction(10)
            return True
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                return False
            if error.txn_requires_abort():
                if not commit:
                    continue
                return False  # the commit may or may not have been decided before the error
            time.sleep(0.1)  # retriable: ask again
    return False


def run_txn_producer(job: TxnJob, stop: Any, counters: Counters) -> None:
    """Entry point of the transactional producer process: transactions until ``stop``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s txn producer %(message)s")
    os.nice(5)
    rng = random.Random(job.seed)
    with open(job.path, "a", buffering=1) as out:
        producer = _producer(job.bootstrap)
        number = 0
        while not stop.is_set():
            name = f"r{job.round_number}t{number}"
            number += 1
            ids = [f"{name}-{i}".encode() for i in range(RECORDS_PER_TXN)]
            try:
                producer.begin_transaction()
                out.write(f"R {name} {' '.join(i.decode() for i in ids)}\n")
                for i, record_id in enumerate(ids):
                    _produce(producer, record_id, i % PARTITIONS)
                producer.flush(RETRY_FOR_S)
            except KafkaException as exc:  # the broker died mid-transaction
                log.warning("%s: %s", name, exc)
                outcome = _end(producer, commit=False)
                out.write(f"{'A' if outcome else 'U'} {name}\n")
                if not outcome:
                    producer = _producer(job.bootstrap)
                continue
            commit = rng.randrange(ABORT_ONE_IN) != 0
            if _end(producer, commit):
                out.write(f"{'C' if commit else 'A'} {name}\n")
                counters.records.value += len(ids) if commit else 0
                counters.commits.value += 1
            else:
                out.write(f"U {name}\n")
                producer = _producer(job.bootstrap)


def _produce(producer: Producer, record_id: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(TOPIC, record_id, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


@dataclass
class TxnLog:
    """What the producer's files say, over every round."""

    records: dict[str, list[bytes]] = field(default_factory=dict)
    committed: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)

    @property
    def uncertain(self) -> set[str]:
        return set(self.records) - self.committed - self.aborted

    def read(self, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "R":
                name, *ids = rest.split()
                self.records[name] = [i.encode() for i in ids]
            elif kind == "C":
                self.committed.add(rest)
            elif kind == "A":
                self.aborted.add(rest)


def _read_committed(bootstrap: str, timeout: float = 120.0) -> tuple[Counter[bytes], list[str]]:
    """Every value a read_committed consumer reads of TOPIC, and problems on the way."""
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-verify-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    problems: list[str] = []
    seen: Counter[bytes] = Counter()
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(2_000, 0.2):
                error, partition = message.error(), message.partition()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition or 0)
                elif error is not None:
                    problems.append(f"read_committed: {error}")
                else:
                    at_end.discard(partition or 0)
                    seen[message.value() or b""] += 1
        if len(at_end) < PARTITIONS:
            problems.append(f"read_committed reached the end of only {sorted(at_end)}")
    finally:
        consumer.close()
    return seen, problems


def _stable_everywhere(bootstrap: str, timeout: float) -> list[str]:
    """Wait until each partition's last stable offset is its high watermark (no transaction
    left open: one orphaned by a killed producer ends by its timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        stable = end_offsets(bootstrap, TOPIC, PARTITIONS, READ_COMMITTED)
        high = end_offsets(bootstrap, TOPIC, PARTITIONS, READ_UNCOMMITTED)
        if stable == high:
            return []
        if time.monotonic() > deadline:
            return [f"last stable offsets {stable} stuck below high watermarks {high}"]
        time.sleep(0.5)


def verify_transactions(bootstrap: str, txns: TxnLog) -> list[str]:
    """Violations of transactional atomicity in TOPIC (empty when all is well)."""
    problems = _stable_everywhere(bootstrap, TXN_TIMEOUT_MS / 1000 + 30)
    seen, read_problems = _read_committed(bootstrap)
    problems += read_problems
    owner = {record_id: name for name, ids in txns.records.items() for record_id in ids}
    problems += [f"read_committed read {v!r} twice" for v, n in seen.items() if n > 1][:10]
    problems += [f"read_committed read {v!r} of no transaction" for v in seen if v not in owner][
        :10
    ]
    for name, ids in txns.records.items():
        present = sum(1 for i in ids if seen[i] > 0)
        if name in txns.committed and present != len(ids):
            problems.append(f"committed {name}: {len(ids) - present} of {len(ids)} records lost")
        elif name in txns.aborted and present:
            problems.append(f"aborted {name}: {present} records read by read_committed")
        elif present not in (0, len(ids)):
            problems.append(f"uncertain {name}: {present} of {len(ids)} records read")
    return problems
