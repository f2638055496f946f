"""Decoding fetched partitions, on bytes: offsets, partial batches, CRCs, read_committed.

Each test builds a partition's records with kayak's batch builder, wraps them in a
FetchResponse that goes through its wire encoding and back (as a broker's answer would),
and hands the partition to the fetcher as a response.
"""

from __future__ import annotations

import pickle
import uuid

import pytest

from kayak.client.cluster import Cluster, PartitionInfo, TopicInfo
from kayak.client.config import ConsumerConfig
from kayak.client.connection import BrokerConnection
from kayak.client.consumer.fetcher import Fetcher, _Wanted
from kayak.client.consumer.records import ConsumerRecord
from kayak.client.consumer.subscription import PartitionState, SubscriptionState
from kayak.client.types import TopicPartition
from kayak.errors import CorruptRecordError
from kayak.protocol.messages.fetch_request import FetchRequest
from kayak.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from kayak.protocol.primitives import ZERO_UUID
from kayak.protocol.records import (
    Codec,
    ControlRecordType,
    TimestampType,
    build_control_batch,
    build_record_batch,
)

pytestmark = pytest.mark.timeout(30)

TP = TopicPartition("t", 0)


def batch(first: int, count: int, **kwargs: object) -> bytes:
    values = [b"v%d" % (first + i) for i in range(count)]
    keys = [b"k%d" % (first + i) for i in range(count)]
    return build_record_batch(values, keys, base_offset=first, timestamp=1000, **kwargs)  # type: ignore[arg-type]


def txn(first: int, count: int, producer_id: int) -> bytes:
    return batch(first, count, producer_id=producer_id, producer_epoch=0, is_transactional=True)


def marker(offset: int, kind: ControlRecordType, producer_id: int) -> bytes:
    return build_control_batch(kind, producer_id=producer_id, producer_epoch=0, base_offset=offset)


def answer(
    records: bytes, aborted: list[tuple[int, int]] | None = None, version: int = 12
) -> PartitionData:
    """``records`` as one partition of a FetchResponse that went over the wire."""
    data = PartitionData(
        partition_index=0,
        high_watermark=100,
        last_stable_offset=100,
        aborted_transactions=[AbortedTransaction(p, o) for p, o in aborted or []],
        records=records,
    )
    response = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[data])])
    decoded = FetchResponse.decode(response.encode(version), version)
    return decoded.responses[0].partitions[0]


def fetcher_for(**config: object) -> tuple[Fetcher, PartitionState]:
    cfg = ConsumerConfig.from_user({"bootstrap.servers": "127.0.0.1:1", **config})
    subscriptions = SubscriptionState()
    subscriptions.assign_manually([TP])
    fetcher = Fetcher(Cluster(cfg), subscriptions, cfg)
    fetcher.wake = lambda: None  # type: ignore[method-assign]  # decoding only: never send
    return fetcher, subscriptions.state(TP)


def take(fetcher: Fetcher, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
    records: dict[TopicPartition, list[ConsumerRecord]] = {}
    fetcher.take(None, limit, records)
    return records


def take_values(fetcher: Fetcher, limit: int) -> dict[TopicPartition, list[bytes | None]]:
    values: dict[TopicPartition, list[bytes | None]] = {}
    fetcher.take_values(None, limit, values)
    return values


def read(records: bytes, offset: int = 0, **config: object) -> tuple[list[int], PartitionState]:
    """Offsets a consumer at ``offset`` gets from ``records``, and the partition's state."""
    fetcher, state = fetcher_for(**config)
    state.seek(offset)
    fetcher.handle_partition(state, offset, answer(records))
    got = take(fetcher, 10_000).get(TP, [])
    return [r.offset for r in got], state


def test_a_fetch_that_starts_inside_a_batch_skips_the_records_before_it() -> None:
    offsets, state = read(batch(0, 10) + batch(10, 5), offset=4)
    assert offsets == list(range(4, 15))
    assert state.position == 15
    assert state.fetch_offset == 15


def test_a_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    whole = batch(0, 5)
    cut = batch(5, 5)[:-7]
    offsets, state = read(whole + cut)
    assert offsets == [0, 1, 2, 3, 4]
    assert state.fetch_offset == 5  # the next fetch asks for the cut batch again


def test_records_carry_their_partition_key_value_and_timestamp_type() -> None:
    fetcher, state = fetcher_for()
    state.seek(0)
    appended = batch(0, 2, timestamp_type=TimestampType.LOG_APPEND_TIME)
    fetcher.handle_partition(state, 0, answer(appended))
    first, second = take(fetcher, 10)[TP]
    assert isinstance(first, ConsumerRecord)
    assert (first.topic, first.partition, first.offset, first.key, first.value) == (
        "t",
        0,
        0,
        b"k0",
        b"v0",
    )
    assert first.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert first.topic_partition == TP
    assert second.offset == 1
    built = ConsumerRecord("t", 0, 0, first.timestamp, 1, b"k0", b"v0", [])
    assert built == first
    assert pickle.loads(pickle.dumps(first)) == first
    assert "topic='t'" in repr(first)


def test_values_only_and_records_can_be_mixed_on_one_partition() -> None:
    fetcher, state = fetcher_for()
    state.seek(3)
    fetcher.handle_partition(state, 3, answer(batch(0, 10, codec=Codec.LZ4) + batch(10, 10)))
    assert take_values(fetcher, 4) == {TP: [b"v3", b"v4", b"v5", b"v6"]}
    assert state.position == 7
    records = take(fetcher, 2)[TP]
    assert [r.offset for r in records] == [7, 8]
    assert take_values(fetcher, 100)[TP] == [b"v%d" % i for i in range(9, 20)]
    assert state.position == 20
    assert not fetcher.has_buffered()


def test_a_corrupt_batch_fails_its_crc_unless_check_crcs_is_off() -> None:
    damaged = bytearray(batch(0, 3))
    damaged[-3] ^= 0xFF  # inside the last record's value
    with pytest.raises(CorruptRecordError, match="CRC"):
        read(bytes(damaged))
    offsets, _ = read(bytes(damaged), **{"check.crcs": False})
    assert offsets == [0, 1, 2]


def transactional_log() -> bytes:
    """Producer 7 aborts 0-1, 2-3 are plain, producer 8 commits 4-5, markers at 6 and 7,
    then producer 7 writes 8-9 in a new transaction."""
    return b"".join(
        [
            txn(0, 2, producer_id=7),
            batch(2, 2),
            txn(4, 2, producer_id=8),
            marker(6, ControlRecordType.ABORT, producer_id=7),
            marker(7, ControlRecordType.COMMIT, producer_id=8),
            txn(8, 2, producer_id=7),
        ]
    )


def test_read_committed_drops_aborted_transactions_and_control_batches() -> None:
    fetcher, state = fetcher_for(**{"isolation.level": "read_committed"})
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(transactional_log(), aborted=[(7, 0)]))
    got = take(fetcher, 100)[TP]
    assert [r.offset for r in got] == [2, 3, 4, 5, 8, 9]
    assert state.position == 10


