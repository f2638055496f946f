"""End-to-end latency: a paced confluent-kafka producer and one consumer, kayak's broker vs Tansu.

One producer (confluent-kafka 2.x, librdkafka) sends 100 B values (``--size``) to a fresh
one-partition topic at a fixed rate (``--rate``, default 10,000 msg/s; a list such as
``1000,10000`` measures each) for ``--warmup`` + ``--seconds`` seconds (2 + 20), with
``linger.ms=0`` and ``acks=all`` (no idempotence, no compression): with no lingering,
librdkafka sends whatever is queued when its thread wakes, a few records per request. One
consumer reads the same partition from its end (offset 0 of the fresh topic), confluent-kafka
by default (``--consumers confluent,kayak`` adds kayak's own consumer as a second row, on its
own topic and its own produce run).

Each value carries its sequence number and its send time: ``time.monotonic_ns()`` (Linux's
CLOCK_MONOTONIC, one clock for every process on the machine) read just before ``produce()``.
The consumer takes ``monotonic_ns()`` when ``poll()`` hands it a message (and whatever else
has arrived by then, taken at once with ``consume(timeout=0)``); latency is the difference,
per message. Messages sent during the warm-up (the first ``--warmup`` seconds: connections,
first fetches, cold caches on both sides) are consumed and checked but not counted in the
latencies, the rate or the CPU figures.

Producer and consumer run in separate processes (``multiprocessing``, spawn), so neither's
GIL delays the other. The producer paces itself against the clock: before each message it
sleeps until that message is due (so messages leave in small bursts when a sleep overshoots,
never ahead of the schedule), and polls librdkafka after every burst. The consumer stops when
it has seen every acknowledged message, or ``--drain`` seconds after the producer's last
``produce()`` (then the missing ones are reported).

Brokers (both started afresh for each run, taking turns at every point):

* kayak's (``python -m kayak broker``, fresh data directory on --data-root) with
  ``--flush group`` (the default): every acknowledged batch has been fdatasync'ed;
* Tansu with in-memory storage: nothing is durable.

Printed per broker: the achieved produce rate, consumed vs produced (any missing), end-to-end
latency p50/p90/p99/p99.9/max in ms (a message never received counts as infinitely late), the
producer's own produce() -> acknowledgement latency (p50/p99: where a backlog sits), the
broker's CPU (cores, from /proc/PID/stat) and the time its threads waited for a CPU (from
/proc/PID/task/*/schedstat: how much the machine's other load held it back), its CPU per
produce request it answered (µs; its fetch work included, so an upper bound) and the records
per request (request and response counts from librdkafka's statistics), all over the
measured window; medians over ``--runs`` runs, and kayak / Tansu for p99 (median of
within-run ratios).

Run: ``python bench/e2e_latency.py`` (3 runs at 10,000 msg/s, about 3 minutes),
``--quick`` for a smoke test, ``--markdown`` for README; ``--rate 1000,10000``,
``--seconds``, ``--runs``, ``--consumers``, ``--brokers kayak`` (no Tansu);
``--producer-config KEY=VALUE`` (repeatable) adds a librdkafka producer setting to both
brokers' runs (e.g. ``max.in.flight.requests.per.connection=5``); ``--py-spy FILE`` records
kayak's broker with py-spy over its first measured window at the highest rate (``.svg`` flame
graph, ``.txt`` raw collapsed stacks, ``.json`` speedscope).
"""

from __future__ import annotations

import argparse
import array
import json
import multiprocessing
import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import confluent_kafka
from peers import (
    REPO,
    BrokerProcess,
    Table,
    add_plot_option,
    cpu_seconds,
    create_topic,
    human,
    machine_notes,
    median,
    paired_ratio,
    plot_table,
    run_async,
    spread,
    start_kayak,
    start_tansu,
    times,
)

KAYAK = "kayak"
TANSU = "Tansu"
CONSUMERS = ("confluent", "kayak")
HEADER = struct.Struct("<qqB")  # sequence number, send time (monotonic ns), warm-up flag
STATS_INTERVAL_MS = 500
POLL_RECORDS = 10_000
START_TIMEOUT = 60.0
NS_PER_MS = 1_000_000
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))


