"""The committing consumer group of the crash harness: one member, in its own process, reads
the writers' topics and commits synchronously every :data:`COMMIT_EVERY` records, logging each
acknowledged commit to a :class:`~.acks.CommitLog`; and the group's committed offsets as the
broker reports them."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tests.broker.crash.acks import CommitLog, Counters
from tests.broker.crash.broker import retry
from tests.broker.crash.workload import MAX_MESSAGE_BYTES, QUIET, MiB, Writer

GROUP = "crash-harness"
COMMIT_EVERY = 300


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
    out = CommitLog(commit_path)
    try:
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
    finally:
        out.close()


def _commit(consumer: Consumer, out: CommitLog, counters: Counters) -> None:
    try:
        committed = consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            out.failed(exc, time.time())
        return
    now = time.time()
    offsets = [
        (tp.topic, tp.partition, tp.offset)
        for tp in committed or []
        if tp.error is None and tp.offset >= 0
    ]
    out.committed(offsets, now)
    counters.commits.value += 1


def committed_offsets(bootstrap: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as the broker reports them (OffsetFetch), asked again
    while the broker is down."""
    admin = AdminClient({**QUIET, "bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(GROUP)]

    def committed() -> dict[tuple[str, int], int]:
        answer = admin.list_consumer_group_offsets(request, request_timeout=10)
        group = answer[GROUP].result(15)
        return {(tp.topic, tp.partition): tp.offset for tp in group.topic_partitions}

    found: dict[tuple[str, int], int] = retry("OffsetFetch", committed, threading.Event(), 120)
    return found
