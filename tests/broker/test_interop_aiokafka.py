"""aiokafka against the real broker process (each test drives its own ``asyncio.run``).

aiokafka speaks non-flexible versions only (Produce <= 8, Fetch <= 11, Metadata <= 5, ...),
so these tests cover the broker's older encodings that librdkafka never asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from tests.broker.conftest import BrokerProcess, running_broker
from tests.broker.interop_helpers import (
    CODECS,
    HEARTBEAT_MS,
    SESSION_TIMEOUT_MS,
    RestartLater,
    Triple,
    check_codecs,
    check_idempotent_batches,
    check_round_trip,
    create_topic,
    idempotent_records,
    mixed_records,
    restart_broker,
    stored_batches,
    unique,
)


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: each test uses topics and groups of its own."""
    yield from running_broker(tmp_path_factory.mktemp("broker") / "data")


PARTITIONS = 3
T0 = 1_600_000_000_000  # a CreateTime stamp far from now


def _producer(bootstrap: str, **extra: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(**{"bootstrap_servers": bootstrap, "linger_ms": 5, **extra})


def _consumer(bootstrap: str, group: str | None, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        **extra,
    )


def _triple(record: Any) -> Triple:
    return (record.key, record.value, list(record.headers))


async def _produce(
    producer: AIOKafkaProducer, topic: str, records: list[Triple], partition: int | None = None
) -> list[tuple[int, int, Triple]]:
    """Send every record, then wait; (partition, offset, record) from each RecordMetadata."""
    futures = [
        await producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        for key, value, headers in records
    ]
    out = []
    for future, record in zip(futures, records, strict=True):
        metadata = await asyncio.wait_for(future, 20)
        out.append((metadata.partition, metadata.offset, record))
    return out


async def _read_to_end(
    bootstrap: str, topic: str, partitions: int, timeout: float = 20.0
) -> dict[int, list[tuple[int, Triple]]]:
    consumer = _consumer(bootstrap, None)
    await consumer.start()
    consumed: dict[int, list[tuple[int, Triple]]] = {}
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while [await consumer.position(tp) for tp in tps] != [end[tp] for tp in tps]:
            assert time.monotonic() < deadline, "did not reach the end of every partition"
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                for record in records:
                    consumed.setdefault(tp.partition, []).append((record.offset, _triple(record)))
    finally:
        await consumer.stop()
    return consumed


async def _eventually(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


# -- 1. every codec ------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(broker_process: BrokerProcess, codec: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique(f"aiokafka-{codec}")
    create_topic(bootstrap, topic, PARTITIONS)

    async def scenario() -> None:
        producer = _producer(bootstrap, compression_type=None if codec == "none" else codec)
        await producer.start()
        try:
            sent = await _produce(producer, topic, mixed_records(codec, 40))
        finally:
            await producer.stop()
        check_round_trip(sent, await _read_to_end(bootstrap, topic, PARTITIONS))

    asyncio.run(scenario())
    stored = stored_batches(bootstrap, topic, PARTITIONS)
    check_codecs(stored, codec)
    assert sum(b.record_count for b in stored) == 80


# -- timestamps, records larger than the fetch size, long polling ---------------------------


@pytest.mark.timeout(60)
def test_create_time_and_log_append_time(broker_process: BrokerProcess) -> None:
    """CreateTime stamps are kept; LogAppendTime topics are stamped by the broker, which
    rewrites the batch (the consumer checks CRCs, so a stale CRC fails here)."""
    bootstrap = broker_process.bootstrap_servers
    create_time, append_time = unique("aiokafka-ct"), unique("aiokafka-lat")
    create_topic(bootstrap, create_time, 1)
    create_topic(bootstrap, append_time, 1, {"message.timestamp.type": "LogAppendTime"})

    async def scenario() -> None:
        producer = _producer(bootstrap)
        await producer.start()
        before = int(time.time() * 1000)
        try:
            kept = await producer.send_and_wait(create_time, b"c", timestamp_ms=1_600_000_000_000)
            stamped = await producer.send_and_wait(
                append_time, b"a", timestamp_ms=1_600_000_000_000
            )
        finally:
            await producer.stop()
        after = int(time.time() * 1000)
        assert (kept.timestamp, kept.timestamp_type) == (T0, 0)
        assert stamped.timestamp_type == 1
        assert before - 5000 <= stamped.timestamp <= after + 1000, (before, stamped, after)

        consumer = _consumer(bootstrap, None, check_crcs=True)
        await consumer.start()
        consumer.assign([TopicPartition(create_time, 0), TopicPartition(append_time, 0)])
        seen: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + 15
        try:
            while len(seen) < 2:
                assert time.monotonic() < deadline, seen
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    seen.update((tp.topic, (r.timestamp_type, r.timestamp)) for r in records)
        finally:
            await consumer.stop()
        assert seen == {
            create_time: (0, T0),
            append_time: (1, stamped.timestamp),
        }

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_record_larger_than_fetch_sizes(broker_process: BrokerProcess) -> None:
    """KIP-74: the first batch comes back even when it exceeds both fetch size limits."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("aiokafka-large")
    create_topic(bootstrap, topic, 1)
    big = bytes(range(256)) * 2800

    async def scenario() -> list[tuple[int, bytes]]:
        producer = _producer(bootstrap, max_request_size=1_000_000)
        await producer.start()
        try:
            await _produce(producer, topic, [(b"big", big, []), (b"small", b"s", [])], 0)
        finally:
            await producer.stop()
        consumer = _consumer(bootstrap, None, max_partition_fetch_bytes=1024, fetch_max_bytes=1024)
        await consumer.start()
        consumer.assign([TopicPartition(topic, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 15
        try:
            while len(got) < 2:
                assert time.monotonic() < deadline, [offset for offset, _ in got]
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(scenario()) == [(0, big), (1, b"s")]


@pytest.mark.timeout(60)
def test_long_poll_is_woken_by_an_append(broker_process: BrokerProcess) -> None:
    """With fetch_max_wait_ms=5000 a parked fetch must return when the record arrives."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("aiokafka-long-poll")
    create_topic(bootstrap, topic, 1)

    async def scenario() -> tuple[list[bytes], float]:
        consumer = _consumer(bootstrap, None, fetch_max_wait_ms=5000)
        producer = _producer(bootstrap, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            assert await consumer.getmany(timeout_ms=1000) == {}  # park a fetch
            await producer.send_and_wait(topic, b"wake up")
            started = time.monotonic()
            got: list[bytes] = []
            while not got and time.monotonic() - started < 10:
                for records in (await consumer.getmany(timeout_ms=20)).values():
                    got.extend(r.value for r in records)
            return got, time.monotonic() - started
        finally:
            await producer.stop()
            await consumer.stop()

    got, waited = asyncio.run(scenario())
    assert got == [b"wake up"]
    assert waited < 2.0, f"the record took {waited:.2f}s to arrive: the fetch was not woken"


# -- 2. a two-member group that rebalances ---------------------------------------------------


class Member:
    """A group member consuming in its own task; commits after every record."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, log: Any) -> None:
        self.name, self.topic, self.log = name, topic, log
        self.assigned: set[int] = set()
        self.consumer = _consumer(bootstrap, group)
        self.task: asyncio.Task[None] | None = None
        self.hold = False

    async def start(self) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                member.assigned -= {tp.partition for tp in revoked}

            async def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned |= {tp.partition for tp in assigned}

        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=Listener())
        self.task = asyncio.get_running_loop().create_task(self._consume())

    async def _consume(self) -> None:
        while True:
            if self.hold:
                await asyncio.sleep(0.05)
                continue
            for tp, records in (await self.consumer.getmany(timeout_ms=100)).items():
                for record in records:
                    assert tp.partition in self.assigned, (
                        f"{self.name}: record of {tp.partition} outside {self.assigned}"
                    )
                    self.log.append((self.name, tp.partition, record.offset, record.value))
                    await self.consumer.commit({tp: record.offset + 1})

    def check(self) -> None:
        assert self.task is not None
        if self.task.done() and not self.task.cancelled():
            error = self.task.exception()
            raise AssertionError(f"{self.name} failed: {error!r}") from error

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()


@pytest.mark.timeout(90)
def test_group_of_two_rebalances_and_hands_over(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic, group, partitions = unique("aiokafka-group"), unique("group"), 4
    create_topic(bootstrap, topic, partitions)
    every = set(range(partitions))
    consumed: list[tuple[str, int, int, bytes]] = []
    produced: list[bytes] = []

    def first_offsets(name: str, since: int) -> dict[int, int]:
        firsts: dict[int, int] = {}
        for member, partition, offset, _ in consumed[since:]:
            if member == name:
                firsts.setdefault(partition, offset)
        return firsts

    async def scenario() -> None:
        producer = _producer(bootstrap)
        await producer.start()
        a = Member("A", bootstrap, topic, group, consumed)
        b = Member("B", bootstrap, topic, group, consumed)

        async def produce_round(tag: str) -> None:
            for p in range(partitions):
                values = [b"%s-%d-%d" % (tag.encode(), p, i) for i in range(8)]
                await _produce(producer, topic, [(None, v, []) for v in values], partition=p)
                produced.extend(values)

        def healthy(condition: Callable[[], bool]) -> Callable[[], bool]:
            def check() -> bool:
                a.check()
                if b.task is not None:
                    b.check()
                return condition()

            return check

        def split_evenly() -> bool:
            return (
                bool(a.assigned and b.assigned)
                and not a.assigned & b.assigned
                and (a.assigned | b.assigned == every)
            )

        try:
            await a.start()
            await _eventually(healthy(lambda: a.assigned == every), 20, "A to own every partition")
            await produce_round("one")
            await _eventually(healthy(lambda: len(consumed) == len(produced)), 20, "round one")

            await b.start()
            await _eventually(healthy(split_evenly), 30, "a disjoint covering split")
            b_from_a = set(b.assigned)
            mark = len(consumed)
            await produce_round("two")
            await _eventually(healthy(lambda: len(consumed) == len(produced)), 20, "round two")
            assert split_evenly(), (a.assigned, b.assigned)
            assert first_offsets("B", mark) == dict.fromkeys(b_from_a, 8)

            a.hold = True
            await asyncio.sleep(0.3)  # let a getmany in progress return
            a_partitions = set(a.assigned)
            await produce_round("three")
            a_committed = {
                p: await a.consumer.committed(TopicPartition(topic, p)) for p in a_partitions
            }
            assert a_committed == dict.fromkeys(a_partitions, 16), a_committed
            mark = len(consumed)
            await a.stop()
            await _eventually(
                healthy(lambda: b.assigned == every and len(consumed) == len(produced)),
                30,
                f"B to take over A's partitions and consume round three ({b.assigned})",
            )
            firsts = first_offsets("B", mark)
            assert {p: firsts[p] for p in a_partitions} == a_committed, firsts
        finally:
            await producer.stop()
            await a.stop()
            await b.stop()

    asyncio.run(scenario())
    values = [value for _, _, _, value in consumed]
    assert len(values) == len(set(values)), "a record was consumed twice"
    assert sorted(values) == sorted(produced), "records were lost"


# -- 3. committed offsets survive a broker restart ------------------------------------------


@pytest.mark.timeout(90)
def test_committed_offset_survives_restart(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic, group = unique("aiokafka-restart"), unique("group")
    create_topic(bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    values = [b"restart-%02d" % i for i in range(20)]

    async def first_half() -> None:
        producer = _producer(bootstrap)
        await producer.start()
        try:
            await _produce(producer, topic, [(None, v, []) for v in values], partition=0)
        finally:
            await producer.stop()
        consumer = _consumer(bootstrap, group)
        await consumer.start()
        try:
            consumer.subscribe([topic])
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(seen) < 10:
                assert time.monotonic() < deadline, f"consumed only {len(seen)}"
                batch = await consumer.getmany(timeout_ms=200, max_records=10 - len(seen))
                for records in batch.values():
                    seen.extend(r.value for r in records)
            assert seen == values[:10]
            await consumer.commit({tp: 10})
            assert await consumer.committed(tp) == 10
        finally:
            await consumer.stop()

    async def second_half() -> list[tuple[int, bytes]]:
        consumer = _consumer(broker_process.bootstrap_servers, group)
        await consumer.start()
        got: list[tuple[int, bytes]] = []
        try:
            committed = await consumer.committed(tp)
            assert committed == 10, f"the committed offset after the restart is {committed}"
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(got) < 10:
                assert time.monotonic() < deadline, f"consumed only {got}"
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    asyncio.run(first_half())
    restart_broker(broker_process)
    got = asyncio.run(second_half())
    assert got == [(i, values[i]) for i in range(10, 20)]


# -- 4. idempotent producer -----------------------------------------------------------------


@pytest.mark.timeout(90)
def test_idempotent_producer_writes_no_duplicates(broker_process: BrokerProcess) -> None:
    """An idempotent producer keeps producing while the broker restarts: requests in flight
    at the stop are retried, and the broker must store each record once."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("aiokafka-idempotent")
    create_topic(bootstrap, topic, PARTITIONS)
    records = idempotent_records(600)

    async def scenario() -> list[tuple[int, int, Triple]]:
        producer = _producer(
            bootstrap,
            enable_idempotence=True,
            acks="all",
            max_batch_size=1024,
            retry_backoff_ms=50,
            request_timeout_ms=10_000,
        )
        await producer.start()
        restart = RestartLater(broker_process, delay=1.0)
        restart.start()
        try:
            futures = []
            for key, value, headers in records:
                futures.append(await producer.send(topic, value=value, key=key, headers=headers))
                await asyncio.sleep(0.004)
            sent = []
            for future, record in zip(futures, records, strict=True):
                metadata = await asyncio.wait_for(future, 40)
                sent.append((metadata.partition, metadata.offset, record))
        finally:
            await producer.stop()
            await asyncio.get_running_loop().run_in_executor(None, restart.finish)
        return sent

    sent = asyncio.run(scenario())
    check_round_trip(sent, asyncio.run(_read_to_end(bootstrap, topic, PARTITIONS)))
    check_idempotent_batches(stored_batches(bootstrap, topic, PARTITIONS), PARTITIONS)
