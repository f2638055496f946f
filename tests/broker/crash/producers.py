"""The producer processes of the crash harness: confluent-kafka (idempotent or not) and
kayak's own idempotent producer, acks=all, each writing its :class:`~.workload.Workload` to its
own topic and every acknowledgement to its :class:`~.acks.AckFile` until told to stop, then
draining. :func:`run_producer` is the entry point given to a spawned process."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from tests.broker.crash.acks import AckFile, Counters
from tests.broker.crash.workload import (
    DELIVERY_TIMEOUT_MS,
    DRAIN_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    QUIET,
    MiB,
    Workload,
    Writer,
)


@dataclass(frozen=True)
class ProducerJob:
    """What a producer process needs (picklable: it crosses a spawn)."""

    writer: Writer
    bootstrap: str
    round_number: int
    seed: int
    ack_path: str


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