@dataclass(frozen=True)
class Settings:
    rates: tuple[int, ...]
    seconds: float
    warmup: float
    drain: float
    size: int
    runs: int
    consumers: tuple[str, ...]
    brokers: tuple[str, ...]
    data_root: Path
    py_spy: Path | None
    producer_config: tuple[tuple[str, str], ...]  # --producer-config overrides
    flush: str = "group"  # kayak's --flush


@dataclass(frozen=True)
class Load:
    """What one producer sends: ``rate`` msg/s for ``warmup`` + ``seconds`` seconds."""

    rate: int
    seconds: float
    warmup: float
    size: int
    producer_config: tuple[tuple[str, str], ...] = ()

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
            "linger.ms": 0,
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
            "acked": _percentiles(acked, 0),
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


# -- one point: one broker, one rate, one consumer -------------------------------------------


@dataclass
class Point:
    """One measured point's results."""

    rate: float  # achieved, msg/s over the measured window
    produced: int  # acknowledged
    consumed: int  # distinct, expected sequence numbers
    missing: int
    latencies_ms: dict[str, float]  # p50 ... max
    cores: float  # broker CPU over the measured window
    starved: float  # broker threads runnable but waiting for a CPU, cores-equivalent
    produce_requests: float  # sent over the measured window (nan if unknown)
    produce_answers: float  # responses received over the measured window: the broker's pace
    fetch_requests: float
    measured: int  # messages in the measured window
    late: int
    acked_ms: dict[str, float]  # produce() -> acknowledgement (delivery report)

    @property
    def records_per_request(self) -> float:
        return self.measured / self.produce_requests if self.produce_requests else float("nan")


def measure(
    broker: BrokerProcess,
    name: str,
    topic: str,
    load: Load,
    consumer_kind: str,
    settings: Settings,
    profile_to: Path | None,
) -> Point:
    context = multiprocessing.get_context("spawn")
    create_topic(broker.bootstrap, topic)
    ready, measuring = context.Event(), context.Event()
    expected = context.Value("q", -1)
    deadline = context.Value("q", 0)
    consumer_end, consumer_out = context.Pipe(duplex=False)
    producer_end, producer_out = context.Pipe(duplex=False)
    consumer = context.Process(
        target=consume,
        args=(consumer_kind, broker.bootstrap, topic, load.planned, ready, expected, deadline,
              consumer_out),
        daemon=True,
    )  # fmt: skip
    consumer.start()
    _wait(ready, consumer, "consumer")
    producer = context.Process(
        target=produce,
        args=(broker.bootstrap, topic, load, measuring, producer_out),
        daemon=True,
    )
    producer.start()
    _wait(measuring, producer, "producer", timeout=START_TIMEOUT + load.warmup * 2)
    cpu_start, wall_start = cpu_seconds(broker.pid), time.monotonic()
    waited_start = waiting_seconds(broker.pid)
    spy = _start_py_spy(profile_to, broker.pid, load.seconds) if profile_to else None
    sent = _receive(producer_end, producer, "producer", load.warmup + load.seconds + 120)
    elapsed = time.monotonic() - wall_start
    cores = (cpu_seconds(broker.pid) - cpu_start) / elapsed
    starved = (waiting_seconds(broker.pid) - waited_start) / elapsed
    acknowledged = sent["sent"] - sent["unflushed"] - sent["error_count"]
    if sent["error_count"] or sent["unflushed"]:
        print(f"    producer: {sent['error_count']} errors {sent['errors']}, "
              f"{sent['unflushed']} unflushed", flush=True)  # fmt: skip
    with expected.get_lock():
        expected.value = acknowledged
    with deadline.get_lock():
        deadline.value = sent["finish"] + int(settings.drain * 1e9)
    got = _receive(consumer_end, consumer, "consumer", settings.drain + 60)
    producer.join(10)
    consumer.join(10)
    if spy is not None:
        spy.wait(60)
    return _point(sent, got, cores, starved)


