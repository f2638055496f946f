"""Broker transactions as Kafka defines them, driven by confluent-kafka and by raw requests.

- fencing: a second ``init_transactions`` with the same transactional id fences the first
  producer (its produce and commit fail with librdkafka's fatal fenced error) and aborts the
  transaction it left open;
- timeouts: a hung transaction is aborted after ``transaction.timeout.ms`` plus the cleanup
  interval, and the last stable offset moves past it;
- atomic visibility over several topics and partitions; the last stable offset and high
  watermark in ListOffsets and Fetch answers; read_committed Fetch never past the LSO;
  aborted data read by read_uncommitted consumers only;
- invalid usage answered with Kafka's error codes; ``__transaction_state`` sealed; ACLs on
  transactional ids; DescribeTransactions, ListTransactions and DescribeProducers answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kayak.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.errors import ErrorCode
from kayak.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kayak.protocol.messages.add_partitions_to_txn_response import AddPartitionsToTxnResponse
from kayak.protocol.messages.end_txn_request import EndTxnRequest
from kayak.protocol.messages.end_txn_response import EndTxnResponse
from kayak.protocol.messages.init_producer_id_request import InitProducerIdRequest
from kayak.protocol.messages.init_producer_id_response import InitProducerIdResponse
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kayak.protocol.messages.list_offsets_response import ListOffsetsResponse
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest, OffsetFetchRequestTopic
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic, unique
from tests.broker.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    batches_of,
    describe_producers,
    describe_transaction,
    end_offsets,
    fetch_partition,
    list_transactions,
    read_committed_raw,
    read_confluent,
    read_partition_raw,
    send_all,
    txn_producer,
    wait_until,
    wire,
)
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(120)

CLEANUP_INTERVAL_MS = 200
MAX_TIMESTAMP = -3  # ListOffsets: the record with the largest timestamp (KIP-734)
MAX_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker for the module: timed-out transactions are looked for every 200 ms."""
    broker = BrokerProcess(
        tmp_path_factory.mktemp("transactions") / "data",
        [
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
            str(CLEANUP_INTERVAL_MS),
            "--transaction-max-timeout-ms",
            str(MAX_TIMEOUT_MS),
        ],
    ).start()
    yield broker.bootstrap_servers
    if broker.process is not None:
        broker.stop()


def values(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(count)]


def spread(topic: str, partitions: int, records: list[bytes]) -> list[tuple[str, int, bytes]]:
    """``records`` over every partition of ``topic``, round robin."""
    return [(topic, i % partitions, value) for i, value in enumerate(records)]


def kept_values(found: list[tuple[int, int, bytes]]) -> list[bytes]:
    return sorted(value for _, _, value in found)


# -- visibility -----------------------------------------------------------------------------


def test_a_transaction_over_topics_and_partitions_becomes_visible_at_once(bootstrap: str) -> None:
    orders, audit = unique("orders"), unique("audit")
    create_topic(bootstrap, orders, 3)
    create_topic(bootstrap, audit, 2)
    producer = txn_producer(bootstrap, unique("atomic"))
    producer.begin_transaction()
    first, second = values("order", 30), values("audit", 20)
    send_all(producer, spread(orders, 3, first) + spread(audit, 2, second))

    # Acknowledged but open: written (high watermark) and held back (last stable offset).
    assert end_offsets(bootstrap, orders, 3, READ_UNCOMMITTED) == {0: 10, 1: 10, 2: 10}
    assert end_offsets(bootstrap, orders, 3, READ_COMMITTED) == {0: 0, 1: 0, 2: 0}
    assert end_offsets(bootstrap, audit, 2, READ_COMMITTED) == {0: 0, 1: 0}
    assert read_committed_raw(bootstrap, orders, 3) == []
    assert read_confluent(bootstrap, audit, 2, "read_committed") == []
    assert kept_values(read_confluent(bootstrap, orders, 3, "read_uncommitted")) == sorted(first)

    producer.commit_transaction(30)
    # Each partition: its 10 (or 10) records, then the COMMIT marker.
    assert end_offsets(bootstrap, orders, 3, READ_COMMITTED) == {0: 11, 1: 11, 2: 11}
    assert end_offsets(bootstrap, orders, 3, READ_UNCOMMITTED) == {0: 11, 1: 11, 2: 11}
    assert end_offsets(bootstrap, audit, 2, READ_COMMITTED) == {0: 11, 1: 11}
    for topic, expected, count in ((orders, first, 3), (audit, second, 2)):
        confluent = read_confluent(bootstrap, topic, count, "read_committed")
        assert kept_values(confluent) == sorted(expected), topic
        assert sorted(read_committed_raw(bootstrap, topic, count)) == sorted(confluent)


