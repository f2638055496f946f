"""kayak's transactional producer and read_committed consumer against real brokers.

Every test runs against kayak's broker and Apache Kafka (``kafka_cluster``). What a
transaction promises is checked from the reading side: a read_committed consumer sees a
transaction's records only once it commits and never if it aborts, a read_uncommitted one
sees both, neither is ever handed a transaction marker (control batch), and a group's offsets
sent with a transaction appear only when it commits. Fencing (a second producer of the same
transactional.id) and the abortable/fatal split of errors are checked as the Java producer
defines them.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kayak.client import sync
from kayak.client.consumer import Consumer, ConsumerRecord, TopicPartition
from kayak.client.producer import Producer
from kayak.client.types import ConsumerGroupMetadata
from kayak.errors import (
    ConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionAbortRequiredError,
)
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import create_topic, produce, read_until, run

pytestmark = pytest.mark.timeout(120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_producer(bootstrap: str, transactional_id: str | None = None, **config: object) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id or unique("tx")},
        **{"linger_ms": 5, **config},  # type: ignore[arg-type]
    )


def reader(bootstrap: str, isolation: str, **config: object) -> Consumer:
    return Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": isolation},
        auto_offset_reset="earliest",
        **config,
    )


async def read_all(
    bootstrap: str,
    isolation: str,
    partitions: list[TopicPartition],
    until: int,
    timeout: float = 15,
) -> tuple[list[ConsumerRecord], dict[TopicPartition, int]]:
    """Everything a fresh assigned consumer hands out until its positions reach ``until`` in
    total offsets (or the timeout), and its positions then."""
    async with reader(bootstrap, isolation) as consumer:
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)

        async def positions() -> dict[TopicPartition, int]:
            return {tp: await consumer.position(tp) for tp in partitions}

        got: list[ConsumerRecord] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                got += batch
            if sum((await positions()).values()) >= until:
                break
        got += await read_until(consumer, lambda _: False, 0.3)  # anything late
        return got, await positions()


def values(records: list[ConsumerRecord]) -> list[bytes | None]:
    return [r.value for r in records]


# -- configuration -----------------------------------------------------------------------------


LOCAL = {"bootstrap.servers": "127.0.0.1:9"}  # never connected to


def test_transactional_id_refuses_idempotence_turned_off() -> None:
    with pytest.raises(ConfigError) as info:
        Producer({**LOCAL, "transactional.id": "tx", "enable.idempotence": False})
    assert "enable.idempotence" in str(info.value) and "transactional.id" in str(info.value)
    config = Producer({**LOCAL, "transactional.id": "tx"}).config
    assert config.transaction_timeout_ms == 60_000
    assert config.enable_idempotence is True
    assert (
        Producer(
            {**LOCAL, "transactional.id": "tx"}, transaction_timeout_ms=5000
        ).config.transaction_timeout_ms
        == 5000
    )


# -- commit and abort ------------------------------------------------------------------------


def test_commit_makes_records_visible_to_read_committed(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-commit")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            futures = [await producer.send(topic, b"v%d" % i, partition=0) for i in range(10)]
            await producer.flush()
            assert [(await f).offset for f in futures] == list(range(10))
            # Stored but open: read_committed sees nothing, and its end offset stays at the
            # last stable offset (0) while read_uncommitted's is the high watermark.
            async with reader(bootstrap, "read_committed") as committed_reader:
                assert (await committed_reader.end_offsets([tp]))[tp] == 0
            async with reader(bootstrap, "read_uncommitted") as uncommitted_reader:
                assert (await uncommitted_reader.end_offsets([tp]))[tp] == 10
            early, _ = await read_all(bootstrap, "read_committed", [tp], 1, timeout=2)
            assert early == []
            await check_lag_counts_from_the_last_stable_offset(bootstrap, tp)
            await producer.commit_transaction()
        got, positions = await read_all(bootstrap, "read_committed", [tp], 11)
        assert values(got) == [b"v%d" % i for i in range(10)]
        assert [r.offset for r in got] == list(range(10))
        # The commit marker at offset 10 is skipped, never handed out, but passed.
        assert positions[tp] == 11
        async with reader(bootstrap, "read_committed") as committed_reader:
            assert (await committed_reader.end_offsets([tp]))[tp] == 11

    run(main(), 60)


async def check_lag_counts_from_the_last_stable_offset(bootstrap: str, tp: TopicPartition) -> None:
    """With a transaction of 10 records open at offsets 0-9, a read_committed consumer at
    offset 0 has nothing it could read: its statistics count lag up to the last stable offset
    (0), not the high watermark (10), as librdkafka's ``consumer_lag`` does."""
    async with reader(bootstrap, "read_committed") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        partition: dict[str, int] = {}
        for _ in range(50):
            await consumer.getmany(timeout_ms=100)
            partition = consumer.statistics()["topics"][tp.topic]["partitions"][tp.partition]
            if partition["hi_offset"] == 10 and partition["app_offset"] == 0:
                break
        assert partition["hi_offset"] == 10 and partition["ls_offset"] == 0, partition
        assert partition["consumer_lag"] == 0, partition


