"""The log cleaner compacts ``__consumer_offsets`` and ``__transaction_state`` in a real broker
process, and a restart finds exactly the state it had before the cleaning.

Each test runs a broker three times on one data directory: first with the cleaner idle (a
backoff of ten minutes) while many commits or transactions of few keys land in segments that
``segment.ms`` rolls; then with the cleaner every 200 ms until it has cleaned the whole log;
then once more, to read the state back. The internal topic is created before the first start
with small segments (``segment.ms``) and ``min.cleanable.dirty.ratio``, as a data directory
from an older kayak would hold it: clients may not change an internal topic's configs.
"""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka
import pytest

from kayak.broker.catalog import TopicCatalog
from kayak.broker.consumer_offsets import TOPIC as OFFSETS_TOPIC
from kayak.broker.log import LogConfig
from kayak.broker.log.cleaner.manager import CHECKPOINT
from kayak.broker.txn.records import TOPIC as TXN_TOPIC
from kayak.errors import ErrorCode
from kayak.protocol.messages.offset_commit_response import OffsetCommitResponse
from kayak.protocol.messages.offset_fetch_request import OffsetFetchRequest
from kayak.protocol.messages.offset_fetch_response import OffsetFetchResponse
from kayak.protocol.records.scanner import scan_batches
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.test_group_offsets import commit_request
from tests.broker.test_log_cleaner_broker import verify_data_dir, wait_for
from tests.broker.txn_support import describe_transaction, send_all, txn_producer, wire

pytestmark = pytest.mark.timeout(240)

SMALL_SEGMENTS = {
    "cleanup.policy": "compact",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
}
IDLE_CLEANER = ["--log-cleaner-backoff-ms", "600000"]
BUSY_CLEANER = ["--log-cleaner-backoff-ms", "200"]
ROLL_PAUSE_S = 0.35  # longer than segment.ms: the next append starts a new segment


def precreate(data_dir: Path, topic: str) -> None:
    """The internal topic with small segments, as the broker will find it."""
    data_dir.mkdir(parents=True)
    catalog = TopicCatalog(data_dir, LogConfig())
    catalog.open(clean_shutdown=True)
    catalog.create(topic, 1, SMALL_SEGMENTS, internal=True, owners=[0])
    catalog.close()