def test_aborted_records_are_read_uncommitted_only(bootstrap: str) -> None:
    topic = unique("aborted")
    create_topic(bootstrap, topic, 2)
    producer = txn_producer(bootstrap, unique("aborter"))
    committed, aborted, later = values("c", 10), values("a", 10), values("l", 10)
    for batch, commit in ((committed, True), (aborted, False), (later, True)):
        producer.begin_transaction()
        send_all(producer, spread(topic, 2, batch))
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    expected = sorted(committed + later)
    assert kept_values(read_confluent(bootstrap, topic, 2, "read_committed")) == expected
    assert kept_values(read_committed_raw(bootstrap, topic, 2)) == expected
    everything = sorted(committed + aborted + later)
    assert kept_values(read_confluent(bootstrap, topic, 2, "read_uncommitted")) == everything
    # 3 x (5 records + a marker) per partition, nothing open.
    assert end_offsets(bootstrap, topic, 2, READ_COMMITTED) == {0: 18, 1: 18}
    assert end_offsets(bootstrap, topic, 2, READ_UNCOMMITTED) == {0: 18, 1: 18}
    # The read_committed answer names the aborted transaction: producer and first offset 6.
    with wire(bootstrap) as client:
        data = fetch_partition(client, topic, 0, 0, READ_COMMITTED)
    listed = [(a.producer_id, a.first_offset) for a in data.aborted_transactions or []]
    producer_id = batches_of(data)[0].producer_id
    assert listed == [(producer_id, 6)]


def test_read_committed_fetch_never_passes_the_last_stable_offset(bootstrap: str) -> None:
    """Two producers' transactions interleave in one partition, with plain records after the
    open one: read_committed reads stop at the oldest open transaction's first offset."""
    topic = unique("lso")
    create_topic(bootstrap, topic, 1)
    slow, fast = txn_producer(bootstrap, unique("slow")), txn_producer(bootstrap, unique("fast"))
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    fast.begin_transaction()
    send_all(fast, [(topic, 0, v) for v in values("fast1", 5)])  # 0..4
    fast.commit_transaction(30)  # marker at 5
    slow.begin_transaction()
    send_all(slow, [(topic, 0, v) for v in values("slow", 5)])  # 6..10, open
    fast.begin_transaction()
    send_all(fast, [(topic, 0, v) for v in values("fast2", 5)])  # 11..15
    fast.commit_transaction(30)  # marker at 16
    send_all(plain, [(topic, 0, v) for v in values("plain", 5)])  # 17..21

    assert end_offsets(bootstrap, topic, 1, READ_UNCOMMITTED) == {0: 22}
    assert end_offsets(bootstrap, topic, 1, READ_COMMITTED) == {0: 6}
    with wire(bootstrap) as client:
        for max_bytes in (1, 200, 1 << 20):  # one batch at a time, some, all
            offset = 0
            while batches := batches_of(
                data := fetch_partition(client, topic, 0, offset, READ_COMMITTED, max_bytes)
            ):
                assert (data.last_stable_offset, data.high_watermark) == (6, 22)
                assert batches[-1].last_offset < 6, (max_bytes, offset, batches[-1].last_offset)
                offset = batches[-1].next_offset
            assert offset == 6
        at_lso = fetch_partition(client, topic, 0, 6, READ_COMMITTED)
        assert batches_of(at_lso) == []
        assert at_lso.last_stable_offset == 6
        inside = fetch_partition(client, topic, 0, 12, READ_COMMITTED)  # past the LSO itself
        assert batches_of(inside) == []
        uncommitted = fetch_partition(client, topic, 0, 6, READ_UNCOMMITTED)
        assert batches_of(uncommitted)[-1].last_offset == 21
    assert kept_values(read_confluent(bootstrap, topic, 1, "read_committed")) == sorted(
        values("fast1", 5)
    )

    slow.abort_transaction(30)  # marker at 22
    assert end_offsets(bootstrap, topic, 1, READ_COMMITTED) == {0: 23}
    expected = sorted(values("fast1", 5) + values("fast2", 5) + values("plain", 5))
    read = read_partition_raw(bootstrap, topic, 0, READ_COMMITTED)
    assert sorted(v for _, v in read.records) == expected
    assert (read.last_stable_offset, read.high_watermark) == (23, 23)
    assert kept_values(read_confluent(bootstrap, topic, 1, "read_committed")) == expected