def test_abort_hides_records_from_read_committed_only(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-abort")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, b"aborted-%d" % i, partition=0)
            await producer.flush()  # stored, so the abort has something to hide
            await producer.abort_transaction()  # marker at 5
            producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, b"committed-%d" % i, partition=0)  # 6..10
            await producer.commit_transaction()  # marker at 11
        committed, positions = await read_all(bootstrap, "read_committed", [tp], 12)
        assert values(committed) == [b"committed-%d" % i for i in range(5)]
        assert [r.offset for r in committed] == [6, 7, 8, 9, 10]
        assert positions[tp] == 12
        uncommitted, positions = await read_all(bootstrap, "read_uncommitted", [tp], 12)
        assert values(uncommitted) == [b"aborted-%d" % i for i in range(5)] + [
            b"committed-%d" % i for i in range(5)
        ]
        # Both markers (offsets 5 and 11) are skipped in read_uncommitted too.
        assert [r.offset for r in uncommitted] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
        assert positions[tp] == 12

    run(main(), 60)


def test_unsent_records_of_an_aborted_transaction_are_never_sent(
    kafka_cluster: RunningBroker,
) -> None:
    """Records still buffered at abort_transaction() fail with TransactionAbortedError and
    nothing of them is stored; the next transaction goes on normally."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-unsent")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with txn_producer(bootstrap, linger_ms=60_000, batch_size=1_000_000) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            futures = [await producer.send(topic, b"never", partition=0) for _ in range(3)]
            await producer.abort_transaction()
            for future in futures:
                with pytest.raises(TransactionAbortedError):
                    await future
            producer.begin_transaction()
            await producer.send(topic, b"kept", partition=0)
            await producer.commit_transaction()
        got, _ = await read_all(bootstrap, "read_uncommitted", [tp], 2)
        assert values(got) == [b"kept"]

    run(main(), 60)


def test_transactions_across_partitions_and_topics(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topics = [unique("txn-multi-a"), unique("txn-multi-b")]
    for topic in topics:
        create_topic(bootstrap, topic, 3)
    partitions = [TopicPartition(t, p) for t in topics for p in range(3)]

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            await producer.init_transactions()
            for round_, commit in enumerate([True, False, True, False, True]):
                producer.begin_transaction()
                for tp in partitions:
                    for i in range(4):
                        value = b"%s-%d-r%d-%d" % (tp.topic.encode(), tp.partition, round_, i)
                        await producer.send(tp.topic, value, partition=tp.partition)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.flush()
                    await producer.abort_transaction()
        # Per partition: 5 transactions of 4 records and a marker each.
        end = 5 * 5 * len(partitions)
        committed, positions = await read_all(bootstrap, "read_committed", partitions, end)
        assert all(position == 25 for position in positions.values()), positions
        rounds = sorted({int(v.split(b"-r")[1].split(b"-")[0]) for v in values(committed)})
        assert rounds == [0, 2, 4]
        assert len(committed) == 3 * 4 * len(partitions)
        for tp in partitions:
            mine = [r.value for r in committed if r.topic_partition == tp]
            assert mine == [
                b"%s-%d-r%d-%d" % (tp.topic.encode(), tp.partition, r, i)
                for r in (0, 2, 4)
                for i in range(4)
            ]
        uncommitted, _ = await read_all(bootstrap, "read_uncommitted", partitions, end)
        assert len(uncommitted) == 5 * 4 * len(partitions)

    run(main(), 90)


# -- consume, transform, produce ---------------------------------------------------------------


def test_offsets_sent_with_a_transaction_appear_only_when_it_commits(
    kafka_cluster: RunningBroker,
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    source, sink, group = unique("ctp-in"), unique("ctp-out"), unique("ctp-group")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    produce(bootstrap, source, [(0, None, b"in-%d" % i) for i in range(20)])
    source_tp = TopicPartition(source, 0)

    async def committed_offset(isolation: str = "read_uncommitted") -> int | None:
        """The group's committed offset. A read_committed consumer asks for stable offsets
        (OffsetFetch require_stable): it waits while the commit markers of a transaction are
        still being written; read_uncommitted answers at once, without pending ones."""
        async with Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False},
            isolation_level=isolation,
        ) as probe:
            return await probe.committed(source_tp)

    async def main() -> None:
        async with (
            txn_producer(bootstrap) as producer,
            Consumer(
                {"bootstrap.servers": bootstrap, "group.id": group},
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
            ) as consumer,
        ):
            await producer.init_transactions()
            consumer.subscribe([source])
            records = await read_until(consumer, lambda got: len(got) >= 10, 30)
            records = records[:10]
            metadata = consumer.group_metadata()
            assert metadata.group_id == group and metadata.generation_id >= 1
            assert metadata.member_id

            # A first attempt is aborted: neither its output nor its offsets count.
            producer.begin_transaction()
            for record in records:
                await producer.send(sink, b"bad-" + (record.value or b""), partition=0)
            offsets = {source_tp: records[-1].offset + 1}
            await producer.send_offsets_to_transaction(offsets, metadata)
            await producer.abort_transaction()
            assert await committed_offset() is None

            producer.begin_transaction()
            for record in records:
                await producer.send(sink, b"out-" + (record.value or b""), partition=0)
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            await producer.flush()
            assert await committed_offset() is None  # pending until the commit
            await producer.commit_transaction()
            assert await committed_offset("read_committed") == 10

        out, _ = await read_all(bootstrap, "read_committed", [TopicPartition(sink, 0)], 23)
        assert values(out) == [b"out-in-%d" % i for i in range(10)]

    run(main(), 90)


def test_offsets_from_a_stale_generation_make_the_transaction_abortable(
    kafka_cluster: RunningBroker,
) -> None:
    """KIP-447: TxnOffsetCommit with a member id the group does not know is refused, and the
    producer reports it as abortable, not fatal."""
    bootstrap = kafka_cluster.bootstrap_servers
    source, group = unique("stale-in"), unique("stale-group")
    create_topic(bootstrap, source)
    produce(bootstrap, source, [(0, None, b"x")])

    async def main() -> None:
        async with (
            txn_producer(bootstrap) as producer,
            Consumer(
                {"bootstrap.servers": bootstrap, "group.id": group},
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            ) as consumer,
        ):
            await producer.init_transactions()
            consumer.subscribe([source])
            await read_until(consumer, lambda got: len(got) >= 1, 30)
            real = consumer.group_metadata()
            stale = ConsumerGroupMetadata(group, real.generation_id, "not-a-member", None)
            producer.begin_transaction()
            with pytest.raises(TransactionAbortRequiredError):
                await producer.send_offsets_to_transaction({TopicPartition(source, 0): 1}, stale)
            with pytest.raises(TransactionAbortRequiredError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 1}, real)
            await producer.commit_transaction()
        async with Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False},
            isolation_level="read_committed",  # stable offsets: waits for the commit markers
        ) as probe:
            assert await probe.committed(TopicPartition(source, 0)) == 1

    run(main(), 90)


# -- errors ----------------------------------------------------------------------------------


def test_a_second_producer_with_the_same_id_fences_the_first(kafka_cluster: RunningBroker) -> None:
    """InitProducerId of a second producer bumps the epoch and aborts the first's open
    transaction; the first's commit is refused as fenced, which is fatal: every later call
    raises ProducerFencedError."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-fence")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    transactional_id = unique("fenced")

    async def main() -> None:
        async with txn_producer(bootstrap, transactional_id) as first:
            await first.init_transactions()
            first.begin_transaction()
            await first.send(topic, b"zombie", partition=0)
            await first.flush()
            async with txn_producer(bootstrap, transactional_id) as second:
                await second.init_transactions()
                with pytest.raises(ProducerFencedError):
                    await first.commit_transaction()
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
                with pytest.raises(ProducerFencedError):
                    first.begin_transaction()
                with pytest.raises(ProducerFencedError):
                    await first.send(topic, b"again", partition=0)
                second.begin_transaction()
                await second.send(topic, b"from-second", partition=0)
                await second.commit_transaction()
        got, _ = await read_all(bootstrap, "read_committed", [tp], 4)
        assert values(got) == [b"from-second"]

    run(main(), 60)


