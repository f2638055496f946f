"""kayak's producer against real brokers (kayak's and Tansu), read back by confluent-kafka.

A third-party reader proves the bytes: every codec, keys, headers, null values, partitions
and order come back exactly as sent.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from kayak.client.producer import Producer, RecordMetadata
from tests.client.conftest import RunningBroker
from tests.client.test_producer_support import (
    create_topic,
    read_back,
    run,
    shared_broker,
    unique,
)

pytestmark = pytest.mark.timeout(60)
__all__ = ["shared_broker"]  # the fixture, imported to be found

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(codec: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """(key, value, headers) for one codec: keyless, keyed, headers, nulls, empties, large."""
    tag = codec.encode()
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for i in range(60):
        key = None if i % 3 == 0 else b"key-%d" % i
        value: bytes | None = tag + b"-value-%d-" % i + bytes(i % 7) * (i % 5)
        headers: list[tuple[str, bytes | None]] = []
        if i % 4 == 1:
            headers = [("trace", b"t%d" % i), ("empty", b""), ("none", None), ("trace", b"again")]
        if i == 10:
            value = None  # a tombstone
        if i == 11:
            value = b""
        if i == 12:
            value = bytes(range(256)) * 200  # compressible, larger than a network packet
        records.append((key, value, headers))
    return records


def test_every_codec_round_trips_exactly(shared_broker: RunningBroker) -> None:
    """One producer per codec, each to its own partition: what confluent-kafka reads back is
    exactly what was sent, in order, with offsets as the futures said."""
    topic = create_topic(shared_broker.bootstrap_servers, unique("codecs"), len(CODECS))

    async def produce() -> dict[str, list[RecordMetadata]]:
        results: dict[str, list[RecordMetadata]] = {}
        for partition, codec in enumerate(CODECS):
            async with Producer(
                {"bootstrap.servers": shared_broker.bootstrap_servers},
                compression_type=codec,
                linger_ms=20,
            ) as producer:
                futures = [
                    await producer.send(topic, value, key, headers, partition=partition)
                    for key, value, headers in _records(codec)
                ]
                results[codec] = [await f for f in futures]
        return results

    results = run(produce())
    stored = read_back(shared_broker.bootstrap_servers, topic, len(CODECS), 60 * len(CODECS))
    for partition, codec in enumerate(CODECS):
        got = [s for s in stored if s.partition == partition]
        sent = _records(codec)
        assert [(s.key, s.value, s.headers) for s in got] == sent, codec
        assert [m.offset for m in results[codec]] == [s.offset for s in got]
        assert {m.partition for m in results[codec]} == {partition}
        assert [m.timestamp for m in results[codec]] == [s.timestamp for s in got]


def test_keyed_records_land_where_confluent_puts_them(shared_broker: RunningBroker) -> None:
    """Keys go to murmur2(key) % partitions, as confluent-kafka's murmur2_random (and Java)
    place them: checked against confluent_kafka.murmur2 and against confluent-kafka's own
    producer sending the same keys."""
    partitions = 7
    topic = create_topic(shared_broker.bootstrap_servers, unique("keys"), partitions)
    keys = [b"user-%d" % i for i in range(150)] + [b"", b"\x00\xff", "ключ".encode()]

    async def produce() -> list[RecordMetadata]:
        async with Producer(
            {"bootstrap.servers": shared_broker.bootstrap_servers, "partitioner": "murmur2_random"}
        ) as producer:
            futures = [await producer.send(topic, b"kayak", key) for key in keys]
            return [await f for f in futures]

    ours = [m.partition for m in run(produce())]
    assert ours == [confluent_kafka.murmur2(key, partitions) for key in keys]

    theirs: dict[bytes, int] = {}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": shared_broker.bootstrap_servers, "partitioner": "murmur2_random"}
    )

    def delivered(error: object, message: confluent_kafka.Message) -> None:
        theirs[message.key()] = message.partition()

    for key in keys:
        producer.produce(topic, b"confluent", key, on_delivery=delivered)
    assert producer.flush(20) == 0
    assert ours == [theirs[key] for key in keys]

    stored = read_back(shared_broker.bootstrap_servers, topic, partitions, 2 * len(keys))
    placed = {(s.key, s.partition) for s in stored}
    assert placed == {(key, p) for key, p in zip(keys, ours, strict=True)}


def test_send_batch_results_order_and_interleaving(shared_broker: RunningBroker) -> None:
    """send_batch: one future for the lot, metadata in the order given; batches split at
    batch.size; keyed records spread by key; records sent before and after keep their places."""
    bootstrap = shared_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("bulk"), 4)
    values = [b"bulk-%05d" % i for i in range(2500)]
    keyed = [b"keyed-%d" % i for i in range(300)]

    async def produce() -> tuple[object, object, object, RecordMetadata, RecordMetadata]:
        async with Producer({"bootstrap.servers": bootstrap}, batch_size=4096) as producer:
            first = await producer.send(topic, b"before", partition=2)
            bulk = await producer.send_batch(topic, values, partition=2)
            last = await producer.send(topic, b"after", partition=2)
            spread = await producer.send_batch(topic, keyed, keys=keyed)
            empty = await producer.send_batch(topic, [])
            return await bulk, await spread, await empty, await first, await last

    bulk, spread, empty, first, last = run(produce())
    assert len(empty) == 0  # type: ignore[arg-type]
    assert len(bulk) == len(values)  # type: ignore[arg-type]
    offsets = [m.offset for m in bulk]  # type: ignore[attr-defined]
    assert offsets == list(range(first.offset + 1, first.offset + 1 + len(values)))
    assert last.offset == offsets[-1] + 1
    assert all(m.partition == 2 and m.topic == topic for m in bulk)  # type: ignore[attr-defined]
    assert list(bulk) == bulk  # equal to a plain list of the same metadata
    assert [m.partition for m in spread] == [  # type: ignore[attr-defined]
        confluent_kafka.murmur2(k, 4) for k in keyed
    ]

    stored = read_back(bootstrap, topic, 4, len(values) + len(keyed) + 2)
    in_two = [s.value for s in stored if s.partition == 2 and s.key is None]
    assert in_two == [b"before", *values, b"after"]
    by_value = {s.value: s for s in stored}
    for metadata, key in zip(spread, keyed, strict=True):  # type: ignore[call-overload]
        assert by_value[key].offset == metadata.offset
        assert by_value[key].partition == metadata.partition


def test_flush_skips_linger_and_acks_zero_has_no_offsets(shared_broker: RunningBroker) -> None:
    """flush sends at once despite a long linger.ms; acks=0 resolves futures with offset -1
    and the records still arrive."""
    bootstrap = shared_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("flush"), 2)

    async def produce() -> tuple[float, list[RecordMetadata], list[int]]:
        async with Producer({"bootstrap.servers": bootstrap}, linger_ms=60_000) as producer:
            futures = [await producer.send(topic, b"lingering-%d" % i) for i in range(50)]
            start = time.monotonic()
            await producer.flush(timeout=10)
            flushed_in = time.monotonic() - start
            assert all(f.done() for f in futures)
            assert await producer.partitions_for(topic) == [0, 1]
        async with Producer({"bootstrap.servers": bootstrap}, acks=0) as fire_and_forget:
            assert fire_and_forget.config.enable_idempotence is False
            futures = [await fire_and_forget.send(topic, b"acks0-%d" % i) for i in range(50)]
            await fire_and_forget.flush(timeout=10)
            results = [await f for f in futures]
            batch = await (await fire_and_forget.send_batch(topic, [b"acks0-bulk"] * 10))
        return flushed_in, results, batch.offsets()

    flushed_in, acks0, bulk_offsets = run(produce())
    assert flushed_in < 5
    assert {m.offset for m in acks0} == {-1}
    assert set(bulk_offsets) == {-1}
    stored = read_back(bootstrap, topic, 2, 110)
    values = sorted(s.value or b"" for s in stored)
    expected = sorted(
        [b"lingering-%d" % i for i in range(50)]
        + [b"acks0-%d" % i for i in range(50)]
        + [b"acks0-bulk"] * 10
    )
    assert values == expected