def waiting_seconds(pid: int) -> float:
    """Time the process's threads have spent runnable but not running (waiting for a CPU),
    from /proc/PID/task/*/schedstat: how much the machine's other load held the broker back."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total / 1e9


def _wait(event: Event, process: multiprocessing.process.BaseProcess, what: str,
          timeout: float = START_TIMEOUT) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        if not process.is_alive() or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the {what} did not start (exit code {process.exitcode})")


def _receive(
    end: Connection, process: multiprocessing.process.BaseProcess, what: str, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not end.poll(0.1):
        if not process.is_alive() or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the {what} failed (exit code {process.exitcode})")
    result: dict[str, Any] = end.recv()
    return result


def _start_py_spy(path: Path, pid: int, seconds: float) -> subprocess.Popen[bytes] | None:
    """py-spy over the measured window; the format follows the file's extension."""
    formats = {".svg": "flamegraph", ".txt": "raw", ".json": "speedscope"}
    spy = Path(sys.executable).with_name("py-spy")
    command = [
        str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
        "--rate", "200", "--format", formats.get(path.suffix, "flamegraph"), "-o", str(path),
    ]  # fmt: skip
    print(f"    py-spy on pid {pid} -> {path}", flush=True)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _point(sent: dict[str, Any], got: dict[str, Any], cores: float, starved: float) -> Point:
    acknowledged = sent["sent"] - sent["unflushed"] - sent["error_count"]
    seen = got["seen"][: sent["sent"]]
    consumed = seen.count(1)
    latencies = array.array("q")
    latencies.frombytes(got["latencies"])
    t0, t1 = sent["t0"], sent["t1"]
    measured = sent["sent"] - sent["warm"]
    return Point(
        rate=(measured - 1) / ((t1 - t0) / 1e9) if t1 > t0 else float("nan"),
        produced=acknowledged,
        consumed=consumed,
        missing=max(0, acknowledged - consumed),
        latencies_ms=_percentiles(latencies, max(0, measured - len(latencies))),
        cores=cores,
        starved=starved,
        produce_requests=_in_window(sent["stats"], t0, t1),
        produce_answers=_in_window(sent["answered"], t0, t1),
        fetch_requests=_in_window(got["stats"], t0, t1),
        measured=measured,
        late=sent["late"],
        acked_ms=sent["acked"],
    )


def _percentiles(latencies_ns: Sequence[int], lost: int) -> dict[str, float]:
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


def _in_window(samples: Sequence[Sequence[int]], t0: int, t1: int) -> float:
    """Requests sent between ``t0`` and ``t1``, from cumulative (time, count) samples: the
    rate between the first and last sample inside the window, times the window."""
    inside = [(t, c) for t, c in samples if t0 <= t <= t1]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return float("nan")
    (ta, ca), (tb, cb) = inside[0], inside[-1]
    return (cb - ca) / (tb - ta) * (t1 - t0)


# -- runs and report -------------------------------------------------------------------------


@dataclass
class Samples:
    points: dict[tuple[int, str, str], list[Point]] = field(default_factory=dict)

    def add(self, rate: int, consumer: str, broker: str, point: Point) -> None:
        self.points.setdefault((rate, consumer, broker), []).append(point)

    def of(self, rate: int, consumer: str, broker: str) -> list[Point]:
        return self.points.get((rate, consumer, broker), [])


