"""The producer against a scripted broker: old protocol versions, and every error answer.

``StubBroker`` is a small asyncio Kafka broker on kayak's sans-I/O ``ServerConnection``. It
advertises whatever API versions a test gives it (Kafka 1.0's, say), keeps one log per
partition, and checks idempotent sequences as Kafka does (duplicates answered with their
original offsets, gaps refused with OUT_OF_ORDER_SEQUENCE_NUMBER, stale epochs fenced). Tests
script faults per partition: an error code to answer instead of appending, or "lose" (append,
then drop the connection before answering, as a crashed network would).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field

import pytest

from kayak.client.backoff import ConstantBackoff
from kayak.client.producer import Producer
from kayak.errors import (
    ErrorCode,
    InvalidRecordError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from kayak.protocol.connection import ServerConnection
from kayak.protocol.events import RequestReceived, UnsupportedRequest
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from kayak.protocol.messages.init_producer_id_request import InitProducerIdRequest
from kayak.protocol.messages.init_producer_id_response import InitProducerIdResponse
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kayak.protocol.messages.produce_request import ProduceRequest
from kayak.protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kayak.protocol.records import iter_batches, read_batch_header, validate_batch
from tests.client.test_producer_support import run

pytestmark = pytest.mark.timeout(30)

TOPIC = "t"

# What a Kafka 1.0 broker advertises (no flexible versions anywhere).
KAFKA_1_0 = {
    ApiKey.PRODUCE: (0, 5),
    ApiKey.FETCH: (0, 6),
    ApiKey.LIST_OFFSETS: (0, 2),
    ApiKey.METADATA: (0, 5),
    ApiKey.API_VERSIONS: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 0),
}
# A current broker, for the error scripts.
MODERN = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
}
LOSE = "lose"  # a fault: append, then drop the connection without answering


@dataclass
class Stored:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    values: list[bytes | None]


@dataclass
class _ProducerEntry:
    epoch: int
    recent: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=5))


class StubBroker:
    """A one-node broker with one topic, scripted faults, and Kafka's sequence rules."""

    def __init__(self, advertised: dict[int, tuple[int, int]], partitions: int = 2) -> None:
        self.advertised = advertised
        self.partitions = partitions
        self.port = 0
        self.logs: dict[int, list[Stored]] = {p: [] for p in range(partitions)}
        self.faults: dict[int, deque[int | str]] = {p: deque() for p in range(partitions)}
        self.seen: list[tuple[int, int]] = []  # (api key, version) of every request
        self.init_requests: list[InitProducerIdRequest] = []
        self.response_delay = 0.0
        self.leaderless: dict[int, int] = {}  # partition -> Metadata answers until it has one
        self.out_of_order = 0  # batches refused for a sequence gap
        self._state: dict[tuple[int, int], _ProducerEntry] = {}
        self._next_producer_id = 1000
        self._server: asyncio.Server | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def versions(self, api_key: int) -> list[int]:
        return [version for key, version in self.seen if key == api_key]

    def values(self, partition: int) -> list[bytes | None]:
        return [v for stored in self.logs[partition] for v in stored.values]

    async def __aenter__(self) -> StubBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    # -- connections ----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = ServerConnection()
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(1 << 20):
                server.receive_data(data)
                while (event := server.next_event()) is not None:
                    reply = self._answer(server, event)
                    if reply is None:
                        writer.close()
                        return
                    if self.response_delay:
                        # Answers stay in order: every one is delayed by the same amount.
                        loop.call_later(self.response_delay, _write, writer, reply)
                    else:
                        writer.write(reply)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def _answer(
        self, server: ServerConnection, event: RequestReceived | UnsupportedRequest
    ) -> bytes | None:
        key, version, correlation = event.api_key, event.api_version, event.correlation_id
        self.seen.append((key, version))
        low, high = self.advertised.get(key, (0, -1))
        if key == ApiKey.API_VERSIONS and not low <= version <= high:
            # KIP-511: answer at v0 with our versions so the client can pick one.
            reply = server.send_response(correlation, key, 0, self._api_versions(35))
            return bytes(reply)
        if isinstance(event, UnsupportedRequest) or not low <= version <= high:
            return None
        request = event.request
        response: Message | None
        if key == ApiKey.API_VERSIONS:
            response = self._api_versions(0)
        elif key == ApiKey.METADATA:
            assert isinstance(request, MetadataRequest)
            response = self._metadata(request)
        elif key == ApiKey.INIT_PRODUCER_ID:
            assert isinstance(request, InitProducerIdRequest)
            response = self._init_producer_id(request)
        elif key == ApiKey.PRODUCE:
            assert isinstance(request, ProduceRequest)
            response = self._produce(request)
            if response is None:
                return None  # a "lose" fault: the answer never comes
            if request.acks == 0:
                return b""
        else:
            return None
        return bytes(server.send_response(correlation, key, version, response))

    # -- requests -------------------------------------------------------------------------------

    def _api_versions(self, error_code: int) -> ApiVersionsResponse:
        keys = [ApiVersion(k, low, high) for k, (low, high) in sorted(self.advertised.items())]
        return ApiVersionsResponse(error_code=error_code, api_keys=keys)

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        partitions = [
            MetadataResponsePartition(
                partition_index=p,
                leader_id=-1 if self.leaderless.get(p, 0) > 0 else 0,
                leader_epoch=0,
                replica_nodes=[0],
                isr_nodes=[0],
            )
            for p in range(self.partitions)
        ]
        for partition, answers in self.leaderless.items():
            self.leaderless[partition] = answers - 1
        topics = []
        for wanted in request.topics or [None]:
            name = TOPIC if wanted is None else wanted.name
            if name == TOPIC:
                topics.append(MetadataResponseTopic(name=TOPIC, partitions=partitions))
            else:
                topics.append(MetadataResponseTopic(error_code=3, name=name))
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
            cluster_id="stub",
            controller_id=0,
            topics=topics,
        )

    def _init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        self.init_requests.append(request)
        if request.producer_id >= 0:  # KIP-360: bump the epoch of a known producer
            return InitProducerIdResponse(
                producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
            )
        self._next_producer_id += 1
        return InitProducerIdResponse(producer_id=self._next_producer_id, producer_epoch=0)

    def _produce(self, request: ProduceRequest) -> ProduceResponse | None:
        response = ProduceResponse()
        lose = False
        for topic in request.topic_data:
            results = TopicProduceResponse(name=topic.name)
            for data in topic.partition_data:
                fault = self.faults[data.index].popleft() if self.faults[data.index] else None
                result = PartitionProduceResponse(index=data.index)
                if isinstance(fault, int) and fault != 0:  # 0: no fault this time
                    result.error_code, result.base_offset = fault, -1
                else:
                    assert isinstance(data.records, bytes | bytearray | memoryview)
                    self._append(data.index, bytes(data.records), result)
                    lose = lose or fault == LOSE
                results.partition_responses.append(result)
            response.responses.append(results)
        return None if lose else response

    def _append(self, partition: int, records: bytes, result: PartitionProduceResponse) -> None:
        header = read_batch_header(records, 0)
        assert header is not None
        validate_batch(header, records)  # the CRC must hold, restamped batches included
        log = self.logs[partition]
        next_offset = sum(len(s.values) for s in log)
        code = self._check_sequence(partition, header.producer_id, header.producer_epoch,
                                    header.base_sequence, header.record_count, result)  # fmt: skip
        if code is not None:
            result.error_code = code
            return
        batch = next(iter(iter_batches(records)))
        values = [record.value for record in batch]
        values = [bytes(v) if v is not None else None for v in values]
        log.append(Stored(header.producer_id, header.producer_epoch, header.base_sequence,
                          next_offset, values))  # fmt: skip
        result.base_offset = next_offset
        if header.producer_id >= 0:
            entry = self._state[(header.producer_id, partition)]
            last = header.base_sequence + header.record_count - 1
            entry.recent.append((header.base_sequence, last, next_offset))

    def _check_sequence(
        self,
        partition: int,
        producer_id: int,
        epoch: int,
        sequence: int,
        count: int,
        result: PartitionProduceResponse,
    ) -> int | None:
        """Kafka's checks: None to append, else the error code (a duplicate answers with its
        original offset and code 0 without appending)."""
        if producer_id < 0:
            return None
        entry = self._state.get((producer_id, partition))
        if entry is None or epoch > entry.epoch:
            if entry is not None and sequence != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            self._state[(producer_id, partition)] = _ProducerEntry(epoch)
            return None
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        for first, last, offset in entry.recent:
            if (first, last) == (sequence, sequence + count - 1):
                result.base_offset = offset
                return 0
        expected = entry.recent[-1][1] + 1 if entry.recent else 0
        if sequence != expected:
            self.out_of_order += 1
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        return None


