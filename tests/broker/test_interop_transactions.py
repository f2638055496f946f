"""Transactions from third-party clients: confluent-kafka, kafka-python and aiokafka, each
with its own transactional producer and its own read_committed consumers, against kayak's
broker and against Apache Kafka 4.3 (the reference: every test passes there first).

What each client must see, as Kafka defines it:

* records of a committed transaction, written to several partitions, are read exactly once
  by read_committed consumers; records of an aborted transaction never are, though
  read_uncommitted consumers read them; an open transaction holds read_committed consumers
  at its first offset (the last stable offset) until it commits;
* consume-transform-produce: offsets sent to the transaction become the group's committed
  offsets only when it commits (none when it aborts), and the output holds every input
  record exactly once although one round was aborted and processed again;
* a second producer with the same ``transactional.id`` fences the first, whose next
  transactional call fails with the client's fatal "producer fenced" error, and the fenced
  producer's open transaction is aborted;
* (librdkafka alone asks for this) offsets held by an open transaction are unstable to a
  read_committed consumer of that group (KIP-447 require_stable) until it ends.

Each scenario runs in a spawned child process (:func:`run_isolated`), so a client that
crashes on a broker bug fails its test instead of pytest.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator

import confluent_kafka
import pytest

from tests.broker import txn_clients
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic, run_isolated, unique
from tests.broker.txn_clients import (
    CLIENTS,
    committed_offsets,
    group_consumer,
    producer,
    read_values,
)
from tests.fixtures.jvm import ApacheKafka

PARTITIONS = 3
PER_TXN = 30  # records in each transaction, spread over every partition
SCENARIO_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def kayak_txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One kayak broker for the module (started only if a kayak case runs)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-interop") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


@pytest.fixture(params=["kayak", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """Where the test's clients connect: the module's kayak broker, or the run's Apache Kafka."""
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return kafka.bootstrap_servers
    broker: BrokerProcess = request.getfixturevalue("kayak_txn_broker")
    return broker.bootstrap_servers


def _values(tag: str, count: int = PER_TXN) -> list[bytes]:
    return [b"%s-%03d" % (tag.encode(), i) for i in range(count)]


def _send_all(txn: txn_clients.TxnProducer, topic: str, values: list[bytes]) -> None:
    for i, value in enumerate(values):
        txn.send(topic, i % PARTITIONS, value)


def _same(got: list[bytes], expected: list[bytes], what: str) -> None:
    """``got`` holds each of ``expected`` exactly once, and nothing else."""
    extra, missing = Counter(got) - Counter(expected), Counter(expected) - Counter(got)
    assert not extra and not missing, (
        f"{what}: {sum(extra.values())} unexpected or repeated (e.g. {sorted(extra)[:3]}), "
        f"{sum(missing.values())} missing (e.g. {sorted(missing)[:3]})"
    )


# -- scenarios (module level: the child process imports them) ------------------------------


def commit_abort_and_open(client: str, bootstrap: str) -> None:
    topic = unique("txn-ca")
    create_topic(bootstrap, topic, PARTITIONS)
    txn = producer(client, bootstrap, unique("tid-ca"))
    try:
        committed_a, aborted, committed_c, open_d = (
            _values(t) for t in ("commit-a", "abort-b", "commit-c", "open-d")
        )
        txn.begin()
        _send_all(txn, topic, committed_a)
        txn.commit()
        txn.begin()
        _send_all(txn, topic, aborted)
        txn.flush()  # written to the log, then aborted
        txn.abort()
        txn.begin()
        _send_all(txn, topic, committed_c)
        txn.commit()
        txn.begin()
        _send_all(txn, topic, open_d)
        txn.flush()  # in the log, its transaction still open

        def read(isolation: str, expected: list[bytes]) -> list[bytes]:
            return read_values(
                client, bootstrap, topic, PARTITIONS, isolation=isolation,
                expected=len(expected), quiet=0.5,
            )  # fmt: skip

        everything = committed_a + aborted + committed_c + open_d
        _same(read("read_uncommitted", everything), everything, "read_uncommitted")
        # The open transaction holds read_committed readers before its first record.
        _same(read("read_committed", committed_a + committed_c), committed_a + committed_c,
              "read_committed while a transaction is open")  # fmt: skip
        txn.commit()
        all_committed = committed_a + committed_c + open_d
        _same(read("read_committed", all_committed), all_committed, "read_committed at the end")
    finally:
        txn.close()


