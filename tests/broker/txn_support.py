"""Pieces the broker transaction tests share (``test_transactions*.py``); holds no tests.

- confluent-kafka transactional producers and readers (the client under test is librdkafka);
- raw requests through kayak's protocol classes (ListOffsets with an isolation level, Fetch
  answers with their last stable offset and aborted transactions, the transaction admin
  APIs), so a test sees exactly what the broker answered;
- :func:`read_committed_raw`: a read_committed consumer written from Kafka's fetch contract
  (drop the records of the aborted transactions the broker lists, drop control batches),
  which also checks that no Fetch returned a batch at or past the last stable offset.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from kayak.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from kayak.protocol.messages.describe_producers_response import DescribeProducersResponse
from kayak.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from kayak.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TransactionState,
)
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse, PartitionData
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.list_offsets_response import ListOffsetsResponse
from kayak.protocol.messages.list_transactions_request import ListTransactionsRequest
from kayak.protocol.messages.list_transactions_response import ListTransactionsResponse
from kayak.protocol.records import RecordBatch, iter_batches
from kayak.protocol.records.record import ControlRecordType
from tests.broker.wire import WireClient

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST = -1
OPERATION_TIMEOUT_S = 30.0
FETCH_VERSION = 12  # topic names (13+ use topic ids)
LIST_OFFSETS_VERSION = 5


@contextmanager
def wire(bootstrap: str) -> Iterator[WireClient]:
    client = WireClient(bootstrap)
    try:
        yield client
    finally:
        client.close()


# -- confluent-kafka ------------------------------------------------------------------------


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> confluent_kafka.Producer:
    """A confluent-kafka transactional producer, transactions initialised."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        }
    )
    producer.init_transactions(OPERATION_TIMEOUT_S)
    return producer


def send_all(producer: confluent_kafka.Producer, records: list[tuple[str, int, bytes]]) -> None:
    """Produce ``(topic, partition, value)`` records and wait until each is acknowledged."""
    failures: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    for topic, partition, value in records:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(OPERATION_TIMEOUT_S) == 0, "records still undelivered"
    assert failures == [], f"records not acknowledged: {failures[:3]}"


