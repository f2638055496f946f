"""Metadata's ``cluster_authorized_operations`` (v8-v10) and ``topic_authorized_operations``
(v8+), filled when the client asks, from the ACLs of a real broker process: raw requests at
every version that has the fields, and confluent-kafka's describe_topics/describe_cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from kayak.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourcePattern,
)
from kayak.broker.security.acls import AclOperation as Op
from kayak.broker.security.acls import ResourceType as KResourceType
from kayak.protocol.messages import MetadataRequest
from kayak.protocol.messages.metadata_request import MetadataRequestTopic
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(90)

NOT_REQUESTED = -(2**31)
READ, DESCRIBE, DESCRIBE_CONFIGS = 3, 8, 10  # Kafka's ACL operation codes (bit numbers)
CLUSTER_DESCRIBE, CLUSTER_IDEMPOTENT_WRITE = 8, 12


def allow(resource: ResourcePattern, *operations: Op) -> list[AclBinding]:
    entry = [AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW)
             for op in operations]  # fmt: skip
    return [AclBinding(resource, e) for e in entry]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose anonymous clients may read and describe the configs of ``readable``
    and describe and idempotently write on the cluster; nothing else."""
    data = tmp_path_factory.mktemp("metadata-ops") / "data"
    process = BrokerProcess(data).start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap_servers})
    (future,) = admin.create_topics([NewTopic("readable", 1, 1)]).values()
    future.result(15)
    process.stop()
    AclStore.open(data).add(
        allow(ResourcePattern(KResourceType.TOPIC, "readable", PatternType.LITERAL),
              Op.READ, Op.DESCRIBE_CONFIGS)
        + allow(ResourcePattern(KResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                Op.DESCRIBE, Op.IDEMPOTENT_WRITE)
    )  # fmt: skip
    process.extra_args = ["--no-allow-everyone-if-no-acl-found"]
    process.start()
    yield process
    process.stop()


def metadata(broker: BrokerProcess, version: int, *, ask: bool) -> Any:
    wire = WireClient(broker.bootstrap_servers)
    try:
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name="readable")], allow_auto_topic_creation=False,
            include_cluster_authorized_operations=ask, include_topic_authorized_operations=ask,
        )  # fmt: skip
        return wire.request(request, version)
    finally:
        wire.close()


@pytest.mark.parametrize("version", [8, 9, 10, 11, 12])
def test_metadata_fills_authorized_operations_when_asked(
    broker: BrokerProcess, version: int
) -> None:
    answer = metadata(broker, version, ask=True)
    (topic,) = answer.topics
    assert topic.error_code == 0
    assert topic.topic_authorized_operations == (1 << READ) | (1 << DESCRIBE) | (
        1 << DESCRIBE_CONFIGS
    )
    if version <= 10:  # v11 moved the cluster's to DescribeCluster
        expected = (1 << CLUSTER_DESCRIBE) | (1 << CLUSTER_IDEMPOTENT_WRITE)
        assert answer.cluster_authorized_operations == expected
    not_asked = metadata(broker, version, ask=False)
    assert not_asked.topics[0].topic_authorized_operations == NOT_REQUESTED
    if version <= 10:
        assert not_asked.cluster_authorized_operations == NOT_REQUESTED


def test_confluent_kafka_reads_them(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    described = admin.describe_topics(
        TopicCollection(["readable"]), include_authorized_operations=True
    )
    topic = described["readable"].result(15)
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS
    }  # fmt: skip
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {
        AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE
    }  # fmt: skip


def test_the_broker_was_given_acls(broker: BrokerProcess) -> None:
    """The control: without DESCRIBE on a topic, Metadata hides it (so the ACLs are live)."""
    wire = WireClient(broker.bootstrap_servers)
    try:
        request = MetadataRequest(topics=[MetadataRequestTopic(name="secret")],
                                  allow_auto_topic_creation=False)  # fmt: skip
        answer: Any = wire.request(request, 12)
    finally:
        wire.close()
    assert answer.topics[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED
