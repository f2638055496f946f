"""The two ends of bench/e2e_latency.py, each run in a process of its own (``spawn``).

* :func:`produce`: a confluent-kafka producer pacing ``Load.rate`` messages/s against the
  clock, each value carrying its sequence number and its send time (``monotonic_ns``);
* :func:`consume`: a confluent-kafka (or kayak) consumer reading the partition from offset 0,
  taking each message's latency when ``poll()`` hands it over.

Both send what they saw to the parent through a pipe; bench/e2e_latency.py explains the
method and reports.
"""

from __future__ import annotations

import array
import json
import struct
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import confluent_kafka
from protocol_clients import run_async

CONSUMERS = ("confluent", "kayak")
HEADER = struct.Struct("<qqB")  # sequence number, send time (monotonic ns), warm-up flag
STATS_INTERVAL_MS = 500
POLL_RECORDS = 10_000
NS_PER_MS = 1_000_000
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))


@dataclass(frozen=True)
class Load:
    """What one producer sends: ``rate`` msg/s for ``warmup`` + ``seconds`` seconds."""

    rate: int
    seconds: float
    warmup: float
    size: int
    producer_config: tuple[tuple[str, str], ...] = ()
    linger_ms: int = 0

    @property
    def planned(self) -> int:
        return round(self.rate * (self.warmup + self.seconds))

    @property
    def warm_count(self) -> int:
        return round(self.rate * self.warmup)


# -- the producer (its own process) ----------------------------------------------------------


def produce(bootstrap: str, topic: str, load: Load, measuring: Event, out: Connection) -> None:
    """Send ``load`` to partition 0 of ``topic`` on schedule; report counts and stats samples.

    Sets ``measuring`` when the first measured (post-warm-up) message is sent, so the parent
    can start its CPU clock on the broker.
    """
    errors: list[str] = []
    stats: list[tuple[int, int]] = []  # (monotonic ns, Produce requests sent so far)
    answered: list[tuple[int, int]] = []  # (monotonic ns, responses received so far)
    acked = array.array("q")  # produce() -> delivery report, ns, measured messages only

    def on_delivery(err: object, message: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(str(err))
            return
        _, sent_ns, warm = HEADER.unpack_from(message.value() or b"")
        if not warm:
            acked.append(time.monotonic_ns() - sent_ns)

    def on_stats(payload: str) -> None:
        now = time.monotonic_ns()
        stats.append((now, _requests(payload, "Produce")))
        answered.append((now, _responses(payload)))

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": load.linger_ms,
            "enable.idempotence": False,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "on_delivery": on_delivery,
            "stats_cb": on_stats,
            **dict(load.producer_config),
        }
    )
    producer.list_topics(topic, timeout=30)  # connect and learn the leader before the clock
    padding = bytes(load.size - HEADER.size)
    interval_ns = 1e9 / load.rate
    planned, warm = load.planned, load.warm_count
    late = 0  # messages sent more than 1 ms after they were due
    started = time.monotonic_ns()
    first_measured = last_sent = started
    sent = 0
    while sent < planned:
        due = started + int(sent * interval_ns)
        now = time.monotonic_ns()
        if due > now:
            producer.poll(0)
            time.sleep((due - now) / 1e9)
            continue
        # Everything due by now goes out in one burst.
        while sent < planned and started + int(sent * interval_ns) <= now:
            if now - (started + int(sent * interval_ns)) > NS_PER_MS:
                late += 1
            if sent == warm:
                first_measured = time.monotonic_ns()
                measuring.set()
            last_sent = time.monotonic_ns()
            value = HEADER.pack(sent, last_sent, sent < warm) + padding
            _produce(producer, topic, value)
            sent += 1
        producer.poll(0)
    if not measuring.is_set():
        measuring.set()
    finish = time.monotonic_ns()
    unflushed = producer.flush(60)
    producer.poll(0)
    out.send(
        {
            "sent": sent,
            "warm": warm,
            "unflushed": unflushed,
            "errors": errors[:5],
            "error_count": len(errors),
            "late": late,
            "t0": first_measured,
            "t1": last_sent,
            "finish": finish,
            "stats": stats,
            "answered": answered,
            "acked": percentiles(acked, 0),
        }
    )


