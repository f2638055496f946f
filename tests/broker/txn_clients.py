"""Three third-party clients' transactional APIs behind one small interface, for
``test_interop_transactions.py``; holds no tests.

Each client comes with its own producer and its own consumers (nothing here reads with
another client's consumer): confluent-kafka (librdkafka), kafka-python and aiokafka. aiokafka
is asynchronous; its adapter drives a private event loop so the scenarios read the same for
all three. What each adapter does is each client's documented transactional API:

- :class:`TxnProducer`: init (on construction), begin, send to a partition, send offsets to
  the transaction with the consumer's group metadata (aiokafka: the group id only, all it
  takes), commit, abort;
- :class:`GroupConsumer`: a member of a consumer group (subscribe), read_committed, no
  auto commit: what a consume-transform-produce loop reads with;
- :func:`read_values`: every value of a topic read by a fresh assign()-ed consumer at an
  isolation level, until ``expected`` values came and then ``quiet`` seconds more;
- :func:`committed_offsets`: a group's committed offsets, asked by a read_uncommitted consumer
  (which does not wait for pending transactional offsets: KIP-447's require_stable is off);
- :func:`is_fenced`: the fatal error each client raises for a fenced producer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import aiokafka
import aiokafka.errors
import confluent_kafka
import kafka
import kafka.errors
from kafka.structs import OffsetAndMetadata

from tests.broker.interop_helpers import HEARTBEAT_MS, SESSION_TIMEOUT_MS, subscribe_when_known

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
TXN_TIMEOUT_MS = 60_000
OPERATION_TIMEOUT_S = 30.0
Offsets = dict[int, int]  # partition -> offset (one topic at a time)
T = TypeVar("T")


class GroupConsumer(Protocol):
    def poll_values(self, max_records: int) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) of up to ``max_records`` records; waits for some."""

    def positions(self) -> Offsets: ...

    def seek(self, offsets: Offsets) -> None:
        """Every assigned partition to its offset in ``offsets`` (0 when not there)."""

    def close(self) -> None: ...


class TxnProducer(Protocol):
    def begin(self) -> None: ...

    def send(self, topic: str, partition: int, value: bytes) -> None: ...

    def flush(self) -> None: ...

    def send_offsets(self, topic: str, offsets: Offsets, consumer: GroupConsumer) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


def producer(client: str, bootstrap: str, transactional_id: str) -> TxnProducer:
    """A transactional producer of ``client``, its transactions initialised."""
    kinds: dict[str, Callable[[str, str], TxnProducer]] = {
        "confluent-kafka": ConfluentProducer,
        "kafka-python": KafkaPythonProducer,
        "aiokafka": AioProducer,
    }
    return kinds[client](bootstrap, transactional_id)


def group_consumer(client: str, bootstrap: str, group: str, topic: str) -> GroupConsumer:
    kinds: dict[str, Callable[[str, str, str], GroupConsumer]] = {
        "confluent-kafka": ConfluentGroupConsumer,
        "kafka-python": KafkaPythonGroupConsumer,
        "aiokafka": AioGroupConsumer,
    }
    return kinds[client](bootstrap, group, topic)


