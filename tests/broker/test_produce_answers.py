"""Produce runs without a task of its own (``kayak.broker.handlers.ANSWERED_NOW``): its batches
are appended as the request is read and its answer is a future. What that must not change:
requests on one connection still take effect in the order they were sent, answers leave in
that order, and a producer that goes away before its answer loses nothing it was told.
"""

from __future__ import annotations

import time

import pytest

from kayak.protocol.messages import (
    ApiVersionsRequest,
    DeleteTopicsRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicState
from kayak.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch
from tests.broker.conftest import BrokerProcess
from tests.broker.test_broker_bad_input import fetch_values, make_topic, produce
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(60)

_UNKNOWN_TOPIC_OR_PARTITION = 3


def _produce_request(topic: str, value: bytes) -> ProduceRequest:
    data = TopicProduceData(topic, [PartitionProduceData(0, build_record_batch([value]))])
    return ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data])


def _pipelined(client: WireClient, *requests: tuple[object, int]) -> list[object]:
    """Send every request in one write, then read their answers in order."""
    frames = b"".join(client.protocol.send_request(m, v)[1] for m, v in requests)  # type: ignore[arg-type]
    client.send_raw(frames)
    answers = []
    while len(answers) < len(requests):
        event = client.protocol.next_event()
        if event is None:
            data = client.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            client.protocol.receive_data(data)
            continue
        answers.append(event.response)
    return answers


def test_a_produce_sent_right_after_a_delete_topics_is_refused(
    broker_process: BrokerProcess,
) -> None:
    """DeleteTopics closes the topic's logs before it awaits anything; a Produce sent behind it
    on the same connection must find them closed, not be appended first and acknowledged
    for a topic that is then deleted."""
    client = WireClient(broker_process.bootstrap_servers)
    make_topic(client, "going")
    assert produce(client, "going", build_record_batch([b"before"])) == 0
    delete = DeleteTopicsRequest(topics=[DeleteTopicState(name="going")], timeout_ms=5000)
    deleted, produced = _pipelined(client, (delete, 6), (_produce_request("going", b"after"), 9))
    assert deleted.responses[0].error_code == 0  # type: ignore[attr-defined]
    partition = produced.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert partition.error_code != 0, "acknowledged an append to a topic being deleted"
    assert partition.base_offset == -1


def test_answers_leave_in_request_order_around_produce(broker_process: BrokerProcess) -> None:
    client = WireClient(broker_process.bootstrap_servers)
    make_topic(client, "ordered")
    requests: list[tuple[object, int]] = []
    for i in range(20):
        requests.append((_produce_request("ordered", b"%d" % i), 9))
        requests.append((ApiVersionsRequest(), 3))
    requests.append((_produce_request("missing", b"x"), 9))
    answers = _pipelined(client, *requests)
    offsets = [a.responses[0].partition_responses[0].base_offset for a in answers[:-1:2]]  # type: ignore[attr-defined]
    assert offsets == list(range(20))
    assert all(hasattr(a, "api_keys") for a in answers[1::2])
    missing = answers[-1].responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert missing.error_code == _UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_values(client, "ordered") == [b"%d" % i for i in range(20)]


def _end_offset(client: WireClient, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(0, timestamp=-1)])],
    )
    answer = client.request(request, 7)
    return answer.topics[0].partitions[0].offset  # type: ignore[attr-defined,no-any-return]


def test_a_producer_gone_before_its_answer_leaves_its_records_stored(
    broker_process: BrokerProcess,
) -> None:
    """Connections closed with acks=all Produce requests still waiting for their fsync: every
    record still becomes durable and readable, and the broker logs no error for the answers
    nobody is left to read."""
    setup = WireClient(broker_process.bootstrap_servers)
    make_topic(setup, "abandoned")
    for i in range(30):
        gone = WireClient(broker_process.bootstrap_servers)
        frames = b"".join(
            gone.protocol.send_request(_produce_request("abandoned", b"%d-%d" % (i, j)), 9)[1]
            for j in range(10)
        )
        gone.send_raw(frames)
        gone.close()
    deadline = time.monotonic() + 20
    while _end_offset(setup, "abandoned") < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    values = fetch_values(setup, "abandoned")
    # Every request the broker read was appended as it was read, each connection's in order.
    assert len(values) == 300
    for i in range(30):
        mine = [v for v in values if v.startswith(b"%d-" % i)]
        assert mine == [b"%d-%d" % (i, j) for j in range(10)]
    log = broker_process.log_text()
    assert "never retrieved" not in log and "Traceback" not in log, log[-3000:]