def start_brokers(settings: Settings) -> dict[str, BrokerProcess]:
    brokers: dict[str, BrokerProcess] = {}
    try:
        if KAYAK in settings.brokers:
            brokers[KAYAK] = start_kayak(settings.data_root, settings.flush)
        if TANSU in settings.brokers:
            brokers[TANSU] = start_tansu(settings.data_root)
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    for name, broker in brokers.items():
        print(f"  {name} broker pid {broker.pid} on {broker.bootstrap}", flush=True)
    return brokers


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    brokers = start_brokers(settings)
    try:
        names = list(brokers)
        points = [(r, c) for r in settings.rates for c in settings.consumers]
        for index, (rate, consumer) in enumerate(points):
            shift = (run + index) % len(names)  # who goes first alternates
            for name in names[shift:] + names[:shift]:
                load = Load(
                    rate, settings.seconds, settings.warmup, settings.size,
                    settings.producer_config,
                )  # fmt: skip
                topic = f"e2e-{rate}-{consumer}-{uuid.uuid4().hex[:8]}"
                profile_here = _profile_here(run, rate, consumer, name, settings)
                profile_to = settings.py_spy if profile_here else None
                point = measure(brokers[name], name, topic, load, consumer, settings, profile_to)
                samples.add(rate, consumer, name, point)
                print("    " + _line(name, rate, consumer, point), flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()


def _profile_here(run: int, rate: int, consumer: str, name: str, settings: Settings) -> bool:
    """py-spy watches kayak's broker once: in the first run, at the highest rate."""
    return (
        settings.py_spy is not None
        and run == 0
        and rate == max(settings.rates)
        and consumer == settings.consumers[0]
        and name == KAYAK
    )


def _line(name: str, rate: int, consumer: str, point: Point) -> str:
    lat = point.latencies_ms
    return (
        f"{name:<6} {rate:>7,} msg/s target, {consumer:<9}: {point.rate:>8,.0f} msg/s sent, "
        f"{point.consumed:,}/{point.produced:,} consumed, p50 {lat['p50']:.2f} p99 "
        f"{lat['p99']:.2f} p99.9 {lat['p99.9']:.2f} max {lat['max']:.2f} ms (acked p50 "
        f"{point.acked_ms['p50']:.2f} p99 {point.acked_ms['p99']:.2f} ms), broker "
        f"{point.cores:.2f} cores (+{point.starved:.2f} waiting for a CPU), "
        f"{_per_request_us(point)} µs/produce req, "
        f"{point.records_per_request:.1f} rec/req, {_answers_per_second(point)} produce "
        f"answers/s, {point.late:,} sent >1 ms late"
    )


def _answers_per_second(point: Point) -> str:
    window = point.measured / point.rate if point.rate else float("nan")
    return human(point.produce_answers / window)


def _per_request_us(point: Point) -> str:
    """Broker CPU per produce request it answered in the window (its fetches included)."""
    if point.produce_answers != point.produce_answers or not point.produce_answers:
        return "-"
    window = point.measured / point.rate if point.rate else float("nan")
    return human(point.cores * window / point.produce_answers * 1e6)


def results_table(settings: Settings, samples: Samples) -> Table:
    table = Table(
        [
            "rate target", "consumer", "broker", "sent msg/s", "consumed", "p50 ms", "p90 ms",
            "p99 ms", "p99.9 ms", "max ms", "ack p50 ms", "ack p99 ms", "broker CPU",
            "broker run-queue wait",            "µs/produce req", "rec/req", "p99 kayak / Tansu",
        ]
    )  # fmt: skip
    for rate in settings.rates:
        for consumer in settings.consumers:
            for name in settings.brokers:
                points = samples.of(rate, consumer, name)
                if not points:
                    continue
                table.add(
                    f"{rate:,}/s",
                    consumer,
                    _broker_label(name),
                    median([p.rate for p in points]),
                    _consumed(points),
                    *(median([p.latencies_ms[k] for p in points]) for k in _LATENCY_KEYS),
                    median([p.acked_ms["p50"] for p in points]),
                    median([p.acked_ms["p99"] for p in points]),
                    f"{median([p.cores for p in points]):.2f} cores",
                    f"{median([p.starved for p in points]):.2f} cores",
                    _median_text([_per_request_us(p) for p in points]),
                    median([p.records_per_request for p in points]),
                    _p99_ratio(samples, rate, consumer) if name == KAYAK else "",
                )
    return table


_LATENCY_KEYS = ("p50", "p90", "p99", "p99.9", "max")


def _broker_label(name: str) -> str:
    return "kayak (group)" if name == KAYAK else "Tansu (memory)"


def _consumed(points: Sequence[Point]) -> str:
    missing = sum(p.missing for p in points)
    if missing:
        return f"{missing:,} missing"
    return "all"


def _median_text(values: Sequence[str]) -> str:
    numbers = [float(v.replace(",", "")) for v in values if v != "-"]
    return human(median(numbers)) if numbers else "-"


def _p99_ratio(samples: Samples, rate: int, consumer: str) -> str:
    mine = [p.latencies_ms["p99"] for p in samples.of(rate, consumer, KAYAK)]
    theirs = [p.latencies_ms["p99"] for p in samples.of(rate, consumer, TANSU)]
    return times(paired_ratio(mine, theirs))


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) producer, linger.ms=0, acks=all, "
        f"{settings.size} B values, one partition; {settings.warmup:g} s warm-up + "
        f"{settings.seconds:g} s measured per point; median of {settings.runs} runs"
        + "".join(f", {k}={v}" for k, v in settings.producer_config)
    )
    print(machine_notes(settings.data_root))
    print()
    table = results_table(settings, samples)
    print(table.markdown() if markdown else table.text())
    print()
    print(
        "run-to-run range of p99 (ms): "
        + "; ".join(
            f"{name} {rate:,}/s {consumer}: "
            + spread([p.latencies_ms["p99"] for p in samples.of(rate, consumer, name)])
            for rate in settings.rates
            for consumer in settings.consumers
            for name in settings.brokers
        )
    )
    print(f"command: python bench/e2e_latency.py {' '.join(sys.argv[1:])}")


