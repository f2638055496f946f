"""bench/produce.py's Python clients, each run in a child process of its own (``produce.py
--child CLIENT``): kayak's producer (``send`` or ``produce`` per message, or ``send_batch``),
confluent-kafka (``produce`` alone, or with a delivery callback per message),
aiokafka and kafka-python, each sending groups of 1,000 values and waiting for each group to be
acknowledged; and the settings every client is tuned with (the Java client's too).

A child connects, sends one group to warm up, then speaks measured_clients.py's protocol: it
is timed on the rest, and reports seconds and messages as one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from measured_clients import child_ready, child_result
from peers import REPO

GROUP = 1000
BATCH_BYTES = 1_000_000
# Each client's best batch.size and linger.ms for "send a group, then flush" (see the module
# docstring of bench/produce.py); environment variables override them for tuning runs.
BATCH = {
    "kayak": int(os.environ.get("BENCH_BATCH_KAYAK", BATCH_BYTES)),
    "confluent-kafka": int(os.environ.get("BENCH_BATCH_CONFLUENT", BATCH_BYTES)),
    "java": int(os.environ.get("BENCH_BATCH_JAVA", BATCH_BYTES)),
    "aiokafka": int(os.environ.get("BENCH_BATCH_AIOKAFKA", BATCH_BYTES)),
    "kafka-python": int(os.environ.get("BENCH_BATCH_KAFKA_PYTHON", BATCH_BYTES)),
}
LINGER_MS = {
    "kayak": int(os.environ.get("BENCH_LINGER_KAYAK", 5)),
    "confluent-kafka": int(os.environ.get("BENCH_LINGER_CONFLUENT", 5)),
    "java": int(os.environ.get("BENCH_LINGER_JAVA", 5)),
    "aiokafka": int(os.environ.get("BENCH_LINGER_AIOKAFKA", 0)),
    "kafka-python": int(os.environ.get("BENCH_LINGER_KAFKA_PYTHON", 5)),
}
MAX_REQUEST = 1_048_576


# -- the Python clients (each in a child process of its own) --------------------------------


def value_groups(messages: int, size: int) -> list[list[bytes]]:
    # Distinct objects per message, as an application would have; built before the clock runs.
    count = max(1, messages // GROUP)
    return [[bytes(size) for _ in range(GROUP)] for _ in range(count)]


def _run_async(main: Coroutine[Any, Any, None]) -> None:
    import uvloop

    uvloop.run(main)


def _report(started: float, groups: list[list[bytes]]) -> None:
    """The timed part is over: tell the parent (which reads the CPU clocks meanwhile)."""
    seconds = time.perf_counter() - started
    child_result({"seconds": seconds, "messages": len(groups) * GROUP, "warmup": GROUP})


def _timed(run_groups: Callable[[], None], groups: list[list[bytes]]) -> None:
    child_ready()
    start = time.perf_counter()
    run_groups()
    _report(start, groups)


def bench_kayak(
    bootstrap: str, topic: str, messages: int, size: int, compression: str, mode: str
) -> None:
    """``mode``: ``send`` (await send() per message), ``produce`` (produce() with a delivery
    callback per message, which notes the offset as a delivery report would), ``send_batch``."""
    sys.path.insert(0, str(REPO))
    from kayak.client.producer import Producer

    groups = value_groups(messages, size)
    delivered: list[int] = []

    def on_delivery(error: BaseException | None, metadata: Any) -> None:
        if error is not None:
            raise error
        delivered.append(metadata.offset)

    async def main() -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS["kayak"],
            "batch.size": BATCH["kayak"],
            "max.request.size": MAX_REQUEST,
            "compression.type": compression,
        }
        async with Producer(config) as producer:
            await (await producer.send_batch(topic, groups[0]))  # connect, metadata, warm-up
            child_ready()
            start = time.perf_counter()
            if mode == "send_batch":
                for group in groups:
                    await (await producer.send_batch(topic, group))
            elif mode == "produce":
                produce, flush = producer.produce, producer.flush
                for group in groups:
                    for value in group:
                        produce(topic, value, on_delivery=on_delivery)
                    await flush()
                if len(delivered) != len(groups) * GROUP or delivered[-1] < 0:
                    raise RuntimeError(f"{len(delivered)} delivery reports, not {messages}")
            else:
                send = producer.send
                for group in groups:
                    for value in group:
                        await send(topic, value)
                    await producer.flush()
            _report(start, groups)

    _run_async(main())


def bench_confluent(
    bootstrap: str,
    topic: str,
    messages: int,
    size: int,
    compression: str,
    *,
    callback: bool = False,
) -> None:
    """``produce()`` per message, then ``flush()``; with ``callback`` each ``produce`` names an
    ``on_delivery`` callback (a report per record, the peer of kayak's ``produce(...,
    on_delivery=)``) and ``poll(0)`` serves the reports every 1,000 messages, as an
    application would."""
    import confluent_kafka

    groups = value_groups(messages, size)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS["confluent-kafka"],
            "batch.size": BATCH["confluent-kafka"],
            "batch.num.messages": 10_000,
            "message.max.bytes": MAX_REQUEST,
            "compression.type": compression,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 100_000,
        }
    )
    for value in groups[0]:
        producer.produce(topic, value)
    producer.flush(30)

    delivered = 0

    def on_delivery(error: Any, message: Any) -> None:
        nonlocal delivered
        if error is not None:
            raise RuntimeError(f"confluent-kafka could not deliver: {error}")
        delivered += 1

    def run() -> None:
        produce, flush, poll = producer.produce, producer.flush, producer.poll
        for group in groups:
            if callback:
                for value in group:
                    produce(topic, value, on_delivery=on_delivery)
                poll(0)
            else:
                for value in group:
                    produce(topic, value)
            flush(30)
        if callback and delivered != sum(len(group) for group in groups):
            raise RuntimeError(f"confluent-kafka reported {delivered} deliveries")
        if len(producer):
            raise RuntimeError(f"confluent-kafka left {len(producer)} messages undelivered")

    _timed(run, groups)


def bench_aiokafka(bootstrap: str, topic: str, messages: int, size: int, compression: str) -> None:
    import aiokafka

    groups = value_groups(messages, size)

    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=LINGER_MS["aiokafka"],
            max_batch_size=BATCH["aiokafka"],
            max_request_size=MAX_REQUEST,
            compression_type=None if compression == "none" else compression,
            enable_idempotence=False,
        )
        await producer.start()
        try:
            for value in groups[0]:
                await producer.send(topic, value)
            await producer.flush()
            child_ready()
            start = time.perf_counter()
            send = producer.send
            for group in groups:
                for value in group:
                    await send(topic, value)
                await producer.flush()
            _report(start, groups)
        finally:
            await producer.stop()

    _run_async(main())


def bench_kafka_python(
    bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> None:
    import kafka

    groups = value_groups(messages, size)
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=LINGER_MS["kafka-python"],
        batch_size=BATCH["kafka-python"],
        max_request_size=MAX_REQUEST,
        compression_type=None if compression == "none" else compression,
    )
    for value in groups[0]:
        producer.send(topic, value)
    producer.flush(30)

    def run() -> None:
        send, flush = producer.send, producer.flush
        for group in groups:
            for value in group:
                send(topic, value)
            flush(30)

    try:
        _timed(run, groups)
    finally:
        producer.close(10)


def child_main(args: argparse.Namespace) -> None:
    client, bootstrap, topic = args.child, args.bootstrap, args.topic
    common = (bootstrap, topic, args.messages, args.size, args.compression)
    if client.startswith("kayak-"):
        bench_kayak(*common, mode=client.removeprefix("kayak-"))
    elif client == "confluent-kafka":
        bench_confluent(*common)
    elif client == "confluent-kafka-callback":
        bench_confluent(*common, callback=True)
    elif client == "aiokafka":
        bench_aiokafka(*common)
    elif client == "kafka-python":
        bench_kafka_python(*common)
    else:
        raise SystemExit(f"unknown client {client}")