def _collect(
    poll: Callable[[], list[bytes]], expected: int, quiet: float, timeout: float
) -> list[bytes]:
    """Poll until ``expected`` values came, then ``quiet`` seconds more (to see any extra)."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {len(values)} of {expected} values")
        values.extend(poll())
    quiet_until = time.monotonic() + quiet
    while time.monotonic() < quiet_until:
        values.extend(poll())
    return values


# -- confluent-kafka ------------------------------------------------------------------------


def _confluent_consumer(bootstrap: str, group: str, **extra: Any) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            **extra,
        }
    )


def _confluent_values(consumer: confluent_kafka.Consumer, max_records: int) -> list[Any]:
    messages = consumer.consume(max_records, 0.2)
    for message in messages:
        if message.error() is not None:
            raise confluent_kafka.KafkaException(message.error())
    return list(messages)


class ConfluentProducer:
    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(OPERATION_TIMEOUT_S)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.produce(topic, value=value, partition=partition)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(OPERATION_TIMEOUT_S) == 0, "records still undelivered"

    def send_offsets(self, topic: str, offsets: Offsets, consumer: GroupConsumer) -> None:
        assert isinstance(consumer, ConfluentGroupConsumer)
        self.producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()],
            consumer.consumer.consumer_group_metadata(),
            OPERATION_TIMEOUT_S,
        )

    def commit(self) -> None:
        self.producer.commit_transaction(OPERATION_TIMEOUT_S)

    def abort(self) -> None:
        self.producer.abort_transaction(OPERATION_TIMEOUT_S)

    def close(self) -> None:
        self.producer.flush(0)


class ConfluentGroupConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.consumer = _confluent_consumer(
            bootstrap, group, **{"isolation.level": "read_committed"}
        )
        self.consumer.subscribe([topic])

    def poll_values(self, max_records: int) -> list[tuple[int, int, bytes]]:
        return [
            (m.partition(), m.offset(), m.value())
            for m in _confluent_values(self.consumer, max_records)
        ]

    def positions(self) -> Offsets:
        return {
            tp.partition: tp.offset for tp in self.consumer.position(self.consumer.assignment())
        }

    def seek(self, offsets: Offsets) -> None:
        for tp in self.consumer.assignment():
            self.consumer.seek(
                confluent_kafka.TopicPartition(tp.topic, tp.partition, offsets.get(tp.partition, 0))
            )

    def close(self) -> None:
        self.consumer.close()


def _confluent_read(
    bootstrap: str, topic: str, partitions: int, isolation: str, expected: int, quiet: float
) -> list[bytes]:
    consumer = _confluent_consumer(bootstrap, "reader", **{"isolation.level": isolation})
    consumer.assign(
        [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
         for p in range(partitions)]
    )  # fmt: skip
    try:
        return _collect(
            lambda: [m.value() for m in _confluent_values(consumer, 500)], expected, quiet, 30
        )
    finally:
        consumer.close()


def _confluent_committed(bootstrap: str, group: str, topic: str, partitions: int) -> Offsets:
    consumer = _confluent_consumer(bootstrap, group, **{"isolation.level": "read_uncommitted"})
    try:
        found = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)],
            OPERATION_TIMEOUT_S,
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


# -- kafka-python ---------------------------------------------------------------------------


def _kafka_python_consumer(bootstrap: str, group: str | None, **extra: Any) -> kafka.KafkaConsumer:
    return kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        **extra,
    )


class KafkaPythonProducer:
    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            transaction_timeout_ms=TXN_TIMEOUT_MS,
            linger_ms=5,
        )
        self.producer.init_transactions()

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.send(topic, value=value, partition=partition)

    def flush(self) -> None:
        self.producer.flush(OPERATION_TIMEOUT_S)

    def send_offsets(self, topic: str, offsets: Offsets, consumer: GroupConsumer) -> None:
        assert isinstance(consumer, KafkaPythonGroupConsumer)
        self.producer.send_offsets_to_transaction(
            {
                kafka.TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in offsets.items()
            },
            consumer.consumer.group_metadata(),
        )

    def commit(self) -> None:
        self.producer.commit_transaction()

    def abort(self) -> None:
        self.producer.abort_transaction()

    def close(self) -> None:
        self.producer.close(timeout=5)


class KafkaPythonGroupConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = _kafka_python_consumer(bootstrap, group, isolation_level="read_committed")
        subscribe_when_known(self.consumer, topic)

    def poll_values(self, max_records: int) -> list[tuple[int, int, bytes]]:
        batches = self.consumer.poll(timeout_ms=200, max_records=max_records)
        return [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]

    def positions(self) -> Offsets:
        return {tp.partition: self.consumer.position(tp) for tp in self.consumer.assignment()}

    def seek(self, offsets: Offsets) -> None:
        for tp in self.consumer.assignment():
            self.consumer.seek(tp, offsets.get(tp.partition, 0))

    def close(self) -> None:
        self.consumer.close()


def _kafka_python_read(
    bootstrap: str, topic: str, partitions: int, isolation: str, expected: int, quiet: float
) -> list[bytes]:
    consumer = _kafka_python_consumer(bootstrap, None, isolation_level=isolation)
    tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)

    def poll() -> list[bytes]:
        batches = consumer.poll(timeout_ms=200)
        return [r.value for rs in batches.values() for r in rs]

    try:
        return _collect(poll, expected, quiet, 30)
    finally:
        consumer.close()


def _kafka_python_committed(bootstrap: str, group: str, topic: str, partitions: int) -> Offsets:
    consumer = _kafka_python_consumer(bootstrap, group)
    try:
        found = {p: consumer.committed(kafka.TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()
    return {p: o for p, o in found.items() if o is not None}


# -- aiokafka -------------------------------------------------------------------------------


class _Loop:
    """A private event loop: aiokafka's coroutines run to completion one call at a time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(awaitable, OPERATION_TIMEOUT_S))

    def call(self, function: Callable[[], T]) -> T:
        """Call ``function`` inside the loop (aiokafka's sync methods want a running loop)."""

        async def inside() -> T:
            return function()

        return self.run(inside())

    def close(self) -> None:
        self.loop.close()


async def _aio_consumer(
    bootstrap: str, group: str | None, **extra: Any
) -> aiokafka.AIOKafkaConsumer:
    """A started aiokafka consumer (made inside a coroutine: it takes the running loop)."""
    made = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        **extra,
    )
    await made.start()
    return made


async def _aio_producer(bootstrap: str, transactional_id: str) -> aiokafka.AIOKafkaProducer:
    made = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        transaction_timeout_ms=TXN_TIMEOUT_MS,
        enable_idempotence=True,
        linger_ms=5,
    )
    await made.start()  # initialises the transactions (InitProducerId)
    return made