def consume_transform_produce(client: str, bootstrap: str) -> None:
    source, sink, group = unique("txn-in"), unique("txn-out"), unique("txn-group")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    inputs = _values("in", 90)
    seeder = producer(client, bootstrap, unique("tid-seed"))
    seeder.begin()
    _send_all(seeder, source, inputs)
    seeder.commit()
    seeder.close()

    consumer = group_consumer(client, bootstrap, group, source)
    txn = producer(client, bootstrap, unique("tid-ctp"))
    committed: txn_clients.Offsets = {}
    processed, rounds, aborted_rounds = 0, 0, 0
    try:
        while processed < len(inputs):
            rounds += 1
            assert rounds < 300, f"only {processed} of {len(inputs)} processed"
            batch = consumer.poll_values(20)
            if not batch:
                continue
            txn.begin()
            for partition, _, value in batch:
                txn.send(sink, partition, b"out-" + value)
            positions = {p: o for p, o in consumer.positions().items() if o >= 0}
            txn.send_offsets(source, positions, consumer)
            txn.flush()
            # Until the transaction ends, the group's committed offsets are the old ones.
            assert committed_offsets(client, bootstrap, group, source, PARTITIONS) == committed
            if aborted_rounds == 0:  # the first batch: abort it, and process it again
                aborted_rounds += 1
                txn.abort()
                consumer.seek(committed)
                assert committed_offsets(client, bootstrap, group, source, PARTITIONS) == committed
                continue
            txn.commit()
            processed += len(batch)
            committed = {**committed, **positions}
            # Apache Kafka writes the markers after answering EndTxn: the new offsets show
            # a moment later (kayak answers once they are written).
            assert _eventually(
                lambda: committed_offsets(client, bootstrap, group, source, PARTITIONS),
                committed,
            )
    finally:
        txn.close()
        consumer.close()
    expected = [b"out-" + v for v in inputs]
    output = read_values(client, bootstrap, sink, PARTITIONS, isolation="read_committed",
                         expected=len(expected), quiet=0.5)  # fmt: skip
    _same(output, expected, "output of consume-transform-produce")


def fenced_producer(client: str, bootstrap: str) -> None:
    topic, transactional_id = unique("txn-fence"), unique("tid-fence")
    create_topic(bootstrap, topic, PARTITIONS)
    first = producer(client, bootstrap, transactional_id)
    first.begin()
    _send_all(first, topic, _values("zombie", 6))
    first.flush()
    second = producer(client, bootstrap, transactional_id)  # fences the first
    try:
        try:
            first.commit()
        except Exception as error:
            assert txn_clients.is_fenced(client, error), f"not the fatal fenced error: {error!r}"
        else:
            raise AssertionError("the fenced producer committed its transaction")
        second.begin()
        _send_all(second, topic, _values("second", 6))
        second.commit()
    finally:
        second.close()
        with contextlib.suppress(Exception):  # a fenced producer may fail to close cleanly
            first.close()
    # The zombie's records are in the log, in a transaction the second producer's
    # InitProducerId aborted.
    _same(read_values(client, bootstrap, topic, PARTITIONS, isolation="read_committed",
                      expected=6, quiet=0.5), _values("second", 6), "read_committed")  # fmt: skip
    everything = _values("zombie", 6) + _values("second", 6)
    _same(read_values(client, bootstrap, topic, PARTITIONS, isolation="read_uncommitted",
                      expected=12, quiet=0.5), everything, "read_uncommitted")  # fmt: skip


def pending_offsets_are_unstable(bootstrap: str) -> None:
    """KIP-447 with librdkafka: a read_committed consumer asks for committed offsets with
    require_stable, and the broker answers UNSTABLE_OFFSET_COMMIT (the client retries until
    its timeout) while a transaction holds offsets for that group and partition; a
    read_uncommitted consumer, or one of another group, is answered at once; after the abort
    the old offsets are stable again. What a restarted consume-transform-produce
    application (Kafka Streams, the Java copier) relies on not to start from stale offsets."""
    topic, group = unique("txn-unstable"), unique("txn-group")
    create_topic(bootstrap, topic, 1)
    partition = [confluent_kafka.TopicPartition(topic, 0)]

    def committed(group_id: str, isolation: str) -> int | str:
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group_id, "isolation.level": isolation}
        )
        try:
            (found,) = consumer.committed(partition, 2.0)
            return int(found.offset)
        except confluent_kafka.KafkaException as error:
            return str(error.args[0].name())
        finally:
            consumer.close()

    txn = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("t")}
    )
    member = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(topic, b"record", partition=0)
        assert txn.flush(30) == 0
        assert committed(group, "read_committed") == confluent_kafka.OFFSET_INVALID  # no offsets
        txn.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, 0, 1)], member.consumer_group_metadata(), 30
        )
        assert committed(group, "read_committed") == "_TIMED_OUT"  # unstable until it ends
        assert committed(group, "read_uncommitted") == confluent_kafka.OFFSET_INVALID
        assert committed(unique("other"), "read_committed") == confluent_kafka.OFFSET_INVALID
        txn.abort_transaction(30)
        assert committed(group, "read_committed") == confluent_kafka.OFFSET_INVALID
    finally:
        member.close()


# -- tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_abort_and_an_open_transaction(client: str, bootstrap: str) -> None:
    run_isolated(commit_abort_and_open, client, bootstrap, timeout=SCENARIO_TIMEOUT)


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_transform_produce_exactly_once(client: str, bootstrap: str) -> None:
    run_isolated(consume_transform_produce, client, bootstrap, timeout=SCENARIO_TIMEOUT)


@pytest.mark.parametrize("client", CLIENTS)
def test_second_producer_fences_the_first(client: str, bootstrap: str) -> None:
    run_isolated(fenced_producer, client, bootstrap, timeout=SCENARIO_TIMEOUT)


def test_pending_transactional_offsets_are_unstable(bootstrap: str) -> None:
    run_isolated(pending_offsets_are_unstable, bootstrap, timeout=SCENARIO_TIMEOUT)


def _eventually(read: Callable[[], object], expected: object, timeout: float = 10.0) -> bool:
    """Whether ``read()`` returns ``expected`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if read() == expected:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
