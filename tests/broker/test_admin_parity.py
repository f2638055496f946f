"""Kafka parity of the admin APIs, through confluent-kafka's AdminClient, Producer and Consumer
(and kafka-python for OffsetDelete, which confluent-kafka does not expose), against one real
broker process shared by the module.

Topic configs: every Kafka 3.x/4.x topic config is accepted, stored and described, checked
with Kafka's types and ranges; timestamps are enforced on produce and compression.type
recompresses. Broker configs: described with Kafka's names, read-only ones refused as Kafka
refuses them. Offsets: commits and OffsetDelete for unknown partitions, GROUP_SUBSCRIBED_TO_TOPIC.
Replica assignments, authorized operations, and KIP-848 consumers failing at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kayak.broker.log.config_defs import TOPIC_CONFIGS
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
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import stored_batches, unique, wait_until
from tests.security.threaded_broker import ThreadedBroker

DYNAMIC_TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
STATIC_BROKER = ConfigSource.STATIC_BROKER_CONFIG.value

# Configs tools and infrastructure-as-code pass routinely, with legal non-default values.
ROUTINE_CONFIGS = {
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "true",
    "message.format.version": "2.8-IV1",
    "leader.replication.throttled.replicas": "0:0",
    "follower.replication.throttled.replicas": "*",
    "delete.retention.ms": "1000",
    "min.compaction.lag.ms": "5",
    "max.compaction.lag.ms": "600000",
    "min.cleanable.dirty.ratio": "0.25",
    "message.timestamp.difference.max.ms": "86400000",
    "preallocate": "true",
    "flush.messages": "10",
    "flush.ms": "1000",
    "segment.index.bytes": "4096",
    "segment.jitter.ms": "7",
    "file.delete.delay.ms": "1",
    "message.downconversion.enable": "false",
    "compression.type": "lz4",
    "compression.lz4.level": "4",
    "local.retention.ms": "-2",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("parity") / "data").start()
    yield process
    process.stop()


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def _error(future: Any) -> KafkaError | None:
    try:
        future.result(15)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def _create(admin: AdminClient, topic: NewTopic) -> KafkaError | None:
    (future,) = admin.create_topics([topic], request_timeout=15).values()
    return _error(future)


def _describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, Any]:
    resource = ConfigResource(kind, name)
    entries: dict[str, Any] = admin.describe_configs([resource])[resource].result(15)
    return entries


def _alter(admin: AdminClient, kind: ResourceType, name: str, *ops: ConfigEntry) -> Any:
    resource = ConfigResource(kind, name, incremental_configs=list(ops))
    (future,) = admin.incremental_alter_configs([resource]).values()
    return _error(future)


def _op(name: str, value: str | None, op: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


# -- topic configs ----------------------------------------------------------------------------


def test_every_kafka_topic_config_is_accepted_stored_and_described(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    topic = unique("every-config")
    assert _create(admin, NewTopic(topic, 1, 1, config=ROUTINE_CONFIGS)) is None
    described = _describe(admin, ResourceType.TOPIC, topic)
    assert set(described) == set(TOPIC_CONFIGS), "every topic config is described"
    for name, value in ROUTINE_CONFIGS.items():
        entry = described[name]
        assert (entry.value, entry.source) == (value, DYNAMIC_TOPIC), entry
    untouched = described["retention.bytes"]
    assert (untouched.value, untouched.source, untouched.is_default) == ("-1", DEFAULT, True)
    assert not any(e.is_read_only or e.is_sensitive for e in described.values())

    # Bad values are refused with INVALID_CONFIG naming the config, as are unknown names.
    for name, value in [
        ("min.insync.replicas", "0"),
        ("compression.type", "brotli"),
        ("retention.ms", "soon"),
        ("max.message.bytes", "4294967296"),  # not an INT
        ("cleanup.policy", "shred"),
        ("remote.storage.enable", "true"),  # no tiered storage: refused like Kafka's broker
        ("no.such.config", "1"),
    ]:
        error = _create(admin, NewTopic(unique("bad"), 1, 1, config={name: value}))
        assert error is not None and error.code() == KafkaError.INVALID_CONFIG, (name, error)
        assert name in error.str(), error

    # APPEND / SUBTRACT on list configs; refused on the others.
    append, subtract = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
    assert (
        _alter(admin, ResourceType.TOPIC, topic, _op("cleanup.policy", "compact", append)) is None
    )
    assert _describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete,compact"
    assert (
        _alter(admin, ResourceType.TOPIC, topic, _op("cleanup.policy", "delete", subtract)) is None
    )
    throttled = _op("leader.replication.throttled.replicas", "1:0,0:0", append)
    assert _alter(admin, ResourceType.TOPIC, topic, throttled) is None
    after = _describe(admin, ResourceType.TOPIC, topic)
    assert after["cleanup.policy"].value == "compact"
    assert after["leader.replication.throttled.replicas"].value == "0:0,1:0"
    error = _alter(admin, ResourceType.TOPIC, topic, _op("retention.ms", "1", append))
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in error.str(), error
    # The broker's log says the log cleaner takes the topic from here.
    line = f"topic {topic}: cleanup.policy=delete,compact: the log cleaner keeps"
    wait_until(lambda: line in broker.log_text(), 10, "the compaction line")


def test_timestamp_limits_and_recompression_are_honoured(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    limited, zstd = unique("ts-limited"), unique("zstd")
    limits = {
        "message.timestamp.before.max.ms": "3600000",
        "message.timestamp.after.max.ms": "60000",
    }
    assert _create(admin, NewTopic(limited, 1, 1, config=limits)) is None
    assert _create(admin, NewTopic(zstd, 1, 1, config={"compression.type": "zstd"})) is None

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "retries": 0,
         "compression.type": "none", "enable.idempotence": False}
    )  # fmt: skip
    reports: dict[str, Any] = {}
    now = int(time.time() * 1000)
    for label, timestamp in [("old", now - 2 * 3600_000), ("future", now + 600_000), ("now", now)]:
        producer.produce(
            limited, b"v", timestamp=timestamp,
            on_delivery=lambda e, m, label=label: reports.__setitem__(label, e),
        )  # fmt: skip
        producer.flush(15)
    values = [b"record-%03d " % i + b"abc" * 30 for i in range(50)]
    for value in values:
        producer.produce(zstd, value)
    assert producer.flush(15) == 0
    assert reports["old"] is not None and reports["old"].code() == KafkaError.INVALID_TIMESTAMP
    assert reports["future"] is not None
    assert reports["future"].code() == KafkaError.INVALID_TIMESTAMP
    assert reports["now"] is None, reports

    # Sent uncompressed, stored as zstd, read back intact.
    stored = stored_batches(broker.bootstrap_servers, zstd, 1)
    assert stored and {b.codec for b in stored} == {"zstd"}, stored
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("g")})
    consumer.assign([TopicPartition(zstd, 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(read) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value() or b"")
    consumer.close()
    assert read == values


# -- broker configs ---------------------------------------------------------------------------


def test_broker_configs_are_described_and_read_only_ones_refused(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    configs = _describe(admin, ResourceType.BROKER, "0")
    expected = {
        "num.partitions": "1",
        "default.replication.factor": "1",
        "auto.create.topics.enable": "true",
        "log.retention.ms": "604800000",
        "log.segment.bytes": "1073741824",
        "message.max.bytes": "1048588",
        "min.insync.replicas": "1",
        "log.cleaner.enable": "true",
    }
    assert {name: configs[name].value for name in expected} == expected
    assert configs["num.partitions"].is_read_only and not configs["log.retention.ms"].is_read_only
    # The test broker starts with group.initial.rebalance.delay.ms=0, not Kafka's 3000.
    assert configs["group.initial.rebalance.delay.ms"].source == STATIC_BROKER
    assert configs["num.io.threads"].source == DEFAULT

    SET = AlterConfigOpType.SET
    error = _alter(admin, ResourceType.BROKER, "0", _op("num.partitions", "3", SET))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: num.partitions" in error.str()
    error = _alter(admin, ResourceType.BROKER, "0", _op("log.retention.ms", "1000", SET))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert "at runtime" in error.str(), error
    # Setting what is already there changes nothing and succeeds (infrastructure-as-code).
    assert (
        _alter(admin, ResourceType.BROKER, "0", _op("log.retention.ms", "604800000", SET)) is None
    )


# -- offsets ----------------------------------------------------------------------------------


def test_offsets_of_unknown_partitions_and_offset_delete(broker: BrokerProcess) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupSubscribedToTopicError, NoError, UnknownTopicOrPartitionError

    admin = _admin(broker)
    read, other, group = unique("od-read"), unique("od-other"), unique("od-group")
    for name in (read, other):
        assert _create(admin, NewTopic(name, 2, 1)) is None

    # OffsetCommit: an unknown topic or partition is refused per partition, the rest stored.
    wanted = [TopicPartition(read, 0, 3), TopicPartition(other, 0, 4),
              TopicPartition("no-such-topic", 0, 1), TopicPartition(read, 7, 1)]  # fmt: skip
    (future,) = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, wanted)]
    ).values()
    answered = {
        (tp.topic, tp.partition): tp.error.code() if tp.error else None
        for tp in future.result(15).topic_partitions
    }
    unknown = KafkaError.UNKNOWN_TOPIC_OR_PART
    assert answered == {
        (read, 0): None, (other, 0): None, ("no-such-topic", 0): unknown, (read, 7): unknown
    }, answered  # fmt: skip

    def committed() -> dict[tuple[str, int], int]:
        (listed,) = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)]
        ).values()
        return {(tp.topic, tp.partition): tp.offset for tp in listed.result(15).topic_partitions}

    assert committed() == {(read, 0): 3, (other, 0): 4}

    # A member subscribed to `read` keeps its offsets; `other`'s go; unknown ones are refused.
    consumer: Consumer | None = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
         "enable.auto.commit": False, "session.timeout.ms": 6000}
    )  # fmt: skip
    assert consumer is not None
    consumer.subscribe([read])
    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        member = consumer
        wait_until(lambda: bool(member.poll(0.2) or member.assignment()), 20, "assignment")
        result = kp_admin.delete_group_offsets(
            group,
            [KTopicPartition(read, 0), KTopicPartition(other, 0), KTopicPartition("no-such", 0)],
        )
        assert result == {
            KTopicPartition(read, 0): GroupSubscribedToTopicError,
            KTopicPartition(other, 0): NoError,
            KTopicPartition("no-such", 0): UnknownTopicOrPartitionError,
        }, result
        assert committed() == {(read, 0): 3}
        member.close()
        consumer = None
        # The group is empty now: its offsets of `read` may go too.
        result = kp_admin.delete_group_offsets(group, [KTopicPartition(read, 0)])
        assert result == {KTopicPartition(read, 0): NoError}, result
        assert committed() == {}
    finally:
        if consumer is not None:
            consumer.close()
        kp_admin.close()


# -- replica assignment and authorized operations ---------------------------------------------


def test_replica_assignment_and_authorized_operations(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    assigned = unique("assigned")
    assert _create(admin, NewTopic(assigned, 2, replica_assignment=[[0], [0]])) is None
    for assignment in ([[1]], [[0, 0]]):
        error = _create(admin, NewTopic(unique("misassigned"), 1, replica_assignment=assignment))
        assert error is not None and error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, error

    description = admin.describe_topics(
        TopicCollection([assigned]), include_authorized_operations=True
    )[assigned].result(15)
    assert len(description.partitions) == 2
    assert set(description.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }  # fmt: skip
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert len(cluster.authorized_operations) == 7, cluster.authorized_operations


def test_authorized_operations_follow_the_acls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ThreadedBroker(data, port=0) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        (future,) = admin.create_topics([NewTopic("readable", 1, 1)]).values()
        future.result(15)
    AclStore.open(data).add(
        [
            AclBinding(
                ResourcePattern(KResourceType.TOPIC, "readable", PatternType.LITERAL),
                AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW),
            )
            for operation in (Op.READ, Op.DESCRIBE_CONFIGS)
        ]
    )  # fmt: skip
    with ThreadedBroker(data, port=0, allow_everyone_if_no_acl_found=False) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        description = admin.describe_topics(
            TopicCollection(["readable"]), include_authorized_operations=True
        )["readable"].result(15)
        # DESCRIBE is implied by READ.
        assert set(description.authorized_operations) == {
            AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS
        }  # fmt: skip
        cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
        assert not cluster.authorized_operations


# -- KIP-848 ----------------------------------------------------------------------------------


def test_new_consumer_group_protocol_fails_at_once(broker: BrokerProcess) -> None:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("kip848"),
         "group.protocol": "consumer"}
    )  # fmt: skip
    try:
        consumer.subscribe([unique("kip848-topic")])
        deadline = time.monotonic() + 10
        error = None
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None, "a group.protocol=consumer consumer waited in silence"
        assert error.code() == KafkaError._FATAL
        assert "ConsumerGroupHeartbeat" in error.str()
        assert "group.protocol=consumer: refused" in broker.log_text()
    finally:
        consumer.close()