# -- fencing and timeouts -------------------------------------------------------------------


def _fenced(error: Any) -> bool:
    codes = (confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED)
    return bool(error.code() in codes)


def test_a_second_producer_fences_the_first_and_aborts_its_transaction(bootstrap: str) -> None:
    topic, transactional_id = unique("fenced"), unique("zombie")
    create_topic(bootstrap, topic, 2)
    zombie = txn_producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    send_all(zombie, spread(topic, 2, values("zombie", 10)))
    before = describe_transaction(bootstrap, transactional_id)
    assert before.transaction_state == "Ongoing"

    successor = txn_producer(bootstrap, transactional_id)
    after = describe_transaction(bootstrap, transactional_id)
    assert after.producer_id == before.producer_id
    assert after.producer_epoch > before.producer_epoch
    assert after.transaction_state in ("CompleteAbort", "Empty")
    # The zombie's records were aborted: nothing open holds read_committed readers back.
    assert end_offsets(bootstrap, topic, 2, READ_COMMITTED) == end_offsets(
        bootstrap, topic, 2, READ_UNCOMMITTED
    )
    assert read_committed_raw(bootstrap, topic, 2) == []

    # The zombie's next record is refused (INVALID_PRODUCER_EPOCH, which librdkafka takes
    # for "fenced", a fatal error raised by flush), and so is its commit.
    zombie.produce(topic, value=b"late", partition=0)
    with pytest.raises(KafkaException) as flushed:
        zombie.flush(10)
    assert flushed.value.args[0].fatal() and _fenced(flushed.value.args[0]), flushed.value
    with pytest.raises(KafkaException) as commit:
        zombie.commit_transaction(10)
    assert commit.value.args[0].fatal() and _fenced(commit.value.args[0]), commit.value

    successor.begin_transaction()
    send_all(successor, spread(topic, 2, values("successor", 10)))
    successor.commit_transaction(30)
    assert kept_values(read_confluent(bootstrap, topic, 2, "read_committed")) == sorted(
        values("successor", 10)
    )
    assert b"late" not in [v for _, _, v in read_confluent(bootstrap, topic, 2, "read_uncommitted")]