def test_a_fenced_producer_that_keeps_sending_learns_it_at_the_abort(
    kafka_cluster: RunningBroker,
) -> None:
    """Records sent after being fenced are refused by the partition (INVALID_PRODUCER_EPOCH,
    abortable as in Java since KIP-588: it may be a timed-out transaction); the abort then
    hears PRODUCER_FENCED from the coordinator, which is fatal. Nothing of it is visible."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-fence-send")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    transactional_id = unique("fenced")

    async def main() -> None:
        async with txn_producer(bootstrap, transactional_id) as first:
            await first.init_transactions()
            first.begin_transaction()
            await first.send(topic, b"zombie", partition=0)
            await first.flush()
            async with txn_producer(bootstrap, transactional_id) as second:
                await second.init_transactions()
                late = await first.send(topic, b"late", partition=0)
                with pytest.raises((TransactionAbortRequiredError, ProducerFencedError)):
                    await first.commit_transaction()
                with pytest.raises(Exception):  # noqa: B017 - refused, whichever way
                    await late
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
                with pytest.raises(ProducerFencedError):
                    await first.send(topic, b"again", partition=0)
                second.begin_transaction()
                await second.send(topic, b"from-second", partition=0)
                await second.commit_transaction()
        got, _ = await read_all(bootstrap, "read_committed", [tp], 4)
        assert values(got) == [b"from-second"]

    run(main(), 60)


def test_a_record_the_broker_refuses_makes_the_transaction_abortable(
    kafka_cluster: RunningBroker,
) -> None:
    """A produce error (here MESSAGE_TOO_LARGE from the topic's max.message.bytes) cannot be
    committed: commit raises TransactionAbortRequiredError, the abort recovers, and the next
    transaction commits."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-abortable")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})])[
        topic
    ].result(15)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(topic, b"small", partition=0)
            await producer.flush()
            too_large = await producer.send(topic, b"x" * 10_000, partition=0)
            with pytest.raises(TransactionAbortRequiredError) as info:
                await producer.commit_transaction()
            assert info.value.cause is not None
            with pytest.raises(Exception):  # noqa: B017 - the broker's error, whichever
                await too_large
            with pytest.raises(TransactionAbortRequiredError):
                await producer.send(topic, b"refused until the abort", partition=0)
            await producer.abort_transaction()
            producer.begin_transaction()
            await producer.send(topic, b"after", partition=0)
            await producer.commit_transaction()
        got, _ = await read_all(bootstrap, "read_committed", [tp], 4)
        assert values(got) == [b"after"]

    run(main(), 60)


