"""Real clients against a capture broker: what librdkafka and kafka-python produce decodes
exactly, and what kayak builds librdkafka consumes, for every codec."""

from __future__ import annotations

import time

import confluent_kafka
import kafka
import pytest

from kayak.protocol.records import (
    Codec,
    ControlRecordType,
    RecordBatch,
    build_control_batch,
    build_record_batch,
    parse_batches,
    scan_batches,
    validate_batch,
)
from kayak.protocol.records.compression import XERIAL_MAGIC
from tests.records.kafka_capture import PRODUCER_ID, CaptureBroker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
Message = tuple[bytes | None, bytes, list[tuple[str, bytes | None]] | None]

MESSAGES: list[Message] = [
    (None, b"first value", None),
    (b"key-1", b"", [("trace", b"abc"), ("empty", None)]),
    (b"", b"x" * 3000, None),
    (None, "ünïcödé välüé".encode(), [("ключ", b"\x00\x01")]),
    (b"key-4", bytes(range(256)) * 4, None),
] + [(b"k%d" % i if i % 2 else None, b"repeat %d " % i * 20, None) for i in range(40)]


def decoded(produced: list[bytes]) -> list[RecordBatch]:
    batches = [b for records in produced for b in parse_batches(records)]
    assert all(isinstance(b, RecordBatch) for b in batches)
    return batches  # type: ignore[return-value]


def check_batches(batches: list[RecordBatch], codec: str, expected: list[Message]) -> None:
    got = []
    for batch in batches:
        assert batch.compression is Codec[codec.upper()]
        header = next(iter(scan_batches(batch.buffer)))
        validate_batch(header, batch.buffer)  # what our broker will do on produce
        records = list(batch)
        assert [r.offset for r in records] == list(range(len(records)))
        assert all(r.timestamp > 1_600_000_000_000 for r in records)
        got += [(r.key, r.value, list(r.headers) or None) for r in records]
    assert got == expected


def produce_with_librdkafka(codec: str, **config: object) -> list[bytes]:
    with CaptureBroker() as broker:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "compression.type": codec,
                "linger.ms": 5,
                "message.timeout.ms": 15000,
                "log_level": 2,
                **config,
            }
        )
        for key, value, headers in MESSAGES:
            producer.produce(broker.topic, value=value, key=key, headers=headers)
        assert producer.flush(20) == 0
        broker.wait_for_records(len(MESSAGES))
        return list(broker.produced)


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_produce_requests_decode_exactly(codec: str) -> None:
    batches = decoded(produce_with_librdkafka(codec))
    check_batches(batches, codec, MESSAGES)
    assert all(b.producer_id == -1 and not b.is_transactional for b in batches)
    if codec == "snappy":
        # A fact worth pinning: librdkafka sends one raw snappy block, not the xerial
        # framing the Java client (and kayak) write. Our reader accepts both.
        assert not any(bytes(b.buffer[61:69]) == XERIAL_MAGIC for b in batches)


def test_librdkafka_idempotent_producer_fills_the_producer_fields() -> None:
    batches = decoded(produce_with_librdkafka("lz4", **{"enable.idempotence": True}))
    check_batches(batches, "lz4", MESSAGES)
    assert {b.producer_id for b in batches} == {PRODUCER_ID}
    assert batches[0].base_sequence == 0 and batches[0].producer_epoch == 0


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produce_requests_decode_exactly(
    codec: str, kafka_python_all_codecs: list[str]
) -> None:
    # kafka-python refuses None header values; it sends them as empty bytes.
    messages = [
        (key, value, None if headers is None else [(k, v or b"") for k, v in headers])
        for key, value, headers in MESSAGES
    ]
    with CaptureBroker() as broker:
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
            max_block_ms=10_000,
            request_timeout_ms=10_000,
        )
        try:
            for key, value, headers in messages:
                producer.send(broker.topic, value=value, key=key, headers=headers)
            producer.flush(timeout=20)
            broker.wait_for_records(len(messages))
        finally:
            producer.close(timeout=5)
        batches = decoded(list(broker.produced))
    check_batches(batches, codec, messages)
    if codec == "snappy":
        assert all(bytes(b.buffer[61:69]) == XERIAL_MAGIC for b in batches)


@pytest.mark.parametrize("codec", list(Codec))
def test_librdkafka_consumes_what_kayak_builds(codec: Codec) -> None:
    data = build_record_batch(
        [b"a0", b"", None, b"a3" * 500],
        keys=[None, b"k1", b"", b"k3"],
        headers=[None, [("h", b"v")], [("e", None)], None],
        timestamp=1_700_000_000_000,
        codec=codec,
    )
    transactional = build_record_batch(
        [b"t0", b"t1"],
        timestamp=[1_700_000_000_500, 1_700_000_000_400],
        codec=codec,
        base_offset=4,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    commit = build_control_batch(
        ControlRecordType.COMMIT, producer_id=9, producer_epoch=0, base_offset=6
    )
    tail = build_record_batch([b"after"], timestamp=1_700_000_000_900, base_offset=7, codec=codec)
    expected = [
        (0, 1_700_000_000_000, None, b"a0", None),
        (1, 1_700_000_000_000, b"k1", b"", [("h", b"v")]),
        (2, 1_700_000_000_000, b"", None, [("e", None)]),
        (3, 1_700_000_000_000, b"k3", b"a3" * 500, None),
        (4, 1_700_000_000_500, None, b"t0", None),
        (5, 1_700_000_000_400, None, b"t1", None),
        (7, 1_700_000_000_900, None, b"after", None),
    ]
    with CaptureBroker(log=data + transactional + commit + tail) as broker:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "kayak-records-test",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 2,
            }
        )
        try:
            consumer.assign([confluent_kafka.TopicPartition(broker.topic, 0, 0)])
            got: list[tuple[object, ...]] = []
            deadline = time.monotonic() + 20
            while len(got) < len(expected) and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                got.append(
                    (
                        message.offset(),
                        message.timestamp()[1],
                        message.key(),
                        message.value(),
                        message.headers(),
                    )
                )
        finally:
            consumer.close()
    assert got == expected