def test_a_hung_transaction_is_aborted_after_its_timeout(bootstrap: str) -> None:
    topic, transactional_id = unique("hung"), unique("hung")
    create_topic(bootstrap, topic, 2)
    producer = txn_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    send_all(producer, spread(topic, 2, values("hung", 10)))
    opened = time.monotonic()
    assert end_offsets(bootstrap, topic, 2, READ_COMMITTED) == {0: 0, 1: 0}
    assert describe_transaction(bootstrap, transactional_id).transaction_state == "Ongoing"

    wait_until(
        "the timed-out transaction aborted",
        lambda: (
            describe_transaction(bootstrap, transactional_id).transaction_state == "CompleteAbort"
        ),
        timeout=10,
    )
    waited = time.monotonic() - opened
    assert waited >= 1.0, f"aborted after {waited:.1f}s, before its 1.5 s timeout"
    assert end_offsets(bootstrap, topic, 2, READ_COMMITTED) == {0: 6, 1: 6}
    assert end_offsets(bootstrap, topic, 2, READ_UNCOMMITTED) == {0: 6, 1: 6}
    assert read_committed_raw(bootstrap, topic, 2) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # its epoch was bumped: it cannot commit any more
    assert read_confluent(bootstrap, topic, 2, "read_committed") == []


# -- invalid usage, answered with Kafka's codes ---------------------------------------------


def _init(client: WireClient, transactional_id: str, timeout_ms: int = 10_000) -> tuple[int, int]:
    response = client.request(
        InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms),
        4,
    )
    assert isinstance(response, InitProducerIdResponse)
    assert response.error_code == 0, response.error_code
    return response.producer_id, response.producer_epoch


def _add_partitions(
    client: WireClient, transactional_id: str, pid: int, epoch: int, topic: str, partition: int
) -> int:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnTopic(topic, [partition])],
    )
    response = client.request(request, 3)
    assert isinstance(response, AddPartitionsToTxnResponse)
    (result,) = response.results_by_topic_v3_and_below
    return int(result.results_by_partition[0].partition_error_code)


def _end(client: WireClient, transactional_id: str, pid: int, epoch: int, commit: bool) -> int:
    response = client.request(EndTxnRequest(transactional_id, pid, epoch, commit), 3)
    assert isinstance(response, EndTxnResponse)
    return int(response.error_code)


def _produce(
    client: WireClient,
    topic: str,
    partition: int,
    records: bytes,
    transactional_id: str | None = None,
) -> int:
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, records)])],
    )
    response = client.request(request, 9)
    assert isinstance(response, ProduceResponse)
    return int(response.responses[0].partition_responses[0].error_code)


