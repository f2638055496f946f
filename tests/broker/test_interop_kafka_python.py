"""kafka-python against the real broker process.

kafka-python compresses snappy, lz4 and zstd through python-snappy, lz4 and zstandard. When
one of them is not installed, tests/records/kafka_python_codecs.py stands in for it with
cramjam (kafka-python still does its own framing), so no codec is skipped; installing the
real libraries (see the report on the dev extra) makes the stand-ins unnecessary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

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
    subscribe_when_known,
    unique,
    wait_until,
)
from tests.records import kafka_python_codecs


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: each test uses topics and groups of its own."""
    yield from running_broker(tmp_path_factory.mktemp("broker") / "data")


PARTITIONS = 3
T0 = 1_600_000_000_000  # a CreateTime stamp far from now


@pytest.fixture(autouse=True)
def codecs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return kafka_python_codecs.install(monkeypatch)


def _producer(bootstrap: str, **extra: Any) -> KafkaProducer:
    return KafkaProducer(**{"bootstrap_servers": bootstrap, "linger_ms": 5, **extra})


def _consumer(bootstrap: str, group: str | None, **extra: Any) -> KafkaConsumer:
    return KafkaConsumer(
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


def _produce(
    producer: KafkaProducer, topic: str, records: list[Triple], partition: int | None = None
) -> list[tuple[int, int, Triple]]:
    """Send every record and wait; (partition, offset, record) from each RecordMetadata."""
    futures = [
        producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        for key, value, headers in records
    ]
    producer.flush(20)
    out = []
    for future, record in zip(futures, records, strict=True):
        metadata = future.get(timeout=10)
        out.append((metadata.partition, metadata.offset, record))
    return out


def _read_to_end(
    bootstrap: str, topic: str, partitions: int, timeout: float = 20.0
) -> dict[int, list[tuple[int, Triple]]]:
    consumer = _consumer(bootstrap, None)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    consumed: dict[int, list[tuple[int, Triple]]] = {}
    deadline = time.monotonic() + timeout
    try:
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"stuck at {[consumer.position(t) for t in tps]}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    consumed.setdefault(tp.partition, []).append((record.offset, _triple(record)))
    finally:
        consumer.close()
    return consumed


# -- 1. every codec ------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(broker_process: BrokerProcess, codec: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique(f"kafka-python-{codec}")
    create_topic(bootstrap, topic, PARTITIONS)
    producer = _producer(bootstrap, compression_type=None if codec == "none" else codec)
    try:
        # kafka-python refuses null header values (TypeError), so none are sent.
        sent = _produce(producer, topic, mixed_records(codec, 40, null_headers=False))
    finally:
        producer.close(5)
    check_round_trip(sent, _read_to_end(bootstrap, topic, PARTITIONS))
    stored = stored_batches(bootstrap, topic, PARTITIONS)
    check_codecs(stored, codec)
    assert sum(b.record_count for b in stored) == 80


@pytest.mark.timeout(30)
def test_inferred_broker_version_is_a_real_release(broker_process: BrokerProcess) -> None:
    """kafka-python infers the broker's release from ApiVersions; it must find a recent one."""
    producer = _producer(broker_process.bootstrap_servers)
    try:
        version = producer.config["api_version"]
    finally:
        producer.close(5)
    # kayak advertises the API ranges of Kafka 3.9 (kayak/broker/versions.py).
    assert version == (3, 9), version


# -- timestamps, records larger than the fetch size, long polling ---------------------------


@pytest.mark.timeout(60)
def test_create_time_and_log_append_time(broker_process: BrokerProcess) -> None:
    """CreateTime stamps are kept; LogAppendTime topics are stamped by the broker, which
    rewrites the batch (kafka-python checks CRCs, so a stale CRC fails here)."""
    bootstrap = broker_process.bootstrap_servers
    create_time, append_time = unique("kafka-python-ct"), unique("kafka-python-lat")
    create_topic(bootstrap, create_time, 1)
    create_topic(bootstrap, append_time, 1, {"message.timestamp.type": "LogAppendTime"})
    producer = _producer(bootstrap)
    before = int(time.time() * 1000)
    try:
        kept = producer.send(create_time, b"c", timestamp_ms=T0).get(10)
        stamped = producer.send(append_time, b"a", timestamp_ms=T0).get(10)
    finally:
        producer.close(5)
    after = int(time.time() * 1000)
    assert kept.timestamp == T0
    assert before - 5000 <= stamped.timestamp <= after + 1000, (before, stamped, after)

    consumer = _consumer(bootstrap, None, check_crcs=True)
    consumer.assign([TopicPartition(create_time, 0), TopicPartition(append_time, 0)])
    seen: dict[str, tuple[int, int]] = {}
    deadline = time.monotonic() + 15
    try:
        while len(seen) < 2:
            assert time.monotonic() < deadline, seen
            for tp, records in consumer.poll(timeout_ms=200).items():
                seen.update((tp.topic, (r.timestamp_type, r.timestamp)) for r in records)
    finally:
        consumer.close()
    assert seen == {create_time: (0, T0), append_time: (1, stamped.timestamp)}


@pytest.mark.timeout(60)
def test_record_larger_than_fetch_sizes(broker_process: BrokerProcess) -> None:
    """KIP-74: the first batch comes back even when it exceeds both fetch size limits."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("kafka-python-large")
    create_topic(bootstrap, topic, 1)
    big = bytes(range(256)) * 2800
    producer = _producer(bootstrap, max_request_size=1_000_000)
    try:
        _produce(producer, topic, [(b"big", big, []), (b"small", b"s", [])], partition=0)
    finally:
        producer.close(5)
    consumer = _consumer(bootstrap, None, max_partition_fetch_bytes=1024, fetch_max_bytes=1024)
    consumer.assign([TopicPartition(topic, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 15
    try:
        while len(got) < 2:
            assert time.monotonic() < deadline, [offset for offset, _ in got]
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    assert got == [(0, big), (1, b"s")]


@pytest.mark.timeout(60)
def test_long_poll_is_woken_by_an_append(broker_process: BrokerProcess) -> None:
    """With fetch_max_wait_ms=5000 a parked fetch must return when the record arrives."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("kafka-python-long-poll")
    create_topic(bootstrap, topic, 1)
    consumer = _consumer(bootstrap, None, fetch_max_wait_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    producer = _producer(bootstrap, linger_ms=0)
    try:
        assert consumer.poll(timeout_ms=1000) == {}  # connect and park a fetch
        producer.send(topic, b"wake up").get(10)
        started = time.monotonic()
        got: list[bytes] = []
        while not got and time.monotonic() - started < 10:
            for records in consumer.poll(timeout_ms=20).values():
                got.extend(r.value for r in records)
        waited = time.monotonic() - started
    finally:
        producer.close(5)
        consumer.close()
    assert got == [b"wake up"]
    assert waited < 2.0, f"the record took {waited:.2f}s to arrive: the fetch was not woken"


# -- 2. a two-member group that rebalances ---------------------------------------------------


class Member(threading.Thread):
    """One group member polling in its own thread (kafka-python blocks inside poll() while it
    rejoins, so two members cannot share a thread). Commits after every record."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, log: Any) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.member, self.bootstrap, self.topic, self.group, self.log = (
            name,
            bootstrap,
            topic,
            group,
            log,
        )
        self.assigned: set[int] = set()
        self.committed_at_exit: dict[int, int] = {}
        self.error: BaseException | None = None
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.assigned -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned |= {tp.partition for tp in assigned}

        # A loaded machine can let the first join finish before the topic's metadata arrives;
        # the leader then assigns nothing and kafka-python rejoins only once its metadata
        # changes: refresh it often so that happens within the test's wait, not in 5 minutes.
        consumer = _consumer(self.bootstrap, self.group, metadata_max_age_ms=1000)
        # And join only once this client knows the topic's partitions (subscribe_when_known).
        subscribe_when_known(consumer, self.topic, listener=Listener())
        try:
            while not self.stopping.is_set():
                if self.hold.is_set():
                    self.holding.set()
                    time.sleep(0.05)
                    continue
                for tp, records in consumer.poll(timeout_ms=100).items():
                    for record in records:
                        assert tp.partition in self.assigned, (
                            f"{self.member}: record of {tp.partition} outside {self.assigned}"
                        )
                        self.log.append((self.member, tp.partition, record.offset, record.value))
                        consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
            for partition in self.assigned:
                committed = consumer.committed(TopicPartition(self.topic, partition))
                self.committed_at_exit[partition] = committed
        finally:
            consumer.close(autocommit=False)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.member} failed: {self.error!r}") from self.error


@pytest.mark.timeout(90)
def test_group_of_two_rebalances_and_hands_over(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic, group, partitions = unique("kafka-python-group"), unique("group"), 4
    create_topic(bootstrap, topic, partitions)
    every = set(range(partitions))
    consumed: list[tuple[str, int, int, bytes]] = []
    produced: list[bytes] = []
    producer = _producer(bootstrap)

    def produce_round(tag: str) -> None:
        for p in range(partitions):
            values = [b"%s-%d-%d" % (tag.encode(), p, i) for i in range(8)]
            _produce(producer, topic, [(None, v, []) for v in values], partition=p)
            produced.extend(values)

    def first_offsets(name: str, since: int) -> dict[int, int]:
        firsts: dict[int, int] = {}
        for member, partition, offset, _ in consumed[since:]:
            if member == name:
                firsts.setdefault(partition, offset)
        return firsts

    a = Member("A", bootstrap, topic, group, consumed)
    b = Member("B", bootstrap, topic, group, consumed)

    def healthy(condition: Any) -> Any:
        def check() -> bool:
            a.check()
            b.check()
            return bool(condition())

        return check

    def split_evenly() -> bool:
        return (
            bool(a.assigned and b.assigned)
            and not a.assigned & b.assigned
            and (a.assigned | b.assigned == every)
        )

    try:
        a.start()
        # Generous: on a loaded machine kafka-python may join before it has the topic's
        # metadata, and rejoin only after its next metadata refresh.
        wait_until(healthy(lambda: a.assigned == every), 45, "A to own every partition")
        produce_round("one")
        wait_until(healthy(lambda: len(consumed) == len(produced)), 20, "A to consume round one")

        b.start()
        wait_until(healthy(split_evenly), 30, "a disjoint covering split of A and B")
        b_from_a = set(b.assigned)
        mark = len(consumed)
        produce_round("two")
        wait_until(healthy(lambda: len(consumed) == len(produced)), 20, "round two")
        assert split_evenly(), (a.assigned, b.assigned)
        assert first_offsets("B", mark) == dict.fromkeys(b_from_a, 8)

        a.hold.set()
        wait_until(healthy(a.holding.is_set), 10, "A to stop polling")
        a_partitions = set(a.assigned)
        produce_round("three")
        a.stopping.set()
        a.join(20)
        a.check()
        assert a.committed_at_exit == dict.fromkeys(a_partitions, 16), a.committed_at_exit
        mark = len(consumed)
        wait_until(
            healthy(lambda: b.assigned == every and len(consumed) == len(produced)),
            30,
            f"B to take over A's partitions and consume round three ({b.assigned})",
        )
        firsts = first_offsets("B", mark)
        assert {p: firsts[p] for p in a_partitions} == a.committed_at_exit, firsts
    finally:
        producer.close(5)
        for member in (a, b):
            member.stopping.set()
            if member.is_alive():
                member.join(20)
    b.check()
    values = [value for _, _, _, value in consumed]
    assert len(values) == len(set(values)), "a record was consumed twice"
    assert sorted(values) == sorted(produced), "records were lost"


# -- 3. committed offsets survive a broker restart ------------------------------------------


@pytest.mark.timeout(90)
def test_committed_offset_survives_restart(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic, group = unique("kafka-python-restart"), unique("group")
    create_topic(bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    values = [b"restart-%02d" % i for i in range(20)]
    producer = _producer(bootstrap)
    try:
        _produce(producer, topic, [(None, v, []) for v in values], partition=0)
    finally:
        producer.close(5)

    consumer = _consumer(bootstrap, group, max_poll_records=10)
    subscribe_when_known(consumer, topic)
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 10:
        assert time.monotonic() < deadline, f"consumed only {len(seen)}"
        for records in consumer.poll(timeout_ms=200, max_records=10 - len(seen)).values():
            seen.extend(r.value for r in records)
    assert seen == values[:10]
    consumer.commit({tp: OffsetAndMetadata(10, "", -1)})
    assert consumer.committed(tp) == 10
    consumer.close(autocommit=False)

    restart_broker(broker_process)

    consumer = _consumer(broker_process.bootstrap_servers, group)
    try:
        committed = consumer.committed(tp)
        assert committed == 10, f"the committed offset after the restart is {committed}, not 10"
        subscribe_when_known(consumer, topic)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < 10:
            assert time.monotonic() < deadline, f"consumed only {got}"
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        consumer.close(autocommit=False)
    assert got == [(i, values[i]) for i in range(10, 20)]


# -- 4. idempotent producer -----------------------------------------------------------------


@pytest.mark.timeout(90)
def test_idempotent_producer_writes_no_duplicates(broker_process: BrokerProcess) -> None:
    """An idempotent producer keeps producing while the broker restarts: requests in flight
    at the stop are retried, and the broker must store each record once."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("kafka-python-idempotent")
    create_topic(bootstrap, topic, PARTITIONS)
    producer = _producer(
        bootstrap,
        enable_idempotence=True,
        acks="all",
        batch_size=1024,
        retry_backoff_ms=50,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=300,
        delivery_timeout_ms=40_000,
    )
    records = idempotent_records(600)
    restart = RestartLater(broker_process, delay=1.0)
    restart.start()
    try:
        futures = []
        for key, value, headers in records:
            futures.append(producer.send(topic, value=value, key=key, headers=headers))
            time.sleep(0.004)
        producer.flush(40)
        sent = []
        for future, record in zip(futures, records, strict=True):
            metadata = future.get(timeout=10)
            sent.append((metadata.partition, metadata.offset, record))
    finally:
        producer.close(5)
        restart.finish()
    check_round_trip(sent, _read_to_end(bootstrap, topic, PARTITIONS))
    check_idempotent_batches(stored_batches(bootstrap, topic, PARTITIONS), PARTITIONS)
