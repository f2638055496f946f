"""Admin APIs through third-party admin clients, against the real broker process.

confluent-kafka's AdminClient covers everything (each scenario in a child process, so a
librdkafka crash fails the test); kafka-python's KafkaAdminClient and aiokafka's
AIOKafkaAdminClient cover the subset they implement.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.broker.conftest import BrokerProcess, running_broker
from tests.broker.interop_helpers import (
    HEARTBEAT_MS,
    SESSION_TIMEOUT_MS,
    create_topic,
    restart_broker,
    run_isolated,
    subscribe_when_known,
    unique,
    wait_until,
)


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: each test uses topics and groups of its own."""
    yield from running_broker(tmp_path_factory.mktemp("broker") / "data")


T0 = 1_700_000_000_000  # record timestamps in the ListOffsets tests: T0 + i seconds


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _error(future: Any, timeout: float = 15) -> KafkaError | None:
    """The KafkaError a per-resource admin future failed with, or None on success."""
    try:
        future.result(timeout)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def _code(future: Any) -> int | None:
    error = _error(future)
    return None if error is None else error.code()


def _topics(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=10).topics)


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, int, bool]]:
    """name -> (value, source, is_default) of a topic's DescribeConfigs answer."""
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {
        name: (entry.value, int(getattr(entry.source, "value", entry.source)), entry.is_default)
        for name, entry in future.result(15).items()
    }