def _write(writer: asyncio.StreamWriter, reply: bytes) -> None:
    if not writer.is_closing():
        writer.write(reply)


def _producer(stub: StubBroker, **settings: object) -> Producer:
    return Producer(
        {"bootstrap.servers": stub.bootstrap},
        retry_backoff_ms=10,
        retry_backoff_max_ms=50,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=50,
        **settings,
    )


# -- old brokers -----------------------------------------------------------------------------------


def test_a_kafka_1_0_broker_gets_the_versions_it_speaks() -> None:
    async def main() -> StubBroker:
        async with StubBroker(KAFKA_1_0) as stub, _producer(stub) as producer:
            futures = [await producer.send(TOPIC, b"v%d" % i, partition=i % 2) for i in range(40)]
            offsets = [(await f).offset for f in futures]
            assert offsets == [i // 2 for i in range(40)]
            return stub

    stub = run(main())
    assert set(stub.versions(ApiKey.PRODUCE)) == {5}
    assert set(stub.versions(ApiKey.METADATA)) == {5}
    assert set(stub.versions(ApiKey.INIT_PRODUCER_ID)) == {0}
    assert stub.values(0) == [b"v%d" % i for i in range(0, 40, 2)]
    assert stub.values(1) == [b"v%d" % i for i in range(1, 40, 2)]
    first = stub.logs[0][0]
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (1001, 0, 0)


def test_a_broker_before_kafka_0_11_is_refused_clearly() -> None:
    old = {ApiKey.PRODUCE: (0, 2), ApiKey.METADATA: (0, 2), ApiKey.API_VERSIONS: (0, 0)}

    async def main() -> None:
        async with StubBroker(old) as stub:
            with pytest.raises(UnsupportedVersionError, match=r"Produce v3\+"):
                await _producer(stub).start()

    run(main())


def test_without_init_producer_id_idempotence_is_off_unless_asked_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    versions = {k: v for k, v in KAFKA_1_0.items() if k != ApiKey.INIT_PRODUCER_ID}

    async def main() -> StubBroker:
        async with StubBroker(versions) as stub:
            with pytest.raises(UnsupportedVersionError, match="InitProducerId"):
                await _producer(stub, enable_idempotence=True).start()
            with caplog.at_level(logging.WARNING):
                async with _producer(stub) as producer:
                    await producer.send_and_wait(TOPIC, b"plain", partition=0)
            return stub

    stub = run(main())
    assert "idempotence" in caplog.text
    assert stub.logs[0][0].producer_id == -1


# -- error answers ---------------------------------------------------------------------------------


class RecordingBackoff:
    """A retry backoff strategy that remembers the attempts it was asked about."""

    def __init__(self) -> None:
        self.attempts: list[int] = []
        self._inner = ConstantBackoff(5)

    def delay(self, attempt: int) -> float:
        self.attempts.append(attempt)
        return self._inner.delay(attempt)


def test_retriable_errors_retry_in_order_with_the_same_sequence() -> None:
    """NOT_LEADER_OR_FOLLOWER refreshes metadata, REQUEST_TIMED_OUT just waits; both retry the
    same batch (same sequence) through the pluggable backoff, and nothing is stored twice."""
    backoff = RecordingBackoff()

    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub:
            producer = Producer(
                {"bootstrap.servers": stub.bootstrap}, retry_backoff=backoff, linger_ms=0
            )
            async with producer:
                await producer.send_and_wait(TOPIC, b"first", partition=0)
                metadata_before = len(stub.versions(ApiKey.METADATA))
                stub.faults[0].extend([ErrorCode.NOT_LEADER_OR_FOLLOWER] * 2)
                stub.faults[1].append(ErrorCode.REQUEST_TIMED_OUT)
                zero = await producer.send(TOPIC, b"second", partition=0)
                one = await producer.send(TOPIC, b"other", partition=1)
                assert (await zero).offset == 1
                assert (await one).offset == 0
                assert len(stub.versions(ApiKey.METADATA)) > metadata_before
            return stub

    stub = run(main())
    assert stub.values(0) == [b"first", b"second"]
    assert stub.values(1) == [b"other"]
    assert stub.logs[0][1].base_sequence == 1
    assert 0 in backoff.attempts and 1 in backoff.attempts


def test_lost_answers_are_retried_and_deduplicated_by_the_broker() -> None:
    async def main() -> tuple[StubBroker, list[int]]:
        async with StubBroker(MODERN) as stub, _producer(stub, linger_ms=0) as producer:
            stub.faults[0].extend([LOSE, LOSE])
            future = await producer.send(TOPIC, b"once", partition=0)
            batch = await (await producer.send_batch(TOPIC, [b"a", b"b", b"c"], partition=0))
            return stub, [(await future).offset, *batch.offsets()]

    stub, offsets = run(main())
    assert stub.values(0) == [b"once", b"a", b"b", b"c"]
    assert offsets == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "error", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID]
)
def test_a_broker_that_lost_our_sequence_makes_the_epoch_bump(error: int) -> None:
    """KIP-360: the broker refuses the batch it should expect next: the producer waits for its
    requests in flight, bumps the epoch (InitProducerId with its id and epoch) and resends
    everything unacknowledged from sequence 0."""

    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub, _producer(stub, linger_ms=0) as producer:
            await producer.send_and_wait(TOPIC, b"before", partition=0)
            stub.faults[0].append(error)
            futures = [await producer.send(TOPIC, b"after-%d" % i, partition=0) for i in range(5)]
            assert [(await f).offset for f in futures] == [1, 2, 3, 4, 5]
            return stub

    stub = run(main())
    assert stub.values(0) == [b"before", *(b"after-%d" % i for i in range(5))]
    assert len(stub.init_requests) == 2
    bump = stub.init_requests[1]
    assert (bump.producer_id, bump.producer_epoch) == (1001, 0)
    epochs = [(s.producer_epoch, s.base_sequence) for s in stub.logs[0]]
    assert epochs[0] == (0, 0)
    assert epochs[1] == (1, 0)  # the new epoch starts again at sequence 0