def log_files(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def size_on_disk(partition_dir: Path) -> int:
    return sum(path.stat().st_size for path in log_files(partition_dir))


def records_on_disk(partition_dir: Path) -> int:
    return sum(
        h.record_count for p in log_files(partition_dir) for h in scan_batches(p.read_bytes())
    )


def end_offset(partition_dir: Path) -> int:
    """The log end offset of a stopped partition: past its last batch."""
    last = [h for p in log_files(partition_dir) for h in scan_batches(p.read_bytes())][-1]
    return last.last_offset + 1


def cleaned_up_to(partition_dir: Path) -> int:
    try:
        return int((partition_dir / CHECKPOINT).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def clean_everything(broker: BrokerProcess, partition_dir: Path) -> tuple[int, int]:
    """Run the broker with a busy cleaner until the whole log (as the last run left it) is
    cleaned; returns (bytes, records) before, then checks ``kayak log verify``."""
    before = size_on_disk(partition_dir), records_on_disk(partition_dir)
    end = end_offset(partition_dir)
    broker.extra_args = BUSY_CLEANER
    broker.start()
    try:
        wait_for(f"{partition_dir.name} cleaned", lambda: cleaned_up_to(partition_dir) >= end)
    finally:
        assert broker.stop() == 0
    assert f"{partition_dir.name}: cleaned up to offset" in broker.log_text()
    verified = verify_data_dir(broker.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return before


# -- __consumer_offsets ---------------------------------------------------------------------

GROUPS, PARTITIONS, ROUNDS = 5, 4, 16


def commit_offsets(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    request = commit_request(group, -1, "", {("orders", p): o for p, o in offsets.items()})
    with wire(bootstrap) as client:
        response = client.request(request, 8)
    assert isinstance(response, OffsetCommitResponse)
    assert {p.error_code for t in response.topics for p in t.partitions} == {ErrorCode.NONE}


def committed(bootstrap: str, groups: list[str]) -> dict[str, dict[int, int]]:
    found: dict[str, dict[int, int]] = {}
    with wire(bootstrap) as client:
        for group in groups:
            response = client.request(OffsetFetchRequest(group, None), 7)
            assert isinstance(response, OffsetFetchResponse) and response.error_code == 0
            found[group] = {p.partition_index: p.committed_offset
                            for t in response.topics for p in t.partitions}  # fmt: skip
    return found


def transactional_offsets(bootstrap: str, group: str) -> None:
    """For ``group``: a plain commit of orders-0 at 5, then a transaction committing 999 for
    it that aborts, and one committing 777 for orders-1 that commits."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[confluent_kafka.TopicPartition("orders", 0, 5)], asynchronous=False)
    producer = txn_producer(bootstrap, f"{group}-copier")
    for partition, offset, commit in ((0, 999, False), (1, 777, True)):
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition("orders", partition, offset)],
            consumer.consumer_group_metadata(),
            30,
        )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer.close()


def test_consumer_offsets_cleaned_then_restored_exactly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    precreate(data, OFFSETS_TOPIC)
    partition_dir = data / f"{OFFSETS_TOPIC}-0"
    groups = [f"group-{g}" for g in range(GROUPS)]
    broker = BrokerProcess(data, IDLE_CLEANER).start()
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "orders", PARTITIONS)
        for r in range(ROUNDS):
            for g, group in enumerate(groups):
                commit_offsets(
                    bootstrap, group, {p: r * 100 + g * 10 + p for p in range(PARTITIONS)}
                )
            if r == ROUNDS // 2:
                transactional_offsets(bootstrap, "txn-group")
            time.sleep(ROLL_PAUSE_S)
        expected = committed(bootstrap, [*groups, "txn-group"])
    finally:
        assert broker.stop() == 0
    last = (ROUNDS - 1) * 100
    assert expected == {
        **{
            group: {p: last + g * 10 + p for p in range(PARTITIONS)}
            for g, group in enumerate(groups)
        },
        "txn-group": {0: 5, 1: 777},
    }
    assert len(log_files(partition_dir)) >= ROUNDS // 2, "segment.ms did not roll segments"

    bytes_before, records_before = clean_everything(broker, partition_dir)
    assert records_before >= GROUPS * PARTITIONS * ROUNDS
    # Each key's last record, the transaction markers and nothing else of any size.
    assert records_on_disk(partition_dir) <= GROUPS * PARTITIONS + 2 + 4
    assert size_on_disk(partition_dir) < bytes_before // 4

    broker.extra_args = IDLE_CLEANER
    broker.start()
    try:
        assert committed(broker.bootstrap_servers, [*groups, "txn-group"]) == expected
        # and the store still takes commits over the cleaned log
        commit_offsets(broker.bootstrap_servers, groups[0], {0: 123_456})
        assert committed(broker.bootstrap_servers, [groups[0]])[groups[0]][0] == 123_456
    finally:
        assert broker.stop() == 0


# -- __transaction_state --------------------------------------------------------------------

IDS, TRANSACTIONS = 3, 8


def transaction_states(bootstrap: str, ids: list[str]) -> dict[str, tuple[str, int, int, int]]:
    """Per id what DescribeTransactions says: (state, producer id, epoch, timeout)."""
    found = {}
    for transactional_id in ids:
        described = describe_transaction(bootstrap, transactional_id)
        assert described.error_code == 0, transactional_id
        found[transactional_id] = (
            described.transaction_state,
            described.producer_id,
            described.producer_epoch,
            described.transaction_timeout_ms,
        )
    return found


def test_transaction_state_cleaned_then_restored_exactly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    precreate(data, TXN_TOPIC)
    partition_dir = data / f"{TXN_TOPIC}-0"
    ids = [f"writer-{i}" for i in range(IDS)]
    broker = BrokerProcess(data, IDLE_CLEANER).start()
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "events", 1)
        producers = {
            tid: txn_producer(bootstrap, tid, **{"transaction.timeout.ms": 20_000 + i * 1000})
            for i, tid in enumerate(ids)
        }
        for t in range(TRANSACTIONS):
            for i, (tid, producer) in enumerate(producers.items()):
                producer.begin_transaction()
                send_all(producer, [("events", 0, f"{tid}-{t}".encode())])
                # the last transaction of writer-1 aborts: a state of each kind survives
                if t == TRANSACTIONS - 1 and i == 1:
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
            time.sleep(ROLL_PAUSE_S)
        expected = transaction_states(bootstrap, ids)
    finally:
        assert broker.stop() == 0
    assert [state for state, *_ in expected.values()] == [
        "CompleteCommit",
        "CompleteAbort",
        "CompleteCommit",
    ]
    assert [timeout for *_, timeout in expected.values()] == [20_000, 21_000, 22_000]

    bytes_before, records_before = clean_everything(broker, partition_dir)
    assert records_before >= IDS * TRANSACTIONS * 3  # ongoing, prepare, complete at least
    assert records_on_disk(partition_dir) <= IDS
    assert size_on_disk(partition_dir) < bytes_before // 4

    broker.extra_args = IDLE_CLEANER
    broker.start()
    try:
        assert transaction_states(broker.bootstrap_servers, ids) == expected
        # the coordinator goes on from the restored state: a new epoch, a committed transaction
        producer = txn_producer(broker.bootstrap_servers, ids[0])
        producer.begin_transaction()
        send_all(producer, [("events", 0, b"after")])
        producer.commit_transaction(30)
        state, pid, epoch, _ = transaction_states(broker.bootstrap_servers, ids[:1])[ids[0]]
        assert (state, pid) == ("CompleteCommit", expected[ids[0]][1])
        assert epoch > expected[ids[0]][2]
    finally:
        assert broker.stop() == 0
