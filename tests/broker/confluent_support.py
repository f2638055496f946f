"""confluent-kafka pieces shared by the broker tests that hold what a broker acknowledged
against what it stores; holds no tests.

- :func:`idempotent_producer` and :func:`record_deliveries`: an acks=all idempotent producer
  that retries through a broker restart, and a delivery callback that keeps every
  acknowledgement (partition, offset, value) and every failure;
- :func:`read_topic_to_end`: every record of a topic's partitions from offset 0 to the end,
  as a consumer sees them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

Acked = tuple[int, int, bytes]  # (partition, offset, value) of an acknowledged record


def idempotent_producer(bootstrap: str, linger_ms: int) -> Producer:
    """An acks=all idempotent producer that keeps retrying through a broker restart (90 s)."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "message.timeout.ms": 90_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 300,
        }
    )


def record_deliveries(
    acked: list[Acked], failed: list[str]
) -> Callable[[KafkaError | None, Message], None]:
    """A delivery callback appending each acknowledged record to ``acked`` and each failed
    delivery's error to ``failed``."""

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[arg-type]

    return delivered


@dataclass
class TopicReadBack:
    """What :func:`read_topic_to_end` read: each partition's records as (offset, value) in log
    order, the partitions whose end it reached, and the errors the consumer reported."""

    records: dict[int, list[tuple[int, bytes | None]]]
    at_end: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def read_topic_to_end(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    timeout: float = 60.0,
    group_id: str = "verify",
    check_crcs: bool = False,
) -> TopicReadBack:
    """Every record of ``topic``'s partitions from offset 0 until each reports its end (or
    ``timeout`` runs out), read with a consumer that is assigned the partitions."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": check_crcs,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    read = TopicReadBack({p: [] for p in range(partitions)})
    deadline = time.monotonic() + timeout
    try:
        while len(read.at_end) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                _take(read, msg)
    finally:
        consumer.close()
    return read


def _take(read: TopicReadBack, msg: Message) -> None:
    partition, offset, error = msg.partition(), msg.offset(), msg.error()
    if error is None:
        assert partition is not None and offset is not None
        read.records[partition].append((offset, msg.value()))
    elif error.code() == KafkaError._PARTITION_EOF:
        assert partition is not None
        read.at_end.add(partition)
    else:
        read.errors.append(str(error))
