"""Helpers shared by the storage fault tests (``test_storage_*.py``); holds no tests.

What every storage fault test holds the broker to: a record is acknowledged only once it is on
disk; nothing that was never acknowledged is ever served; offsets stay contiguous (never a gap,
never two records at one offset); a fault is answered KAFKA_STORAGE_ERROR (56) for the
partition it hit and leaves the other partitions working. These helpers talk to the broker one
raw request at a time (:class:`~tests.broker.wire.WireClient`) or through confluent-kafka.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError as ClientError
from confluent_kafka import Producer

from kayak.errors import ErrorCode
from kayak.protocol.messages import (
    DeleteRecordsRequest,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, iter_batches
from tests.broker.confluent_support import read_topic_to_end
from tests.broker.wire import WireClient

STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)
OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)
PRODUCE_V, FETCH_V, LIST_OFFSETS_V, DELETE_RECORDS_V, INIT_PRODUCER_ID_V = 9, 12, 5, 1, 4
LATEST, EARLIEST = -1, -2
FIRST_SEGMENT = f"{0:020d}.log"

Records = list[tuple[int, bytes | None]]  # (offset, value) in log order


# -- the raw wire client, one request per call ---------------------------------------------


def produce(
    wire: WireClient, topic: str, records: bytes, partition: int = 0, acks: int = -1
) -> Any:
    """One Produce of ``records`` (encoded batches); the partition's answer."""
    data = TopicProduceData(topic, [PartitionProduceData(partition, records)])
    request = ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[data])
    response: Any = wire.request(request, PRODUCE_V)
    return response.responses[0].partition_responses[0]


def fetch_request(topic: str, offset: int, partition: int = 0, max_bytes: int = 8 << 20) -> Any:
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                    )
                ],
            )
        ],
    )


def fetch(
    wire: WireClient, topic: str, offset: int, partition: int = 0, max_bytes: int = 8 << 20
) -> Any:
    """One Fetch (no waiting); the partition's answer (``PartitionData``)."""
    response: Any = wire.request(fetch_request(topic, offset, partition, max_bytes), FETCH_V)
    return response.responses[0].partitions[0]


def list_offset(
    wire: WireClient, topic: str, timestamp: int, partition: int = 0
) -> tuple[int, int]:
    """(error code, offset) of ListOffsets for ``timestamp`` (LATEST, EARLIEST)."""
    wanted = ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(topic, [wanted])])
    response: Any = wire.request(request, LIST_OFFSETS_V)
    result = response.topics[0].partitions[0]
    return result.error_code, result.offset


def delete_records(
    wire: WireClient, topic: str, offset: int, partition: int = 0
) -> tuple[int, int]:
    """(error code, low watermark) of DeleteRecords up to ``offset`` (-1: the high watermark)."""
    wanted = DeleteRecordsPartition(partition_index=partition, offset=offset)
    request = DeleteRecordsRequest(topics=[DeleteRecordsTopic(topic, [wanted])], timeout_ms=10_000)
    response: Any = wire.request(request, DELETE_RECORDS_V)
    result = response.topics[0].partitions[0]
    return result.error_code, result.low_watermark


def init_producer_id(wire: WireClient) -> tuple[int, int]:
    """A fresh idempotent producer id and epoch."""
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
    response: Any = wire.request(request, INIT_PRODUCER_ID_V)
    assert response.error_code == 0, f"InitProducerId: {response.error_code}"
    return response.producer_id, response.producer_epoch


def decode(offset: int, records: Any) -> Records:
    """The records at or after ``offset`` in a Fetch answer's records field, CRCs checked."""
    out: Records = []
    for batch in iter_batches(bytes(records or b""), check_crc=True):
        out += [(r.offset, r.value) for r in batch if r.offset >= offset]
    return out


def read_records(wire: WireClient, topic: str, partition: int = 0, start: int = 0) -> Records:
    """Every record from ``start`` up to the high watermark, fetched sequentially.

    Fails on any error code and on any offset that does not follow the previous one.
    """
    out: Records = []
    offset = start
    while True:
        data = fetch(wire, topic, offset, partition)
        assert data.error_code == 0, f"fetch {topic}-{partition}@{offset}: {data.error_code}"
        records = decode(offset, data.records)
        if not records:
            assert offset >= data.high_watermark, (
                f"fetch {topic}-{partition}@{offset} returned nothing below the high "
                f"watermark {data.high_watermark}"
            )
            return out
        for record_offset, value in records:
            assert record_offset == offset, (
                f"{topic}-{partition}: expected {offset}, got {record_offset}"
            )
            out.append((record_offset, value))
            offset += 1


def one_batch(*values: bytes) -> bytes:
    return build_record_batch(list(values))


def ack_all(wire: WireClient, topic: str, values: list[bytes], partition: int = 0) -> Records:
    """Produce each value as its own acks=all batch; every one must be acknowledged."""
    acked: Records = []
    for value in values:
        result = produce(wire, topic, one_batch(value), partition)
        assert result.error_code == 0, f"produce {value[:20]!r}: {result.error_code}"
        acked.append((result.base_offset, value))
    return acked


def check_contiguous(records: Records, start: int = 0) -> None:
    offsets = [offset for offset, _ in records]
    assert offsets == list(range(start, start + len(records))), f"offsets {offsets[:50]}"


# -- third-party clients -------------------------------------------------------------------


def confluent_produce(
    bootstrap: str, topic: str, values: list[bytes], timeout_ms: int = 10_000
) -> list[tuple[int | None, int | None]]:
    """Produce with confluent-kafka, acks=all; per value (offset, error code), one None."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": timeout_ms,
            "retry.backoff.ms": 100,
        }
    )
    reports: dict[bytes, tuple[int | None, int | None]] = {}

    def delivered(err: ClientError | None, msg: Any) -> None:
        if err is not None:
            reports[msg.value()] = (None, err.code())
        else:
            reports[msg.value()] = (msg.offset(), None)

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(timeout_ms / 1000 + 20) == 0, "delivery reports missing"
    return [reports[value] for value in values]


def confluent_read(bootstrap: str, topic: str, timeout: float = 30.0) -> Records:
    """Everything in ``topic``-0 from the beginning to its end, read with confluent-kafka."""
    read = read_topic_to_end(
        bootstrap, topic, 1, timeout=timeout, group_id=f"verify-{topic}", check_crcs=True
    )
    if read.errors:
        raise AssertionError(f"consumer error: {read.errors[0]}")
    if not read.at_end:
        raise AssertionError(f"did not reach the end of {topic} within {timeout}s")
    return read.records[0]