def test_misuse_names_the_problem(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-misuse")
    create_topic(bootstrap, topic)

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            with pytest.raises(InvalidTxnStateError, match="init_transactions"):
                producer.begin_transaction()
            await producer.init_transactions()
            with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
                await producer.send(topic, b"outside", partition=0)
            with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
                await producer.commit_transaction()
            producer.begin_transaction()
            with pytest.raises(InvalidTxnStateError, match="commit or abort"):
                producer.begin_transaction()
            await producer.commit_transaction()  # an empty transaction is fine
        async with Producer({"bootstrap.servers": bootstrap}) as plain:
            with pytest.raises(ConfigError, match=r"transactional\.id"):
                await plain.init_transactions()

    run(main(), 60)


# -- the blocking facade -----------------------------------------------------------------------


def test_sync_facade_transactions(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-sync")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    with sync.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("sync")}
    ) as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, b"one", partition=0)
            producer.send(topic, b"two", partition=0)
        with pytest.raises(RuntimeError, match="changed my mind"), producer.transaction():
            producer.send(topic, b"aborted", partition=0)
            producer.flush()
            raise RuntimeError("changed my mind")
        producer.begin_transaction()
        producer.send(topic, b"three", partition=0)
        producer.commit_transaction()
    with sync.Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"},
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.assign([tp])
        got: list[ConsumerRecord] = []
        for _ in range(50):
            for batch in consumer.poll(200).values():
                got += batch
            if consumer.position(tp) >= 7:
                break
        # one, two, marker, aborted, marker, three, marker
        assert values(got) == [b"one", b"two", b"three"]
        assert consumer.position(tp) == 7
        assert consumer.end_offsets([tp])[tp] == 7