class AioProducer:
    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.loop = _Loop()
        self.producer = self.loop.run(_aio_producer(bootstrap, transactional_id))
        self.pending: list[asyncio.Future[Any]] = []

    def begin(self) -> None:
        self.loop.run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.pending.append(self.loop.run(self.producer.send(topic, value, partition=partition)))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        self.loop.run(self.producer.flush())
        for future in pending:
            self.loop.run(future)

    def send_offsets(self, topic: str, offsets: Offsets, consumer: GroupConsumer) -> None:
        assert isinstance(consumer, AioGroupConsumer)
        self.loop.run(
            self.producer.send_offsets_to_transaction(
                {aiokafka.TopicPartition(topic, p): o for p, o in offsets.items()},
                consumer.group,
            )
        )

    def commit(self) -> None:
        self.loop.run(self.producer.commit_transaction())

    def abort(self) -> None:
        self.loop.run(self.producer.abort_transaction())

    def close(self) -> None:
        try:
            self.loop.run(self.producer.stop())
        finally:
            self.loop.close()


class AioGroupConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.loop, self.group = _Loop(), group
        self.consumer = self.loop.run(
            _aio_consumer(bootstrap, group, isolation_level="read_committed")
        )
        self.loop.call(lambda: self.consumer.subscribe([topic]))

    def poll_values(self, max_records: int) -> list[tuple[int, int, bytes]]:
        batches = self.loop.run(self.consumer.getmany(timeout_ms=200, max_records=max_records))
        return [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]

    def positions(self) -> Offsets:
        return {
            tp.partition: self.loop.run(self.consumer.position(tp))
            for tp in self.consumer.assignment()
        }

    def seek(self, offsets: Offsets) -> None:
        def seek_all() -> None:
            for tp in self.consumer.assignment():
                self.consumer.seek(tp, offsets.get(tp.partition, 0))

        self.loop.call(seek_all)

    def close(self) -> None:
        try:
            self.loop.run(self.consumer.stop())
        finally:
            self.loop.close()


def _aio_read(
    bootstrap: str, topic: str, partitions: int, isolation: str, expected: int, quiet: float
) -> list[bytes]:
    loop = _Loop()
    consumer = loop.run(_aio_consumer(bootstrap, None, isolation_level=isolation))
    tps = [aiokafka.TopicPartition(topic, p) for p in range(partitions)]
    loop.call(lambda: consumer.assign(tps))
    loop.run(consumer.seek_to_beginning(*tps))

    def poll() -> list[bytes]:
        batches = loop.run(consumer.getmany(timeout_ms=200))
        return [r.value for rs in batches.values() for r in rs]

    try:
        return _collect(poll, expected, quiet, 30)
    finally:
        loop.run(consumer.stop())
        loop.close()


def _aio_committed(bootstrap: str, group: str, topic: str, partitions: int) -> Offsets:
    loop = _Loop()
    consumer = loop.run(_aio_consumer(bootstrap, group))
    try:
        found = {
            p: loop.run(consumer.committed(aiokafka.TopicPartition(topic, p)))
            for p in range(partitions)
        }
    finally:
        loop.run(consumer.stop())
        loop.close()
    return {p: o for p, o in found.items() if o is not None}


# -- per client dispatch --------------------------------------------------------------------


def read_values(
    client: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    isolation: str,
    expected: int,
    quiet: float = 1.0,
) -> list[bytes]:
    """Every value ``client``'s own consumer reads from ``topic`` at ``isolation``."""
    readers = {
        "confluent-kafka": _confluent_read,
        "kafka-python": _kafka_python_read,
        "aiokafka": _aio_read,
    }
    return readers[client](bootstrap, topic, partitions, isolation, expected, quiet)


def committed_offsets(
    client: str, bootstrap: str, group: str, topic: str, partitions: int
) -> Offsets:
    """``group``'s committed offsets of ``topic`` (partitions with none are left out)."""
    askers = {
        "confluent-kafka": _confluent_committed,
        "kafka-python": _kafka_python_committed,
        "aiokafka": _aio_committed,
    }
    return askers[client](bootstrap, group, topic, partitions)


def is_fenced(client: str, error: BaseException) -> bool:
    """Whether ``error`` is ``client``'s fatal "producer fenced" error (Kafka's
    ProducerFencedException: another producer took the transactional id; not abortable)."""
    if client == "confluent-kafka":
        if not isinstance(error, confluent_kafka.KafkaException):
            return False
        kafka_error = error.args[0]
        return bool(kafka_error.fatal()) and kafka_error.code() in (
            confluent_kafka.KafkaError._FENCED,
            confluent_kafka.KafkaError.PRODUCER_FENCED,
            confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
        )
    if client == "kafka-python":
        return isinstance(
            error, kafka.errors.ProducerFencedError | kafka.errors.InvalidProducerEpochError
        )
    return isinstance(error, aiokafka.errors.ProducerFenced | aiokafka.errors.InvalidProducerEpoch)