def read_confluent(
    bootstrap: str, topic: str, partitions: int, isolation: str, **extra: Any
) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` a confluent-kafka consumer at ``isolation`` reads, from the
    start to the end it is allowed (the last stable offset for read_committed), as
    ``(partition, offset, value)``."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 10,  # the end is seen at once, not after a long poll
            **extra,
        }
    )
    consumer.assign(
        [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
         for p in range(partitions)]
    )  # fmt: skip
    found: list[tuple[int, int, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + OPERATION_TIMEOUT_S
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: only {sorted(at_end)} reached the end"
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                partition, offset, value = message.partition(), message.offset(), message.value()
                assert partition is not None
                if error is not None and error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                    continue
                assert error is None and offset is not None and value is not None, error
                at_end.discard(partition)
                found.append((partition, offset, value))
    finally:
        consumer.close()
    return found


# -- raw requests ---------------------------------------------------------------------------


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: int) -> dict[int, int]:
    """ListOffsets LATEST per partition: the high watermark (read_uncommitted) or the last
    stable offset (read_committed)."""
    wanted = [ListOffsetsPartition(p, -1, LATEST) for p in range(partitions)]
    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation, topics=[ListOffsetsTopic(topic, wanted)]
    )
    with wire(bootstrap) as client:
        response = client.request(request, LIST_OFFSETS_VERSION)
    assert isinstance(response, ListOffsetsResponse)
    answers = response.topics[0].partitions
    assert [a.error_code for a in answers] == [0] * partitions, answers
    return {a.partition_index: a.offset for a in answers}


def fetch_partition(
    client: WireClient,
    topic: str,
    partition: int,
    offset: int,
    isolation: int,
    max_bytes: int = 1 << 20,
) -> PartitionData:
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        isolation_level=isolation,
        topics=[FetchTopic(topic, partitions=[FetchPartition(partition, -1, offset, -1, -1,
                                                             max_bytes)])],
    )  # fmt: skip
    response = client.request(request, FETCH_VERSION)
    assert isinstance(response, FetchResponse)
    data = response.responses[0].partitions[0]
    assert data.error_code == 0, f"fetch {topic}-{partition}@{offset}: {data.error_code}"
    return data


def batches_of(data: PartitionData) -> list[RecordBatch]:
    raw = data.records or b""
    assert isinstance(raw, bytes | bytearray | memoryview)  # a client's answer, not a region
    return [b for b in iter_batches(raw) if isinstance(b, RecordBatch)]


@dataclass
class RawRead:
    """What a raw read of one partition saw."""

    records: list[tuple[int, bytes]]  # (offset, value) the reader keeps
    batches: list[RecordBatch]  # every batch returned, control batches too
    last_stable_offset: int
    high_watermark: int


def read_partition_raw(
    bootstrap: str, topic: str, partition: int, isolation: int, max_bytes: int = 64 * 1024
) -> RawRead:
    """Fetch ``topic``-``partition`` from its start until nothing more comes, as a consumer
    at ``isolation`` would keep it. With read_committed, also asserts the broker never
    returned a batch ending at or past the last stable offset of its answer."""
    kept: list[tuple[int, bytes]] = []
    seen: list[RecordBatch] = []
    offset, stable, high = 0, -1, -1
    with wire(bootstrap) as client:
        while True:
            data = fetch_partition(client, topic, partition, offset, isolation, max_bytes)
            stable, high = data.last_stable_offset, data.high_watermark
            batches = batches_of(data)
            if not batches:
                return RawRead(kept, seen, stable, high)
            # As Kafka's consumer: each answer is filtered with its own aborted list only.
            aborted_pending = sorted(
                (a.first_offset, a.producer_id) for a in data.aborted_transactions or []
            )
            aborted_now: set[int] = set()
            if isolation == READ_COMMITTED:
                assert batches[-1].last_offset < stable, (
                    f"{topic}-{partition}: read_committed fetch at {offset} returned offsets up "
                    f"to {batches[-1].last_offset}, last stable offset {stable}"
                )
            for batch in batches:
                if batch.last_offset < offset:
                    continue  # a batch the reader already has (a fetch starts at its batch)
                seen.append(batch)
                if isolation == READ_COMMITTED:
                    while aborted_pending and aborted_pending[0][0] <= batch.last_offset:
                        aborted_now.add(aborted_pending.pop(0)[1])
                    if batch.is_control:
                        if batch.control_type is ControlRecordType.ABORT:
                            aborted_now.discard(batch.producer_id)
                        continue
                    if batch.is_transactional and batch.producer_id in aborted_now:
                        continue
                elif batch.is_control:
                    continue
                kept.extend(
                    (r.offset, bytes(r.value or b"")) for r in batch.records() if r.offset >= offset
                )
            offset = batches[-1].next_offset


def read_committed_raw(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    found: list[tuple[int, int, bytes]] = []
    for p in range(partitions):
        read = read_partition_raw(bootstrap, topic, p, READ_COMMITTED)
        found.extend((p, offset, value) for offset, value in read.records)
    return found


def describe_transaction(bootstrap: str, transactional_id: str) -> TransactionState:
    with wire(bootstrap) as client:
        response = client.request(DescribeTransactionsRequest([transactional_id]), 0)
    assert isinstance(response, DescribeTransactionsResponse)
    return response.transaction_states[0]


def list_transactions(bootstrap: str, states: list[str] | None = None) -> ListTransactionsResponse:
    request = ListTransactionsRequest(state_filters=states or [], producer_id_filters=[])
    with wire(bootstrap) as client:
        response = client.request(request, 1)
    assert isinstance(response, ListTransactionsResponse)
    return response


def describe_producers(bootstrap: str, topic: str, partitions: int) -> DescribeProducersResponse:
    request = DescribeProducersRequest([TopicRequest(topic, list(range(partitions)))])
    with wire(bootstrap) as client:
        response = client.request(request, 0)
    assert isinstance(response, DescribeProducersResponse)
    return response


def wait_until(what: str, check: Any, timeout: float) -> Any:
    """Poll ``check()`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)
