"""``kayak broker --shards 2`` with only a SASL_SSL listener: both shards take the security
options, so a client that logs in reaches partitions led by either shard."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.secured_broker import secured_broker
from tests.fixtures.certs import TlsFiles

pytestmark = pytest.mark.timeout(180)


def test_a_two_shard_sasl_ssl_broker_serves_a_client_through_both_shards(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    with secured_broker(tmp_path, tls_files, "--shards", "2", listeners_expected=2) as broker:
        config = broker.client_config()
        admin = AdminClient(config)
        admin.create_topics([NewTopic("orders", num_partitions=4)])["orders"].result(30)
        metadata = admin.list_topics("orders", timeout=30)
        assert sorted(metadata.brokers) == [0, 1]
        leaders = {p.id: p.leader for p in metadata.topics["orders"].partitions.values()}
        assert set(leaders.values()) == {0, 1}, leaders  # both shards lead some partition

        producer = Producer({**config, "message.timeout.ms": 20000})
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failures.append(error)

        for partition in leaders:
            for i in range(10):
                value = b"p%d-%d" % (partition, i)
                producer.produce("orders", value, partition=partition, on_delivery=delivered)
        assert producer.flush(30) == 0
        assert failures == []

        consumer = Consumer({**config, "group.id": "billing", "enable.auto.commit": False})
        consumer.assign([TopicPartition("orders", p, 0) for p in leaders])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 10 * len(leaders) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
        consumer.close()
        assert sorted(values) == sorted(b"p%d-%d" % (p, i) for p in leaders for i in range(10))