def _produce(producer: confluent_kafka.Producer, topic: str, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:  # the local queue is full: the broker is far behind
            producer.poll(0.001)


def _responses(payload: str) -> int:
    """Responses received from all brokers so far (librdkafka statistics: ``rx``)."""
    brokers = json.loads(payload).get("brokers", {})
    return sum(int(b.get("rx", 0)) for b in brokers.values())


def _requests(payload: str, kind: str) -> int:
    """Requests of ``kind`` sent to all brokers so far, from a librdkafka statistics JSON."""
    brokers = json.loads(payload).get("brokers", {})
    return sum(int(b.get("req", {}).get(kind, 0)) for b in brokers.values())


# -- the consumers (each in its own process) -------------------------------------------------


@dataclass
class Received:
    """What a consumer saw: latencies of measured messages, and every sequence number."""

    planned: int
    latencies: array.array[int] = field(default_factory=lambda: array.array("q"))
    seen: bytearray = field(default_factory=bytearray)
    count: int = 0
    duplicates: int = 0
    unexpected: int = 0

    def __post_init__(self) -> None:
        self.seen = bytearray(self.planned)

    def add(self, value: bytes, received_ns: int) -> None:
        sequence, sent_ns, warm = HEADER.unpack_from(value)
        self.count += 1
        if not 0 <= sequence < self.planned:
            self.unexpected += 1
            return
        if self.seen[sequence]:
            self.duplicates += 1
            return
        self.seen[sequence] = 1
        if not warm:
            self.latencies.append(received_ns - sent_ns)

    def done(self, expected: int) -> bool:
        return 0 <= expected <= self.count - self.duplicates - self.unexpected

    def report(self, stats: list[tuple[int, int]]) -> dict[str, Any]:
        return {
            "count": self.count,
            "duplicates": self.duplicates,
            "unexpected": self.unexpected,
            "seen": bytes(self.seen),
            "latencies": self.latencies.tobytes(),
            "stats": stats,
        }


def consume(
    kind: str,
    bootstrap: str,
    topic: str,
    planned: int,
    ready: Event,
    expected: Synchronized[int],
    deadline: Synchronized[int],
    out: Connection,
) -> None:
    """Read partition 0 of ``topic`` from offset 0 until ``expected`` messages (set by the
    parent once the producer is done) have arrived, or until the monotonic ``deadline``."""
    if kind == "confluent":
        result = consume_confluent(bootstrap, topic, planned, ready, expected, deadline)
    else:
        result = run_async(consume_kayak(bootstrap, topic, planned, ready, expected, deadline))
    out.send(result)


def _finished(received: Received, expected: Synchronized[int], deadline: Synchronized[int]) -> bool:
    limit = deadline.value
    return received.done(expected.value) or (limit > 0 and time.monotonic_ns() > limit)


def consume_confluent(
    bootstrap: str,
    topic: str,
    planned: int,
    ready: Event,
    expected: Synchronized[int],
    deadline: Synchronized[int],
) -> dict[str, Any]:
    stats: list[tuple[int, int]] = []

    def on_stats(payload: str) -> None:
        stats.append((time.monotonic_ns(), _requests(payload, "Fetch")))

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": on_stats,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    consumer.consume(1, timeout=0.5)  # connect and start fetching (the topic is empty)
    ready.set()
    received = Received(planned)
    while not _finished(received, expected, deadline):
        # poll() returns with the first message; consume() would wait for a full batch or
        # its timeout. Then consume(timeout=0) takes whatever else has already arrived.
        first = consumer.poll(0.1)
        if first is None:
            continue
        now = time.monotonic_ns()
        for message in (first, *consumer.consume(num_messages=POLL_RECORDS, timeout=0)):
            if message.error():
                raise RuntimeError(str(message.error()))
            received.add(message.value() or b"", now)
    consumer.close()
    return received.report(stats)


async def consume_kayak(
    bootstrap: str,
    topic: str,
    planned: int,
    ready: Event,
    expected: Synchronized[int],
    deadline: Synchronized[int],
) -> dict[str, Any]:
    from kayak.client.consumer import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    received = Received(planned)
    async with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        await consumer.getmany_values(timeout_ms=500)  # connect and start fetching
        ready.set()
        while not _finished(received, expected, deadline):
            batches = await consumer.getmany_values(max_records=POLL_RECORDS, timeout_ms=100)
            now = time.monotonic_ns()
            for values in batches.values():
                for value in values:
                    assert value is not None
                    received.add(value, now)
    return received.report([])


def percentiles(latencies_ns: Sequence[int], lost: int) -> dict[str, float]:
    """Percentiles in ms; the ``lost`` messages (never received) count as infinitely late,
    so a broker that falls behind cannot look good by not delivering."""
    ordered = sorted(latencies_ns)
    total = len(ordered) + lost
    if not total:
        return {name: float("nan") for name, _ in (*PERCENTILES, ("max", 1.0))}

    def at(index: int) -> float:
        return ordered[index] / NS_PER_MS if index < len(ordered) else float("inf")

    result = {name: at(min(total - 1, int(q * total))) for name, q in PERCENTILES}
    result["max"] = at(total - 1)
    return result