def test_fatal_errors_fail_the_records_without_retrying() -> None:
    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub, _producer(stub, linger_ms=0) as producer:
            stub.faults[0].append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            with pytest.raises(TopicAuthorizationFailedError, match="t-0"):
                await producer.send_and_wait(TOPIC, b"refused", partition=0)
            stub.faults[1].append(ErrorCode.INVALID_RECORD)
            batch = await producer.send_batch(TOPIC, [b"x", b"y"], partition=1)
            with pytest.raises(InvalidRecordError):
                await batch
            # The sequence gap a failed batch leaves is healed by an epoch bump.
            assert (await producer.send_and_wait(TOPIC, b"later", partition=0)).offset == 0
            return stub

    stub = run(main())
    assert stub.values(0) == [b"later"]
    assert stub.versions(ApiKey.PRODUCE).count(stub.versions(ApiKey.PRODUCE)[0]) == len(
        stub.versions(ApiKey.PRODUCE)
    )


def test_a_retry_among_many_requests_in_flight_keeps_the_order() -> None:
    """Five requests in flight; the second fails with a retriable error, so the broker refuses
    the ones after it as out of order. They all go again, in order: the log has every record
    once, in the order sent."""

    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub:
            stub.response_delay = 0.02
            async with _producer(stub, linger_ms=0, batch_size=200) as producer:
                await producer.send_and_wait(TOPIC, b"warm-up", partition=0)
                stub.faults[0].extend([0, ErrorCode.NOT_ENOUGH_REPLICAS])  # 0: no fault
                futures = []
                for i in range(300):
                    futures.append(await producer.send(TOPIC, b"r%03d" % i, partition=0))
                    if i % 10 == 0:
                        await asyncio.sleep(0)  # let batches go out one after another
                offsets = [(await f).offset for f in futures]
                assert offsets == list(range(1, 301))
            return stub

    stub = run(main())
    assert stub.out_of_order >= 2, "the batches after the failed one were in flight"
    assert stub.values(0) == [b"warm-up", *(b"r%03d" % i for i in range(300))]
    sequences = [(s.base_sequence, len(s.values)) for s in stub.logs[0]]
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(sequences))


