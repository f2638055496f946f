"""confluent-kafka (librdkafka) against the real broker process.

Every scenario runs in a spawned child process (:func:`run_isolated`): librdkafka can abort
or segfault on a broker protocol bug, and that must fail the test rather than kill pytest.
Scenario functions live at module level so the child can import them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

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
    run_isolated,
    stored_batches,
    unique,
)


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: each test uses topics and groups of its own."""
    yield from running_broker(tmp_path_factory.mktemp("broker") / "data")


PARTITIONS = 3


def _consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "topic.metadata.refresh.interval.ms": 2000,
            **extra,
        }
    )


def _triple(msg: Any) -> Triple:
    return (msg.key(), msg.value(), msg.headers() or [])


def _check(msg: Any) -> Any:
    if msg is not None and msg.error() is not None:
        raise KafkaException(msg.error())
    return msg


def _read_to_end(
    bootstrap: str, topic: str, partitions: int, timeout: float = 20.0
) -> dict[int, list[tuple[int, Triple]]]:
    """Every record of every partition, read with assign() from offset 0 to the end."""
    consumer = _consumer(bootstrap, unique("reader"), **{"enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    consumed: dict[int, list[tuple[int, Triple]]] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"reached the end of only {sorted(at_end)}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            _check(msg)
            consumed.setdefault(msg.partition(), []).append((msg.offset(), _triple(msg)))
    finally:
        consumer.close()
    return consumed


def _produce(
    producer: Producer, topic: str, records: list[Triple], partition: int | None = None
) -> list[tuple[int, int, Triple]]:
    """Produce and flush; (partition, offset, record) from each delivery report, in order."""
    reports: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def delivered(index: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                reports[index] = (msg.partition(), msg.offset())

        return report

    for index, (key, value, headers) in enumerate(records):
        extra = {} if partition is None else {"partition": partition}
        producer.produce(
            topic, value=value, key=key, headers=headers, on_delivery=delivered(index), **extra
        )
        producer.poll(0)
    assert producer.flush(20) == 0, "records still undelivered"
    assert not errors, errors[:3]
    return [(*reports[i], record) for i, record in enumerate(records)]


# -- 1. every codec ------------------------------------------------------------------------


def codec_round_trip(bootstrap: str, topic: str, codec: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
    )
    sent = _produce(producer, topic, mixed_records(codec, 40))
    check_round_trip(sent, _read_to_end(bootstrap, topic, PARTITIONS))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(broker_process: BrokerProcess, codec: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique(f"confluent-{codec}")
    create_topic(bootstrap, topic, PARTITIONS)
    run_isolated(codec_round_trip, bootstrap, topic, codec, timeout=45)
    stored = stored_batches(bootstrap, topic, PARTITIONS)
    check_codecs(stored, codec)
    assert sum(b.record_count for b in stored) == 80


# -- 2. a two-member group that rebalances ---------------------------------------------------


def group_rebalance(bootstrap: str, topic: str, group: str, partitions: int, strategy: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    produced: list[bytes] = []

    def produce_round(tag: str) -> None:
        for p in range(partitions):
            values = [b"%s-%d-%d" % (tag.encode(), p, i) for i in range(8)]
            _produce(producer, topic, [(None, v, []) for v in values], partition=p)
            produced.extend(values)

    members: dict[str, Consumer] = {}
    assigned: dict[str, set[int]] = {"A": set(), "B": set()}
    consumed: list[tuple[str, int, int, bytes]] = []  # member, partition, offset, value

    def join(name: str) -> None:
        def on_assign(consumer: Any, parts: list[TopicPartition]) -> None:
            assigned[name] |= {p.partition for p in parts}

        def on_revoke(consumer: Any, parts: list[TopicPartition]) -> None:
            assigned[name] -= {p.partition for p in parts}

        members[name] = _consumer(bootstrap, group, **{"partition.assignment.strategy": strategy})
        members[name].subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def pump(names: list[str], done: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, (
                f"timed out waiting for {what}: assigned={assigned}, consumed={len(consumed)}"
            )
            for name in names:
                msg = _check(members[name].poll(0.1))
                if msg is None:
                    continue
                assert msg.partition() in assigned[name], (
                    f"{name} got a record of partition {msg.partition()} outside {assigned}"
                )
                consumed.append((name, msg.partition(), msg.offset(), msg.value()))
                members[name].commit(message=msg, asynchronous=False)

    every = set(range(partitions))

    def split_evenly() -> bool:
        a, b = assigned["A"], assigned["B"]
        return bool(a) and bool(b) and not a & b and a | b == every

    def first_offsets(name: str, since: int) -> dict[int, int]:
        firsts: dict[int, int] = {}
        for member, partition, offset, _ in consumed[since:]:
            if member == name:
                firsts.setdefault(partition, offset)
        return firsts

    join("A")
    pump(["A"], lambda: assigned["A"] == every, "A to own every partition")
    produce_round("one")
    pump(["A"], lambda: len(consumed) == len(produced), "A to consume the first round")

    join("B")
    pump(["A", "B"], split_evenly, "a disjoint covering assignment of A and B")
    b_from_a = set(assigned["B"])
    mark = len(consumed)
    produce_round("two")
    pump(["A", "B"], lambda: len(consumed) == len(produced), "A and B to consume round two")
    assert split_evenly(), assigned
    # B took its partitions over from A: it starts where A committed (after round one).
    assert first_offsets("B", mark) == dict.fromkeys(b_from_a, 8)

    # Round three is produced while A is not polling, so A leaves it unconsumed.
    a_partitions = set(assigned["A"])
    produce_round("three")
    committed = members["A"].committed([TopicPartition(topic, p) for p in a_partitions], 10)
    a_committed = {tp.partition: tp.offset for tp in committed}
    assert a_committed == dict.fromkeys(a_partitions, 16), a_committed
    members["A"].close()
    mark = len(consumed)
    pump(
        ["B"],
        lambda: assigned["B"] == every and len(consumed) == len(produced),
        "B to take over A's partitions and consume round three",
    )
    firsts = first_offsets("B", mark)
    assert {p: firsts[p] for p in a_partitions} == a_committed, firsts
    members["B"].close()

    values = [value for _, _, _, value in consumed]
    assert len(values) == len(set(values)), "a record was consumed twice"
    assert sorted(values) == sorted(produced), "records were lost"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_of_two_rebalances_and_hands_over(
    broker_process: BrokerProcess, strategy: str
) -> None:
    """Eager (range) and incremental cooperative (cooperative-sticky) rebalancing."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("confluent-group")
    create_topic(bootstrap, topic, 4)
    run_isolated(group_rebalance, bootstrap, topic, unique("group"), 4, strategy, timeout=80)


def static_member_returns(bootstrap: str, topic: str, group: str) -> None:
    """KIP-345: a static member that closes and comes back within its session timeout gets
    its own partitions back, and the other member is not rebalanced meanwhile."""
    assigned: dict[str, set[int]] = {"one": set(), "two": set()}
    revoked: dict[str, int] = {"one": 0, "two": 0}

    def member(name: str) -> Consumer:
        def on_assign(consumer: Any, parts: list[TopicPartition]) -> None:
            assigned[name] |= {p.partition for p in parts}

        def on_revoke(consumer: Any, parts: list[TopicPartition]) -> None:
            assigned[name] -= {p.partition for p in parts}
            revoked[name] += 1

        consumer = _consumer(
            bootstrap,
            group,
            **{"group.instance.id": name, "session.timeout.ms": 10_000},
        )
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return consumer

    one, two = member("one"), member("two")

    def settled() -> bool:
        one.poll(0.05)
        two.poll(0.05)
        return bool(assigned["one"] and assigned["two"])

    deadline = time.monotonic() + 30
    while not settled():
        assert time.monotonic() < deadline, assigned
    time.sleep(0.5)
    one.poll(0.05)
    two.poll(0.05)
    before = {name: set(parts) for name, parts in assigned.items()}
    assert before["one"] | before["two"] == {0, 1, 2, 3} and not before["one"] & before["two"]
    revoked_before = revoked["two"]

    one.close()  # a static member's close sends no LeaveGroup
    assigned["one"] = set()
    one = member("one")
    deadline = time.monotonic() + 20
    while assigned["one"] != before["one"]:
        assert time.monotonic() < deadline, f"the static member came back to {assigned}"
        one.poll(0.05)
        two.poll(0.05)
    for _ in range(10):
        two.poll(0.05)
    assert assigned["two"] == before["two"] and revoked["two"] == revoked_before, (
        "the other member was rebalanced"
    )
    one.close()
    two.close()


@pytest.mark.timeout(60)
def test_static_member_rejoins_without_rebalance(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique("confluent-static")
    create_topic(bootstrap, topic, 4)
    run_isolated(static_member_returns, bootstrap, topic, unique("group"), timeout=50)


# -- timestamps, records larger than the fetch size, long polling ---------------------------


def timestamps_scenario(bootstrap: str, create_time: str, append_time: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    reports: dict[str, Any] = {}
    for topic in (create_time, append_time):
        producer.produce(
            topic,
            value=topic.encode(),
            timestamp=1_600_000_000_000,
            on_delivery=lambda err, msg, t=topic: reports.update({t: (err, msg.timestamp())}),
        )
    before = int(time.time() * 1000)
    assert producer.flush(15) == 0
    after = int(time.time() * 1000)
    assert reports[create_time] == (None, (TIMESTAMP_CREATE_TIME, 1_600_000_000_000))
    err, (kind, stamped) = reports[append_time]
    assert err is None and kind == TIMESTAMP_LOG_APPEND_TIME, reports
    assert before - 5000 <= stamped <= after + 1000, (before, stamped, after)

    consumer = _consumer(bootstrap, unique("reader"), **{"check.crcs": True})
    consumer.assign([TopicPartition(create_time, 0, 0), TopicPartition(append_time, 0, 0)])
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + 15
    while len(seen) < 2:
        assert time.monotonic() < deadline, seen
        msg = _check(consumer.poll(0.2))
        if msg is not None:
            seen[msg.topic()] = msg.timestamp()
    consumer.close()
    assert seen == {
        create_time: (TIMESTAMP_CREATE_TIME, 1_600_000_000_000),
        append_time: (TIMESTAMP_LOG_APPEND_TIME, stamped),
    }


@pytest.mark.timeout(60)
def test_create_time_and_log_append_time(broker_process: BrokerProcess) -> None:
    """The broker keeps CreateTime stamps and stamps LogAppendTime topics itself (rewriting
    the batch, so its CRC must be redone: the consumer checks CRCs)."""
    bootstrap = broker_process.bootstrap_servers
    create_time, append_time = unique("confluent-ct"), unique("confluent-lat")
    create_topic(bootstrap, create_time, 1)
    create_topic(bootstrap, append_time, 1, {"message.timestamp.type": "LogAppendTime"})
    run_isolated(timestamps_scenario, bootstrap, create_time, append_time)


def large_record_scenario(bootstrap: str, topic: str) -> None:
    big = bytes(range(256)) * 2800  # 716,800 bytes, incompressible enough
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1_000_000})
    _produce(producer, topic, [(b"big", big, []), (b"small", b"s", [])], partition=0)
    # Far smaller fetch sizes than the record: KIP-74 says the first batch comes anyway.
    consumer = _consumer(
        bootstrap,
        unique("reader"),
        **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 15
    while len(got) < 2:
        assert time.monotonic() < deadline, [offset for offset, _ in got]
        msg = _check(consumer.poll(0.2))
        if msg is not None:
            got.append((msg.offset(), msg.value()))
    consumer.close()
    assert got == [(0, big), (1, b"s")]


@pytest.mark.timeout(60)
def test_record_larger_than_fetch_sizes(broker_process: BrokerProcess) -> None:
    topic = unique("confluent-large")
    create_topic(broker_process.bootstrap_servers, topic, 1)
    run_isolated(large_record_scenario, broker_process.bootstrap_servers, topic)


def long_poll_scenario(bootstrap: str, topic: str) -> float:
    consumer = _consumer(bootstrap, unique("reader"), **{"fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    for _ in range(10):  # connect and park a fetch on the broker
        assert consumer.poll(0.1) is None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"wake up")
    producer.flush(10)
    started = time.monotonic()
    msg = None
    while msg is None and time.monotonic() - started < 10:
        msg = _check(consumer.poll(0.01))
    waited = time.monotonic() - started
    consumer.close()
    assert msg is not None and msg.value() == b"wake up"
    return waited


@pytest.mark.timeout(60)
def test_long_poll_is_woken_by_an_append(broker_process: BrokerProcess) -> None:
    """With fetch.wait.max.ms=5000 a parked fetch must return when the record arrives."""
    topic = unique("confluent-long-poll")
    create_topic(broker_process.bootstrap_servers, topic, 1)
    waited = run_isolated(long_poll_scenario, broker_process.bootstrap_servers, topic)
    assert waited < 2.0, f"the record took {waited:.2f}s to arrive: the fetch was not woken"


# -- 3. committed offsets survive a broker restart ------------------------------------------


def commit_half(bootstrap: str, topic: str, group: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [b"restart-%02d" % i for i in range(20)]
    _produce(producer, topic, [(None, v, []) for v in values], partition=0)
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 10:
        assert time.monotonic() < deadline, f"consumed only {len(seen)}"
        msg = _check(consumer.poll(0.2))
        if msg is not None:
            seen.append(msg.value())
    assert seen == values[:10]
    consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    assert consumer.committed([TopicPartition(topic, 0)], 10)[0].offset == 10
    consumer.close()


def resume_after_restart(bootstrap: str, topic: str, group: str) -> None:
    consumer = _consumer(bootstrap, group)
    committed = consumer.committed([TopicPartition(topic, 0)], 10)[0].offset
    assert committed == 10, f"the committed offset after the restart is {committed}, not 10"
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < 10:
        assert time.monotonic() < deadline, f"consumed only {got}"
        msg = _check(consumer.poll(0.2))
        if msg is not None:
            got.append((msg.offset(), msg.value()))
    consumer.close()
    assert got == [(i, b"restart-%02d" % i) for i in range(10, 20)]


@pytest.mark.timeout(90)
def test_committed_offset_survives_restart(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic, group = unique("confluent-restart"), unique("group")
    create_topic(bootstrap, topic, 1)
    run_isolated(commit_half, bootstrap, topic, group, timeout=40)
    restart_broker(broker_process)
    run_isolated(resume_after_restart, broker_process.bootstrap_servers, topic, group, timeout=40)


# -- 4. idempotent producer -----------------------------------------------------------------


def idempotent_produce(bootstrap: str, topic: str, count: int) -> list[tuple[int, int, Triple]]:
    """Produce ``count`` records at a steady pace (the broker restarts meanwhile)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 20,
            "message.timeout.ms": 40_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 300,
        }
    )
    records = idempotent_records(count)
    reports: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def delivered(index: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                reports[index] = (msg.partition(), msg.offset())

        return report

    for index, (key, value, headers) in enumerate(records):
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered(index))
        producer.poll(0.004)
    assert producer.flush(40) == 0, "records still undelivered"
    assert not errors, errors[:3]
    return [(*reports[i], record) for i, record in enumerate(records)]


@pytest.mark.timeout(90)
def test_idempotent_producer_writes_no_duplicates(broker_process: BrokerProcess) -> None:
    """An idempotent producer keeps producing while the broker restarts: requests in flight
    at the stop are retried, and the broker must store each record once."""
    bootstrap = broker_process.bootstrap_servers
    topic = unique("confluent-idempotent")
    create_topic(bootstrap, topic, PARTITIONS)
    restart = RestartLater(broker_process, delay=1.0)
    restart.start()
    sent = run_isolated(idempotent_produce, bootstrap, topic, 600, timeout=75)
    restart.finish()
    check_round_trip(sent, run_isolated(_read_to_end, bootstrap, topic, PARTITIONS))
    check_idempotent_batches(stored_batches(bootstrap, topic, PARTITIONS), PARTITIONS)