def _txn_batch(pid: int, epoch: int, sequence: int = 0, transactional: bool = True) -> bytes:
    return build_record_batch(
        [b"v"],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


def test_invalid_usage_gets_kafkas_error_codes(bootstrap: str) -> None:
    topic, transactional_id = unique("invalid"), unique("invalid")
    create_topic(bootstrap, topic, 2)
    with wire(bootstrap) as client:
        pid, fenced_epoch = _init(client, transactional_id)
        assert _init(client, transactional_id) == (pid, fenced_epoch + 1)
        epoch = fenced_epoch + 1
        # EndTxn with no transaction open.
        assert _end(client, transactional_id, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert _end(client, transactional_id, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        # A timeout above transaction.max.timeout.ms.
        too_long = client.request(
            InitProducerIdRequest(
                transactional_id=unique("long"), transaction_timeout_ms=MAX_TIMEOUT_MS + 1
            ),
            4,
        )
        assert isinstance(too_long, InitProducerIdResponse)
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        # One unknown partition: it fails, the others are not attempted, nothing is opened.
        both = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(topic, [0, 99])],
        )
        answer = client.request(both, 3)
        assert isinstance(answer, AddPartitionsToTxnResponse)
        codes = {
            r.partition_index: r.partition_error_code
            for r in answer.results_by_topic_v3_and_below[0].results_by_partition
        }
        assert codes == {
            0: ErrorCode.OPERATION_NOT_ATTEMPTED,
            99: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert describe_transaction(bootstrap, transactional_id).transaction_state == "Empty"
        # Internal topics join a transaction only through AddOffsetsToTxn.
        for internal in ("__consumer_offsets", "__transaction_state"):
            code = _add_partitions(client, transactional_id, pid, epoch, internal, 0)
            assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, internal
        # A transactional produce to a partition its transaction does not hold: none open...
        code = _produce(client, topic, 0, _txn_batch(pid, epoch), transactional_id)
        assert code == ErrorCode.INVALID_TXN_STATE
        # ... or one open on another partition only.
        assert _add_partitions(client, transactional_id, pid, epoch, topic, 1) == 0
        code = _produce(client, topic, 0, _txn_batch(pid, epoch), transactional_id)
        assert code == ErrorCode.INVALID_TXN_STATE
        # A non-transactional batch under a transactional id.
        plain = _txn_batch(pid, epoch, transactional=False)
        assert _produce(client, topic, 1, plain, transactional_id) == ErrorCode.INVALID_RECORD
        # The right partition is accepted; an older epoch or another producer id is not.
        assert _produce(client, topic, 1, _txn_batch(pid, epoch), transactional_id) == 0
        zombie = _txn_batch(pid, fenced_epoch, 1)
        code = _produce(client, topic, 1, zombie, transactional_id)
        assert code == ErrorCode.INVALID_PRODUCER_EPOCH
        stranger = _txn_batch(pid + 1000, 0)  # would open a transaction nobody ends
        for partition in (0, 1):
            code = _produce(client, topic, partition, stranger, transactional_id)
            assert code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        # ... nor behind a batch of the right producer, in the same Produce.
        smuggled = _txn_batch(pid, epoch, 1) + stranger
        code = _produce(client, topic, 1, smuggled, transactional_id)
        assert code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        mixed = _txn_batch(pid, epoch, 1) + _txn_batch(pid, epoch, 2, transactional=False)
        assert _produce(client, topic, 1, mixed, transactional_id) == ErrorCode.INVALID_RECORD
        nobody = unique("nobody")
        assert _produce(client, topic, 0, stranger, nobody) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _end(client, transactional_id, pid, fenced_epoch, True) == ErrorCode.PRODUCER_FENCED
        assert (
            _end(client, transactional_id, pid + 1000, epoch, True)
            == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        assert _end(client, transactional_id, pid, epoch, True) == 0
        # A retried EndTxn of the same outcome succeeds; the other outcome does not.
        assert _end(client, transactional_id, pid, epoch, True) == 0
        assert _end(client, transactional_id, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
    assert read_committed_raw(bootstrap, topic, 2) == [(1, 0, b"v")]
    # Nothing refused opened a transaction: read_committed readers see up to the end.
    assert end_offsets(bootstrap, topic, 2, READ_COMMITTED) == {0: 0, 1: 2}

    with pytest.raises(KafkaException) as refused:
        txn_producer(bootstrap, unique("long"), **{"transaction.timeout.ms": MAX_TIMEOUT_MS + 1})
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_the_transaction_state_topic_is_sealed(bootstrap: str) -> None:
    """Produce to ``__transaction_state`` is refused as Kafka refuses appends to internal
    topics (INVALID_TOPIC_EXCEPTION), with or without a transaction."""
    transactional_id = unique("sealed")
    with wire(bootstrap) as client:
        pid, epoch = _init(client, transactional_id)
        plain = build_record_batch([b"forged"], [b"key"])
        assert _produce(client, "__transaction_state", 0, plain) == (
            ErrorCode.INVALID_TOPIC_EXCEPTION
        )
        code = _add_partitions(client, transactional_id, pid, epoch, "__transaction_state", 0)
        assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        forged = _txn_batch(pid, epoch)
        code = _produce(client, "__transaction_state", 0, forged, transactional_id)
        assert code in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_TXN_STATE)
    assert describe_transaction(bootstrap, transactional_id).transaction_state == "Empty"


# -- the admin views ------------------------------------------------------------------------


def test_describe_and_list_transactions_and_producers(bootstrap: str) -> None:
    topic, transactional_id = unique("described"), unique("described")
    create_topic(bootstrap, topic, 3)
    producer = txn_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": 45_000})
    send_all(
        confluent_kafka.Producer({"bootstrap.servers": bootstrap}),
        [(topic, 1, v) for v in values("plain", 4)],
    )
    began = int(time.time() * 1000)
    producer.begin_transaction()
    send_all(producer, [(topic, 0, b"a"), (topic, 1, b"b")])

    described = describe_transaction(bootstrap, transactional_id)
    assert described.error_code == 0
    assert described.transaction_state == "Ongoing"
    assert described.transaction_timeout_ms == 45_000
    assert began - 5000 <= described.transaction_start_time_ms <= int(time.time() * 1000)
    assert [(t.topic, sorted(t.partitions)) for t in described.topics] == [(topic, [0, 1])]
    pid, epoch = described.producer_id, described.producer_epoch

    listed = list_transactions(bootstrap, ["Ongoing", "NoSuchState"])
    assert listed.unknown_state_filters == ["NoSuchState"]
    ongoing = {(t.transactional_id, t.producer_id, t.transaction_state)
               for t in listed.transaction_states}  # fmt: skip
    assert (transactional_id, pid, "Ongoing") in ongoing
    everything = {t.transactional_id for t in list_transactions(bootstrap).transaction_states}
    assert transactional_id in everything

    producers = describe_producers(bootstrap, topic, 3).topics[0].partitions
    by_partition = {
        p.partition_index: {a.producer_id: a for a in p.active_producers} for p in producers
    }
    assert [p.error_code for p in producers] == [0, 0, 0]
    assert by_partition[2] == {}
    assert by_partition[0][pid].current_txn_start_offset == 0
    assert by_partition[0][pid].producer_epoch == epoch
    assert by_partition[1][pid].current_txn_start_offset == 4  # after the 4 plain records

    producer.commit_transaction(30)
    done = describe_transaction(bootstrap, transactional_id)
    assert (done.transaction_state, done.topics) == ("CompleteCommit", [])
    listed_after = list_transactions(bootstrap, ["Ongoing"]).transaction_states
    assert transactional_id not in {t.transactional_id for t in listed_after}
    after = describe_producers(bootstrap, topic, 3).topics[0].partitions
    assert after[0].active_producers[0].current_txn_start_offset == -1
    assert after[0].active_producers[0].coordinator_epoch >= 0
    missing = describe_transaction(bootstrap, unique("nobody"))
    assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


# -- ACLs on transactional ids --------------------------------------------------------------


def _allow(principal: str, op: AclOperation, resource: ResourceType, name: str) -> AclBinding:
    pattern = PatternType.PREFIXED if name.endswith("-") else PatternType.LITERAL
    return AclBinding(
        ResourcePattern(resource, name, pattern),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


def _sasl(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def test_transactional_ids_need_write_acls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    users = CredentialStore.open(data)
    for user in ("admin", "alice", "bob"):
        users.upsert(user, "SCRAM-SHA-256", password=f"{user}-secret")
    alice, bob = "User:alice", "User:bob"
    AclStore.open(data).add(
        [
            _allow(who, op, ResourceType.TOPIC, "orders")
            for who in (alice, bob)
            for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
        ]
        + [
            _allow(alice, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "alice-"),
            _allow(bob, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "alice-"),
        ]
    )
    settings: dict[str, Any] = {
        "listeners": parse_listeners("SASL_PLAINTEXT://127.0.0.1:0"),
        "super_users": ("User:admin",),
    }
    with ThreadedBroker(data, **settings) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient(_sasl(bootstrap, "admin"))
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)

        def init(user: str, transactional_id: str) -> confluent_kafka.Producer:
            producer = confluent_kafka.Producer(
                {**_sasl(bootstrap, user), "transactional.id": transactional_id}
            )
            producer.init_transactions(20)
            return producer

        # bob may only describe alice's ids, and has no id of his own.
        for transactional_id in ("alice-1", "bob-1"):
            with pytest.raises(KafkaException) as refused:
                init("bob", transactional_id)
            code = refused.value.args[0].code()
            assert code == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # alice may not use an id outside her prefix either.
        with pytest.raises(KafkaException) as outside:
            init("alice", "bob-1")
        assert outside.value.args[0].code() == (
            confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        producer = init("alice", "alice-1")
        producer.begin_transaction()
        send_all(producer, [("orders", 0, b"x"), ("orders", 1, b"y")])
        producer.commit_transaction(20)

        admin_config = _sasl(bootstrap, "admin")
        got = read_confluent(bootstrap, "orders", 2, "read_committed", **admin_config)
        assert kept_values(got) == [b"x", b"y"]


# -- offsets an open transaction holds back ---------------------------------------------------


def _offset_for_time(bootstrap: str, topic: str, timestamp: int, isolation: int) -> int:
    wanted = [ListOffsetsPartition(0, -1, timestamp)]
    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation, topics=[ListOffsetsTopic(topic, wanted)]
    )
    with wire(bootstrap) as client:
        response = client.request(request, 7)
    assert isinstance(response, ListOffsetsResponse)
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0, answer
    return int(answer.offset)


def test_list_offsets_by_time_stays_below_the_last_stable_offset(bootstrap: str) -> None:
    """As Kafka's Partition.fetchOffsetForTimestamp: a read_committed lookup by time (or of
    the max timestamp) finds nothing at or past the last stable offset."""
    topic = unique("by-time")
    create_topic(bootstrap, topic, 1)
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"old", partition=0, timestamp=1_000_000)
    assert plain.flush(10) == 0
    producer = txn_producer(bootstrap, unique("by-time"))
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0, timestamp=5_000_000)
    assert producer.flush(10) == 0

    for wanted in (2_000_000, 5_000_000, MAX_TIMESTAMP):
        assert _offset_for_time(bootstrap, topic, wanted, READ_UNCOMMITTED) == 1, wanted
        assert _offset_for_time(bootstrap, topic, wanted, READ_COMMITTED) == -1, wanted
    assert _offset_for_time(bootstrap, topic, 1_000_000, READ_COMMITTED) == 0
    producer.commit_transaction(30)
    assert _offset_for_time(bootstrap, topic, 5_000_000, READ_COMMITTED) == 1
    # Once it commits both levels agree (the marker, stamped now, may hold the max timestamp).
    assert _offset_for_time(bootstrap, topic, MAX_TIMESTAMP, READ_COMMITTED) == (
        _offset_for_time(bootstrap, topic, MAX_TIMESTAMP, READ_UNCOMMITTED)
    )


def test_offset_fetch_require_stable_waits_for_the_transaction(bootstrap: str) -> None:
    """KIP-447: offsets sent to an open transaction are UNSTABLE_OFFSET_COMMIT for a
    require_stable OffsetFetch, invisible to the others, and count once it commits."""
    topic, group = unique("input"), unique("copier")
    create_topic(bootstrap, topic, 1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 5)], asynchronous=False)
    producer = txn_producer(bootstrap, unique("copier"))
    for commit in (False, True):
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), 30
        )
        assert _fetch_offset(bootstrap, group, topic, stable=True) == (
            -1,
            ErrorCode.UNSTABLE_OFFSET_COMMIT,
        )
        assert _fetch_offset(bootstrap, group, topic, stable=False) == (5, 0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        expected = 9 if commit else 5
        assert _fetch_offset(bootstrap, group, topic, stable=True) == (expected, 0)
    consumer.close()


def _fetch_offset(bootstrap: str, group: str, topic: str, stable: bool) -> tuple[int, int]:
    request = OffsetFetchRequest(
        group_id=group, topics=[OffsetFetchRequestTopic(topic, [0])], require_stable=stable
    )
    with wire(bootstrap) as client:
        response = client.request(request, 7)
    assert isinstance(response, OffsetFetchResponse)
    answer = response.topics[0].partitions[0]
    return int(answer.committed_offset), int(answer.error_code)