def _produce_timed(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    """``count`` records v0.. with timestamps T0 + i seconds, one partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(
            topic,
            value=b"v%d" % i,
            partition=partition,
            timestamp=T0 + i * 1000,
            on_delivery=lambda err, _: errors.append(err) if err else None,
        )
    assert producer.flush(15) == 0 and not errors, errors


# -- confluent-kafka: topics ----------------------------------------------------------------


def create_topics_scenario(bootstrap: str, prefix: str) -> None:
    admin = _admin(bootstrap)
    good, configured, validated = f"{prefix}-good", f"{prefix}-configured", f"{prefix}-validated"
    configs = {"retention.ms": "3600000", "cleanup.policy": "delete", "segment.bytes": "1048576"}
    futures = admin.create_topics(
        [
            NewTopic(good, 3, 1),
            NewTopic(configured, 2, 1, config=configs),
            NewTopic("bad name!", 1, 1),
            NewTopic(f"{prefix}-rf3", 1, 3),
            NewTopic(f"{prefix}-no-such-config", 1, 1, config={"no.such.config": "1"}),
            NewTopic(f"{prefix}-bad-value", 1, 1, config={"retention.ms": "soon"}),
            NewTopic(f"{prefix}-zero", 0, 1),
        ],
        operation_timeout=10,
    )
    errors = {name: _error(f) for name, f in futures.items()}
    assert errors[good] is None and errors[configured] is None, errors
    assert errors["bad name!"].code() == KafkaError.TOPIC_EXCEPTION  # type: ignore[union-attr]
    rf3 = errors[f"{prefix}-rf3"]
    assert rf3 is not None and rf3.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "3" in rf3.str(), rf3.str()
    for name in (f"{prefix}-no-such-config", f"{prefix}-bad-value"):
        error = errors[name]
        assert error is not None and error.code() == KafkaError.INVALID_CONFIG, (name, error)
    assert "no.such.config" in errors[f"{prefix}-no-such-config"].str()  # type: ignore[union-attr]
    assert "retention.ms" in errors[f"{prefix}-bad-value"].str()  # type: ignore[union-attr]
    zero = errors[f"{prefix}-zero"]
    assert zero is not None and zero.code() == KafkaError.INVALID_PARTITIONS

    (again,) = admin.create_topics([NewTopic(good, 1, 1)]).values()
    assert _code(again) == KafkaError.TOPIC_ALREADY_EXISTS
    (checked,) = admin.create_topics([NewTopic(validated, 2, 1)], validate_only=True).values()
    assert _code(checked) is None
    assert _topics(admin) >= {good, configured}
    assert not _topics(admin) & {validated, f"{prefix}-rf3", f"{prefix}-zero", "bad name!"}

    (described,) = admin.describe_topics(TopicCollection([good])).values()
    description = described.result(15)
    assert [p.id for p in description.partitions] == [0, 1, 2]
    assert all(
        p.leader.id == 0 and [r.id for r in p.replicas] == [0] for p in description.partitions
    )
    assert not description.is_internal

    overrides = {k: v for k, (v, source, _) in _configs(admin, configured).items() if source == 1}
    assert overrides == configs
    defaults = _configs(admin, good)
    assert defaults["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value, True)


@pytest.mark.timeout(60)
def test_confluent_create_topics(broker_process: BrokerProcess) -> None:
    run_isolated(create_topics_scenario, broker_process.bootstrap_servers, unique("c"))


def duplicate_names_scenario(bootstrap: str, prefix: str) -> None:
    """A request naming a topic twice: the other topics go ahead, the twice-named one gets
    INVALID_REQUEST once (before the fix, kayak created it and answered it twice, and
    librdkafka failed the whole request: "Broker returned topic ... multiple times")."""
    admin = _admin(bootstrap)
    twice, once = f"{prefix}-twice", f"{prefix}-once"
    futures = admin.create_topics([NewTopic(twice, 1, 1), NewTopic(once, 1, 1), NewTopic(twice, 2)])
    assert _code(futures[once]) is None
    assert _code(futures[twice]) == KafkaError.INVALID_REQUEST
    assert once in _topics(admin) and twice not in _topics(admin)

    futures = admin.create_partitions([NewPartitions(once, 2), NewPartitions(once, 3)])
    assert _code(futures[once]) == KafkaError.INVALID_REQUEST
    futures = admin.delete_topics([once, once], operation_timeout=10)
    assert _code(futures[once]) == KafkaError.INVALID_REQUEST
    assert once in _topics(admin)


@pytest.mark.timeout(60)
def test_confluent_duplicate_topic_names_in_one_request(broker_process: BrokerProcess) -> None:
    run_isolated(duplicate_names_scenario, broker_process.bootstrap_servers, unique("c"))


def delete_and_grow_scenario(bootstrap: str, prefix: str) -> None:
    admin = _admin(bootstrap)
    doomed, growing = f"{prefix}-doomed", f"{prefix}-growing"
    for future in admin.create_topics([NewTopic(doomed, 2, 1), NewTopic(growing, 2, 1)]).values():
        assert _code(future) is None
    _produce_timed(bootstrap, doomed, 5)

    futures = admin.delete_topics([doomed, f"{prefix}-never-was"], operation_timeout=10)
    assert _code(futures[doomed]) is None
    assert _code(futures[f"{prefix}-never-was"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert doomed not in _topics(admin)
    # A topic created again under the same name starts empty.
    (future,) = admin.create_topics([NewTopic(doomed, 1, 1)]).values()
    assert _code(future) is None
    (latest,) = admin.list_offsets({TopicPartition(doomed, 0): OffsetSpec.latest()}).values()
    assert latest.result(15).offset == 0

    futures = admin.create_partitions(
        [NewPartitions(growing, 5), NewPartitions(f"{prefix}-never-was", 3)]
    )
    assert _code(futures[growing]) is None
    assert _code(futures[f"{prefix}-never-was"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    wait_until(
        lambda: len(admin.list_topics(growing, timeout=10).topics[growing].partitions) == 5,
        10,
        "metadata to show 5 partitions",
    )
    (shrink,) = admin.create_partitions([NewPartitions(growing, 3)]).values()
    assert _code(shrink) == KafkaError.INVALID_PARTITIONS
    # The new partitions take records.
    producer = Producer({"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 500})
    reports: list[Any] = []
    producer.produce(
        growing, value=b"new", partition=4, on_delivery=lambda e, m: reports.append((e, m))
    )
    assert producer.flush(15) == 0
    ((error, message),) = reports
    assert error is None and (message.partition(), message.offset()) == (4, 0)


@pytest.mark.timeout(60)
def test_confluent_delete_topics_and_create_partitions(broker_process: BrokerProcess) -> None:
    run_isolated(delete_and_grow_scenario, broker_process.bootstrap_servers, unique("c"))


# -- confluent-kafka: configs ---------------------------------------------------------------


def configs_scenario(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    (created,) = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"retention.ms": "3600000", "cleanup.policy": "delete"})]
    ).values()
    assert _code(created) is None
    before = _configs(admin, topic)
    assert before["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert before["max.message.bytes"][1:] == (ConfigSource.DEFAULT_CONFIG.value, True)

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    assert _code(future) is None
    after = _configs(admin, topic)
    assert after["max.message.bytes"] == ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert after["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value, True)
    assert after["cleanup.policy"] == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)

    # The new limit is enforced: a 5000-byte record is refused, a small one still goes in.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    reports: list[Any] = []
    producer.produce(topic, value=b"x" * 5000, on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0
    producer.produce(topic, value=b"small", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, reports
    assert reports[1] is None, reports

    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("segment.bytes", "huge", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([bad]).values()
    assert _code(future) == KafkaError.INVALID_CONFIG
    assert _configs(admin, topic) == after, "a refused change altered something"

    missing = ConfigResource(
        ResourceType.TOPIC,
        f"{topic}-missing",
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([missing]).values()
    assert _code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART
    (future,) = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, f"{topic}-missing")]
    ).values()
    assert _code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Legacy AlterConfigs replaces the whole set of overrides.
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.bytes": "1048576"})
    (future,) = admin.alter_configs([legacy]).values()
    assert _code(future) is None
    replaced = _configs(admin, topic)
    overrides = {k: v for k, (v, source, _) in replaced.items() if source == 1}
    assert overrides == {"segment.bytes": "1048576"}
    assert replaced["max.message.bytes"] == ("1048588", ConfigSource.DEFAULT_CONFIG.value, True)

    # The broker's own defaults go by Kafka's broker property names.
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    broker = {name: entry.value for name, entry in future.result(15).items()}
    assert broker["log.retention.ms"] == "604800000", broker
    assert broker["log.segment.bytes"] == "1073741824", broker
    assert broker["message.max.bytes"] == "1048588", broker
    assert "retention.ms" not in broker and "segment.bytes" not in broker, broker


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_describe_and_alter_configs(broker_process: BrokerProcess) -> None:
    run_isolated(configs_scenario, broker_process.bootstrap_servers, unique("c-configs"))


# -- confluent-kafka: DeleteRecords and ListOffsets -----------------------------------------


def offsets_scenario(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    _produce_timed(bootstrap, topic, 30)
    tp = TopicPartition(topic, 0)

    def offset(spec: Any) -> tuple[int, int]:
        (future,) = admin.list_offsets({tp: spec}).values()
        info = future.result(15)
        return info.offset, info.timestamp

    assert offset(OffsetSpec.earliest())[0] == 0
    assert offset(OffsetSpec.latest())[0] == 30
    assert offset(OffsetSpec.for_timestamp(T0 + 10_500)) == (11, T0 + 11_000)
    assert offset(OffsetSpec.for_timestamp(T0 + 10_000)) == (10, T0 + 10_000)
    assert offset(OffsetSpec.for_timestamp(T0 + 99_000))[0] == -1
    assert offset(OffsetSpec.max_timestamp()) == (29, T0 + 29_000)

    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 12)]).values()
    assert deleted.result(15).low_watermark == 12
    assert offset(OffsetSpec.earliest())[0] == 12
    assert offset(OffsetSpec.latest())[0] == 30
    assert offset(OffsetSpec.for_timestamp(T0))[0] == 12
    (beyond,) = admin.delete_records([TopicPartition(topic, 0, 31)]).values()
    assert _code(beyond) == KafkaError.OFFSET_OUT_OF_RANGE

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        assert consumer.get_watermark_offsets(tp, 10) == (12, 30)
        consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        msg = None
        deadline = time.monotonic() + 15
        while msg is None:
            assert time.monotonic() < deadline, "nothing consumed"
            msg = consumer.poll(0.2)
        assert msg.error() is None, msg.error()
        assert (msg.offset(), msg.value()) == (12, b"v12")
        # A consumer positioned below the new start offset gets OFFSET_OUT_OF_RANGE and
        # resets (auto.offset.reset=earliest) to the new start rather than being served.
        consumer.assign([TopicPartition(topic, 0, 3)])
        msg = None
        while msg is None:
            assert time.monotonic() < deadline, "nothing consumed after the reset"
            msg = consumer.poll(0.2)
        assert msg.error() is None, msg.error()
        assert (msg.offset(), msg.value()) == (12, b"v12")
    finally:
        consumer.close()


@pytest.mark.timeout(60)
def test_confluent_delete_records_and_list_offsets(broker_process: BrokerProcess) -> None:
    topic = unique("c-offsets")
    create_topic(broker_process.bootstrap_servers, topic, 1)
    run_isolated(offsets_scenario, broker_process.bootstrap_servers, topic)


# -- confluent-kafka: consumer groups -------------------------------------------------------


def groups_scenario(bootstrap: str, topic: str, group: str) -> None:
    admin = _admin(bootstrap)
    _produce_timed(bootstrap, topic, 4, partition=0)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"member-{i}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        for i in range(2)
    ]
    for consumer in consumers:
        consumer.subscribe([topic])

    def both_assigned() -> bool:
        for consumer in consumers:
            consumer.poll(0.05)
        return all(len(c.assignment()) == 2 for c in consumers)

    wait_until(both_assigned, 30, "both members to hold two partitions")
    (owner,) = [c for c in consumers if any(tp.partition == 0 for tp in c.assignment())]
    owner.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)

    listed = admin.list_consumer_groups().result(15)
    assert not listed.errors, listed.errors
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE
    assert not mine[0].is_simple_consumer_group

    described = admin.describe_consumer_groups([group, f"{group}-none"])
    description = described[group].result(15)
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor in ("range", "roundrobin")
    assert description.coordinator.id == 0
    assert sorted(m.client_id for m in description.members) == ["member-0", "member-1"]
    assert all(m.host.lstrip("/") == "127.0.0.1" for m in description.members)
    owned = [
        sorted(tp.partition for tp in m.assignment.topic_partitions) for m in description.members
    ]
    assert sorted(p for parts in owned for p in parts) == [0, 1, 2, 3] and all(
        len(o) == 2 for o in owned
    )
    unknown = described[f"{group}-none"].result(15)
    assert unknown.state == ConsumerGroupState.DEAD and not unknown.members

    (offsets,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in offsets.result(15).topic_partitions}
    assert committed == {0: 3}, committed

    (busy,) = admin.delete_consumer_groups([group]).values()
    assert _code(busy) == KafkaError.NON_EMPTY_GROUP
    for consumer in consumers:
        consumer.close()

    def empty() -> bool:
        (future,) = admin.describe_consumer_groups([group]).values()
        return bool(future.result(15).state == ConsumerGroupState.EMPTY)

    wait_until(empty, 15, "the group to be empty")
    # Offsets of an empty group can be set by an admin.
    (altered,) = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 1, 2)])]
    ).values()
    assert _code(altered) is None
    (offsets,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in offsets.result(15).topic_partitions}
    assert committed == {0: 3, 1: 2}, committed

    results = admin.delete_consumer_groups([group, f"{group}-none"])
    assert _code(results[group]) is None
    assert _code(results[f"{group}-none"]) == KafkaError.GROUP_ID_NOT_FOUND
    listed = admin.list_consumer_groups().result(15)
    assert group not in {g.group_id for g in listed.valid}
    (offsets,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
    ).values()
    assert [tp.offset for tp in offsets.result(15).topic_partitions] == [-1001], "offsets remain"


@pytest.mark.timeout(90)
def test_confluent_consumer_groups(broker_process: BrokerProcess) -> None:
    topic = unique("c-groups")
    create_topic(broker_process.bootstrap_servers, topic, 4)
    run_isolated(groups_scenario, broker_process.bootstrap_servers, topic, unique("g"), timeout=80)


# -- confluent-kafka: cluster and topic ids -------------------------------------------------


def describe_scenario(bootstrap: str, topic: str) -> tuple[str, int, str, int, str]:
    admin = _admin(bootstrap)
    cluster = admin.describe_cluster().result(15)
    (node,) = cluster.nodes
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    return (
        cluster.cluster_id,
        cluster.controller.id,
        node.host,
        node.port,
        str(future.result(15).topic_id),
    )


@pytest.mark.timeout(60)
def test_confluent_describe_cluster_and_stable_topic_ids(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique("c-described")
    create_topic(bootstrap, topic, 1)
    meta = (broker_process.data_dir / "meta.properties").read_text()
    cluster_id, controller, host, port, topic_id = run_isolated(describe_scenario, bootstrap, topic)
    assert f"cluster.id={cluster_id}\n" in meta
    assert (controller, host, port) == (0, "127.0.0.1", broker_process.port)
    restart_broker(broker_process)
    again = run_isolated(describe_scenario, broker_process.bootstrap_servers, topic)
    assert again == (cluster_id, 0, "127.0.0.1", broker_process.port, topic_id), "ids changed"


# -- kafka-python's KafkaAdminClient --------------------------------------------------------


@pytest.mark.timeout(60)
def test_kafka_python_admin(broker_process: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    bootstrap = broker_process.bootstrap_servers
    topic, group = unique("kp-admin"), unique("kp-group")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        created = admin.create_topics(
            [
                KNewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"}),
                KNewTopic("bad name!", 1, 1),
                KNewTopic(f"{topic}-rf3", 1, 3),
            ],
            raise_errors=False,
        )
        codes = {t["name"]: t["error_code"] for t in created["topics"]}
        assert codes == {topic: 0, "bad name!": 17, f"{topic}-rf3": 38}, created
        assert topic in admin.list_topics() and f"{topic}-rf3" not in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert [p["partition_index"] for p in described["partitions"]] == [0, 1]
        cluster = admin.describe_cluster()
        assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [
            (0, broker_process.port)
        ]

        admin.create_partitions({topic: KNewPartitions(3)})
        (described,) = admin.describe_topics([topic])
        assert len(described["partitions"]) == 3

        resource = KConfigResource(ConfigResourceType.TOPIC, topic)
        shown = admin.describe_configs([resource])["topic"][topic]
        assert shown["retention.ms"]["value"] == "3600000"
        assert shown["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        altered = admin.alter_configs(
            [KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})]
        )
        assert altered == {"topic": {topic: "OK"}}, altered
        shown = admin.describe_configs([resource])["topic"][topic]
        assert shown["retention.ms"]["value"] == "7200000"
        broker = admin.describe_configs(
            [KConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )["broker"]["0"]
        assert broker["log.retention.ms"]["value"] == "604800000", broker
        assert "retention.ms" not in broker, broker

        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(10):
            producer.send(topic, b"v%d" % i, partition=0)
        producer.flush(10)
        producer.close(5)
        deleted = admin.delete_records({KTopicPartition(topic, 0): 4})
        assert deleted[KTopicPartition(topic, 0)]["low_watermark"] == 4, deleted

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        subscribe_when_known(consumer, topic)
        offsets: list[int] = []
        deadline = time.monotonic() + 20
        while len(offsets) < 6:
            assert time.monotonic() < deadline, offsets
            for records in consumer.poll(timeout_ms=200).values():
                offsets.extend(r.offset for r in records)
        assert offsets == list(range(4, 10)), "the consumer did not start at the new start offset"
        consumer.commit()

        assert {"group_id": group, "protocol_type": "consumer", "group_state": "Stable"} in (
            admin.list_groups()
        )
        description = admin.describe_groups([group])[group]
        assert description["group_state"] == "Stable"
        (member,) = description["members"]
        assigned = member["member_assignment"]["assigned_partitions"]
        assert assigned == [{"topic": topic, "partitions": [0, 1, 2]}], assigned
        committed = admin.list_group_offsets({group: None})[group]
        assert committed[KTopicPartition(topic, 0)].offset == 10
        consumer.close(autocommit=False)
        assert admin.delete_groups([group, f"{group}-none"]) == {
            group: "OK",
            f"{group}-none": "GroupIdNotFoundError",
        }
        assert group not in {g["group_id"] for g in admin.list_groups()}

        result = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        assert topic not in admin.list_topics()
    finally:
        admin.close()


# -- aiokafka's AIOKafkaAdminClient ---------------------------------------------------------


@pytest.mark.timeout(60)
def test_aiokafka_admin(broker_process: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.admin import NewPartitions as ANewPartitions
    from aiokafka.admin import NewTopic as ANewTopic
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AConfigResourceType

    bootstrap = broker_process.bootstrap_servers
    topic, group = unique("aio-admin"), unique("aio-group")

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics(
                [
                    ANewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"}),
                    ANewTopic("bad name!", 1, 1),
                    ANewTopic(f"{topic}-rf3", 1, 3),
                ]
            )
            codes = {name: code for name, code, *_ in created.topic_errors}
            assert codes == {topic: 0, "bad name!": 17, f"{topic}-rf3": 38}, created
            assert topic in await admin.list_topics()
            (described,) = await admin.describe_topics([topic])
            assert [p["partition"] for p in described["partitions"]] == [0, 1]
            cluster = await admin.describe_cluster()
            assert [(b["node_id"], b["port"]) for b in cluster["brokers"]] == [
                (0, broker_process.port)
            ]

            grown = await admin.create_partitions({topic: ANewPartitions(3)})
            assert [code for _, code, _ in grown.topic_errors] == [0]

            resource = AConfigResource(AConfigResourceType.TOPIC, topic)
            (response,) = await admin.describe_configs([resource])
            ((code, _, _, _, entries),) = response.resources
            shown = {name: (value, source) for name, value, _, source, *_ in entries}
            assert code == 0 and shown["retention.ms"] == ("3600000", 1), shown
            (altered,) = await admin.alter_configs(
                [AConfigResource(AConfigResourceType.TOPIC, topic, configs={"segment.ms": "60000"})]
            )
            assert [r[0] for r in altered.resources] == [0], altered
            (response,) = await admin.describe_configs([resource])
            ((_, _, _, _, entries),) = response.resources
            shown = {name: (value, source) for name, value, _, source, *_ in entries}
            # AlterConfigs replaces every override: retention.ms is back to its default.
            assert shown["segment.ms"] == ("60000", 1) and shown["retention.ms"][1] == 5, shown

            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            try:
                for i in range(10):
                    await producer.send_and_wait(topic, b"v%d" % i, partition=0)
            finally:
                await producer.stop()
            deleted = await admin.delete_records({ATopicPartition(topic, 0): RecordsToDelete(4)})
            assert deleted == {ATopicPartition(topic, 0): 4}, deleted

            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
            )
            await consumer.start()
            try:
                offsets: list[int] = []
                deadline = time.monotonic() + 20
                while len(offsets) < 6:
                    assert time.monotonic() < deadline, offsets
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        offsets.extend(r.offset for r in records)
                assert offsets == list(range(4, 10))
                await consumer.commit()
                assert (group, "consumer") in await admin.list_consumer_groups()
                (groups,) = await admin.describe_consumer_groups([group])
                ((error, group_id, state, protocol_type, _, members),) = groups.groups
                assert (error, group_id, state, protocol_type) == (0, group, "Stable", "consumer")
                assert len(members) == 1
                committed = await admin.list_consumer_group_offsets(group)
                assert committed[ATopicPartition(topic, 0)].offset == 10
            finally:
                await consumer.stop()

            removed = await admin.delete_topics([topic])
            assert [tuple(t) for t in removed.topic_error_codes] == [(topic, 0)]
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(scenario())


# -- retention and segment roll, configured through a client --------------------------------


# The smallest segment.bytes allowed (KIP-1030) and records large enough to fill three
# segments: 52 records of ~20 KB each per segment, the last one holding 16.
SEGMENT_BYTES = 1 << 20
RECORD_PAD = 20_000
RETENTION_BYTES = 1_200_000  # less than the two newest segments: the oldest goes


def retention_value(i: int) -> bytes:
    return b"r%03d-" % i + b"x" * RECORD_PAD


def retention_scenario(bootstrap: str, topic: str) -> dict[str, Any]:
    """Create a topic with small segments and no size limit; produce 120 records of ~20 KB
    in separate batches; then give it a retention.bytes limit. Returns what was observed."""
    admin = _admin(bootstrap)
    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": "-1"}
    (created,) = admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values()
    assert _code(created) is None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(120):
        producer.produce(topic, value=retention_value(i), partition=0)
        producer.flush(10)
    tp = TopicPartition(topic, 0)

    def earliest() -> int:
        (future,) = admin.list_offsets({tp: OffsetSpec.earliest()}).values()
        return int(future.result(15).offset)

    observed: dict[str, Any] = {"before": earliest()}
    time.sleep(1.0)  # several retention checks, with nothing to delete
    observed["unlimited"] = earliest()

    limit = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "retention.bytes",
                str(RETENTION_BYTES),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    (future,) = admin.incremental_alter_configs([limit]).values()
    assert _code(future) is None
    observed["right_after_alter"] = earliest()
    wait_until(lambda: earliest() > 0, 15, "retention to move the log start offset")
    time.sleep(0.5)  # let the check finish every segment it is going to delete
    observed["after"] = earliest()

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique("r"), "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, 0, -2)])
    values: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 15
    while not values or values[-1][0] < 119:
        assert time.monotonic() < deadline, values[-3:]
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append((msg.offset(), msg.value()))
    consumer.close()
    observed["consumed"] = values
    return observed


@pytest.mark.timeout(60)
def test_retention_bytes_set_through_a_client(tmp_path: Path) -> None:
    """A retention check every 200 ms (``--retention-check-interval-ms``; Kafka's
    ``log.retention.check.interval.ms`` defaults to 5 minutes)."""
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--retention-check-interval-ms", "200"]
    ).start()
    topic = unique("retained")
    try:
        observed = run_isolated(retention_scenario, broker.bootstrap_servers, topic, timeout=50)
    finally:
        assert broker.stop() == 0
    partition_dir = tmp_path / "data" / f"{topic}-0"
    segments = sorted(partition_dir.glob("*.log"))
    assert observed["before"] == 0 and observed["unlimited"] == 0, observed
    after = observed["after"]
    assert 0 < after < 120, observed
    # Whole segments go: the new start offset is the base offset of the oldest segment left.
    assert int(segments[0].stem) == after, (segments, after)
    remaining = sum(s.stat().st_size for s in segments)
    oldest = segments[0].stat().st_size
    assert remaining - oldest < RETENTION_BYTES, "retention stopped early"
    assert len(segments) >= 2, f"segment.bytes={SEGMENT_BYTES} should have rolled the log"
    consumed = observed["consumed"]
    assert consumed == [(i, retention_value(i)) for i in range(after, 120)]