# -- with a third-party client on the other side -----------------------------------------------


def test_read_committed_hides_what_confluent_kafka_aborted(kafka_cluster: RunningBroker) -> None:
    """confluent-kafka (librdkafka) writes the transactions; kayak's consumer reads them."""
    import confluent_kafka

    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-librdkafka")
    create_topic(bootstrap, topic, 2)
    writer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("librdkafka")}
    )
    writer.init_transactions(30)
    for round_, commit in enumerate([True, False, True]):
        writer.begin_transaction()
        for partition in (0, 1):
            for i in range(3):
                writer.produce(topic, b"r%d-%d" % (round_, i), partition=partition)
        if commit:
            writer.commit_transaction(30)
        else:
            writer.flush(30)
            writer.abort_transaction(30)
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    async def main() -> None:
        got, positions = await read_all(bootstrap, "read_committed", partitions, 24)
        assert positions == {tp: 12 for tp in partitions}  # 3 x (3 records + a marker)
        for tp in partitions:
            assert [r.value for r in got if r.topic_partition == tp] == [
                b"r0-0", b"r0-1", b"r0-2", b"r2-0", b"r2-1", b"r2-2"
            ]  # fmt: skip

    run(main(), 60)


def test_transaction_context_manager_commits_or_aborts(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = unique("txn-context")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with txn_producer(bootstrap) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send(topic, b"kept", partition=0)
            with pytest.raises(ValueError, match="oops"):
                async with producer.transaction():
                    await producer.send(topic, b"dropped", partition=0)
                    await producer.flush()
                    raise ValueError("oops")
            async with producer.transaction():
                await producer.send(topic, b"kept too", partition=0)
        got, positions = await read_all(bootstrap, "read_committed", [tp], 6)
        assert values(got) == [b"kept", b"kept too"]
        assert positions[tp] == 6

    run(main(), 60)