def test_the_first_batch_of_a_new_producer_goes_alone_so_a_refusal_cannot_reorder() -> None:
    """A broker with no state for a producer accepts any sequence (Kafka does: the state may
    have expired, KIP-360). Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a moment after a
    topic is created; had the batches behind the first one been in flight, the broker would
    have stored them first and refused the first one's retry as out of order for good. So a
    partition's first batch goes alone; pipelining starts once the broker has stored it."""

    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub:
            stub.response_delay = 0.02
            stub.faults[0].append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            settings = {"request_timeout_ms": 1000, "delivery_timeout_ms": 3000}
            async with _producer(stub, linger_ms=0, batch_size=200, **settings) as producer:
                futures = []
                for i in range(100):
                    futures.append(await producer.send(TOPIC, b"r%03d" % i, partition=0))
                    if i % 10 == 0:
                        await asyncio.sleep(0)  # let batches go out one after another
                offsets = [(await f).offset for f in futures]
                assert offsets == list(range(100))
            return stub

    stub = run(main())
    assert stub.values(0) == [b"r%03d" % i for i in range(100)]
    assert stub.logs[0][0].base_sequence == 0


def test_a_partition_without_a_leader_waits_for_one() -> None:
    """Records for a leaderless partition wait while metadata is fetched again, then go."""

    async def main() -> StubBroker:
        async with StubBroker(MODERN) as stub:
            stub.leaderless[1] = 3  # no leader in the first three Metadata answers
            async with _producer(stub, linger_ms=0) as producer:
                waiting = await producer.send(TOPIC, b"patient", partition=1)
                assert (await waiting).offset == 0
            return stub

    stub = run(main())
    assert stub.values(1) == [b"patient"]
    assert len(stub.versions(ApiKey.METADATA)) >= 4


def test_a_cancelled_future_does_not_stop_the_others_resolving() -> None:
    async def main() -> list[int]:
        async with StubBroker(MODERN) as stub, _producer(stub, linger_ms=50) as producer:
            futures = [await producer.send(TOPIC, b"r%d" % i, partition=0) for i in range(5)]
            futures[2].cancel()
            await producer.flush()
            assert futures[2].cancelled()
            return [(await f).offset for i, f in enumerate(futures) if i != 2]

    assert run(main()) == [0, 1, 3, 4]