def test_read_committed_drops_a_second_aborted_transaction_of_the_same_producer() -> None:
    log = transactional_log() + marker(10, ControlRecordType.ABORT, producer_id=7) + batch(11, 1)
    fetcher, state = fetcher_for(**{"isolation.level": "read_committed"})
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(log, aborted=[(7, 0), (7, 8)]))
    assert [r.offset for r in take(fetcher, 100)[TP]] == [2, 3, 4, 5, 11]
    assert state.position == 12


def test_read_committed_values_path_skips_the_same_records() -> None:
    fetcher, state = fetcher_for(**{"isolation.level": "read_committed"})
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(transactional_log(), aborted=[(7, 0)]))
    assert take_values(fetcher, 100)[TP] == [b"v2", b"v3", b"v4", b"v5", b"v8", b"v9"]


def test_read_uncommitted_keeps_aborted_data_but_never_control_records() -> None:
    offsets, state = read(transactional_log())
    assert offsets == [0, 1, 2, 3, 4, 5, 8, 9]
    assert state.position == 10


def test_data_fetched_before_a_seek_is_never_returned_after_it() -> None:
    fetcher, state = fetcher_for()
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(batch(0, 5)))
    state.seek(100)
    assert take(fetcher, 10) == {}
    assert not fetcher.has_buffered()


def test_paused_partitions_keep_their_data_until_resumed() -> None:
    fetcher, state = fetcher_for()
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(batch(0, 5)))
    state.paused = True
    assert take(fetcher, 10) == {}
    state.paused = False
    assert [r.offset for r in take(fetcher, 10)[TP]] == [0, 1, 2, 3, 4]


def test_max_records_splits_a_batch_across_polls() -> None:
    fetcher, state = fetcher_for()
    state.seek(0)
    fetcher.handle_partition(state, 0, answer(batch(0, 7)))
    assert [r.offset for r in take(fetcher, 3)[TP]] == [0, 1, 2]
    assert state.position == 3
    one = fetcher.take_one(None)
    assert one is not None and one[1].offset == 3
    assert [r.offset for r in take(fetcher, 10)[TP]] == [4, 5, 6]
    assert state.position == 7


def fetch_request_for(topic_id: uuid.UUID, broker_max: int) -> tuple[int, FetchRequest]:
    cfg = ConsumerConfig.from_user({"bootstrap.servers": "127.0.0.1:1"})
    subscriptions = SubscriptionState()
    subscriptions.assign_manually([TP])
    cluster = Cluster(cfg)
    cluster.metadata.topics["t"] = TopicInfo(
        "t", topic_id, {0: PartitionInfo("t", 0, 1, 5, (1,), (1,))}
    )
    fetcher = Fetcher(cluster, subscriptions, cfg)
    connection = BrokerConnection("127.0.0.1", 1)
    connection.api_versions = {FetchRequest.API_KEY: (4, broker_max)}
    state = subscriptions.state(TP)
    state.seek(42)
    request, version, _ = fetcher._request(connection, [_Wanted(state, state.epoch, 0, 42)])
    return version, request


def test_fetch_versions_follow_the_broker_and_topic_ids() -> None:
    """Topic ids (Fetch v13+) when metadata has them; by name (v12) when it does not; never
    above what the broker speaks; the leader epoch from metadata (v9+)."""
    topic_id = uuid.uuid4()
    version, request = fetch_request_for(topic_id, 17)
    assert version == 16
    assert request.topics[0].topic_id == topic_id
    partition = request.topics[0].partitions[0]
    assert (partition.fetch_offset, partition.current_leader_epoch) == (42, 5)
    assert request.session_epoch == -1  # no fetch session: every request is complete
    assert fetch_request_for(ZERO_UUID, 17)[0] == 12
    version, request = fetch_request_for(topic_id, 8)
    assert version == 8
    assert request.topics[0].partitions[0].current_leader_epoch == -1  # v9+ only