def parse_args(argv: list[str]) -> tuple[Settings, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="10000", help="msg/s, or a list: 1000,10000")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured, per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="sent first, not counted")
    parser.add_argument("--drain", type=float, default=30.0, help="wait after the last send")
    parser.add_argument("--size", type=int, default=100, help="value bytes (>= 17)")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--consumers", default="confluent", help="confluent,kayak")
    parser.add_argument("--brokers", default="kayak,Tansu", help="kayak,Tansu")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--py-spy", type=Path, help="py-spy kayak's broker (first window)")
    parser.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer setting, e.g. max.in.flight.requests.per.connection=5",
    )
    parser.add_argument(
        "--flush", default="group", choices=("group", "always", "never"), help="kayak's --flush"
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.runs, args.drain = 3.0, 1.0, 1, 10.0
    consumers = tuple(c.strip() for c in args.consumers.split(",") if c.strip())
    brokers = tuple(_broker_name(b) for b in args.brokers.split(",") if b.strip())
    if unknown := set(consumers) - set(CONSUMERS):
        parser.error(f"unknown consumers: {', '.join(sorted(unknown))}")
    if args.size < HEADER.size:
        parser.error(f"--size must be at least {HEADER.size}")
    settings = Settings(
        rates=tuple(int(r) for r in args.rate.split(",") if r.strip()),
        seconds=args.seconds,
        warmup=args.warmup,
        drain=args.drain,
        size=args.size,
        runs=args.runs,
        consumers=consumers,
        brokers=brokers,
        data_root=args.data_root,
        py_spy=args.py_spy,
        producer_config=tuple(_key_value(item, parser) for item in args.producer_config),
        flush=args.flush,
    )
    return settings, args.markdown, args.plot


def _key_value(item: str, parser: argparse.ArgumentParser) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        parser.error(f"--producer-config wants KEY=VALUE, not {item!r}")
    return key.strip(), value.strip()


def _broker_name(text: str) -> str:
    name = text.strip().lower()
    if name not in ("kayak", "tansu"):
        raise SystemExit(f"unknown broker {text!r}: kayak or Tansu")
    return KAYAK if name == "kayak" else TANSU


def main(argv: list[str]) -> None:
    settings, markdown, plot = parse_args(argv)
    os.chdir(REPO)
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(plot, "e2e_latency", results_table(settings, samples))


if __name__ == "__main__":
    main(sys.argv[1:])
