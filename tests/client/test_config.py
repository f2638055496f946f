"""Client configuration: Kafka's names and defaults, strict checking, Java's cross-rules."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from kayak.client.config import (
    ADMIN,
    COMMON,
    CONSUMER,
    LIBRDKAFKA_ALIASES,
    LIBRDKAFKA_NO_EQUIVALENT,
    PRODUCER,
    AdminConfig,
    ClientConfig,
    ConfigProperty,
    ConsumerConfig,
    ProducerConfig,
    ValueKind,
    parse_bootstrap_servers,
)
from kayak.client.partitioner import DefaultPartitioner, RoundRobinPartitioner
from kayak.errors import ConfigError, KayakError

BOOTSTRAP = {"bootstrap.servers": "localhost:9092"}


def producer(**settings: Any) -> ProducerConfig:
    return ProducerConfig.from_user(BOOTSTRAP, **settings)


def consumer(**settings: Any) -> ConsumerConfig:
    return ConsumerConfig.from_user(BOOTSTRAP, **settings)


# --------------------------------------------------------------------------------------------
# The schema tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [ProducerConfig, ConsumerConfig, AdminConfig])
def test_every_schema_property_has_a_typed_field_and_back(config_class: type[ClientConfig]) -> None:
    field_names = {f.name for f in dataclasses.fields(config_class)} - {"explicitly_set"}
    assert field_names == {prop.attr for prop in config_class.SCHEMA.values()}


def test_common_properties_are_in_every_schema() -> None:
    for schema in (PRODUCER, CONSUMER, ADMIN):
        assert set(COMMON) <= set(schema)
    assert all(prop.doc for schema in (PRODUCER, CONSUMER, ADMIN) for prop in schema.values())


def test_every_default_passes_its_own_check() -> None:
    for schema in (PRODUCER, CONSUMER, ADMIN):
        for prop in schema.values():
            if prop.default is not None:
                assert prop.convert(prop.default) == prop.default, prop.name


# Apache Kafka 4.x ProducerConfig / ConsumerConfig / AdminClientConfig / CommonClientConfigs.
JAVA_DEFAULTS: dict[str, dict[str, object]] = {
    "common": {
        "request.timeout.ms": 30_000,
        "metadata.max.age.ms": 300_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 1_000,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 1_000,
        "socket.connection.setup.timeout.ms": 10_000,
        "socket.connection.setup.timeout.max.ms": 30_000,
        "security.protocol": "PLAINTEXT",
    },
    "producer": {
        "connections.max.idle.ms": 540_000,
        "acks": -1,
        "linger.ms": 5,
        "batch.size": 16_384,
        "buffer.memory": 33_554_432,
        "max.block.ms": 60_000,
        "max.request.size": 1_048_576,
        "compression.type": "none",
        "retries": 2_147_483_647,
        "delivery.timeout.ms": 120_000,
        "max.in.flight.requests.per.connection": 5,
        "enable.idempotence": True,
        "transactional.id": None,
        "transaction.timeout.ms": 60_000,
    },
    "consumer": {
        "connections.max.idle.ms": 540_000,
        "group.id": None,
        "group.instance.id": None,
        "auto.offset.reset": "latest",
        "auto.commit.interval.ms": 5_000,
        "fetch.min.bytes": 1,
        "fetch.max.bytes": 52_428_800,
        "fetch.max.wait.ms": 500,
        "max.partition.fetch.bytes": 1_048_576,
        "max.poll.records": 500,
        "max.poll.interval.ms": 300_000,
        "session.timeout.ms": 45_000,
        "heartbeat.interval.ms": 3_000,
        "partition.assignment.strategy": ("range", "cooperative-sticky"),
        "isolation.level": "read_uncommitted",
        "check.crcs": True,
        "client.rack": "",
        "default.api.timeout.ms": 60_000,
    },
    "admin": {
        "connections.max.idle.ms": 300_000,
        "retries": 2_147_483_647,
        "default.api.timeout.ms": 60_000,
    },
}


@pytest.mark.parametrize(
    ("config_class", "kind"),
    [(ProducerConfig, "producer"), (ConsumerConfig, "consumer"), (AdminConfig, "admin")],
)
def test_defaults_are_javas(config_class: type[ClientConfig], kind: str) -> None:
    cfg = config_class.from_user(BOOTSTRAP)
    for name, expected in {**JAVA_DEFAULTS["common"], **JAVA_DEFAULTS[kind]}.items():
        assert cfg[name] == expected, name


def test_kayak_defaults_and_extensions() -> None:
    cfg = consumer()
    assert cfg.client_id == "kayak"
    assert cfg.fetch_pipeline_depth == 2
    assert cfg.prefetch_max_bytes == 64 * 1024 * 1024
    extensions = {name for name, prop in CONSUMER.items() if prop.kayak_extension}
    assert extensions == {"fetch.pipeline.depth", "prefetch.max.bytes"}
    assert producer().partitioner == "default"


# --------------------------------------------------------------------------------------------
# Giving settings, reading them back
# --------------------------------------------------------------------------------------------


def test_mapping_and_keywords_are_the_same_settings() -> None:
    by_name = ProducerConfig.from_user({"bootstrap.servers": "h:1", "linger.ms": 20})
    by_keyword = ProducerConfig.from_user(bootstrap_servers="h:1", linger_ms=20)
    both = ProducerConfig.from_user({"bootstrap.servers": "h:1"}, linger_ms=20)
    assert by_name == by_keyword == both
    assert by_name.linger_ms == by_name["linger.ms"] == 20
    assert by_name.explicitly_set == {"bootstrap.servers", "linger.ms"}


def test_the_same_setting_twice_must_agree() -> None:
    assert producer(**{"linger_ms": "7"}).linger_ms == 7
    same = ProducerConfig.from_user({**BOOTSTRAP, "linger.ms": 7}, linger_ms="7")
    assert same.linger_ms == 7
    with pytest.raises(ConfigError, match="given twice with different values") as info:
        ProducerConfig.from_user({**BOOTSTRAP, "linger.ms": 7}, linger_ms=8)
    assert info.value.name == "linger.ms"


def test_config_is_frozen_and_readable_as_a_dict() -> None:
    cfg = producer()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.linger_ms = 1  # type: ignore[misc]
    as_dict = cfg.as_dict()
    assert list(as_dict) == list(PRODUCER)
    assert as_dict["bootstrap.servers"] == (("localhost", 9092),)
    with pytest.raises(KeyError, match="not a producer setting"):
        cfg["group.id"]
    assert hash(cfg) == hash(producer())


def test_a_config_that_is_not_a_mapping_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="mapping"):
        ProducerConfig.from_user([("bootstrap.servers", "h:1")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "attr", "expected"),
    [
        ({"linger.ms": "5"}, "linger_ms", 5),
        ({"linger.ms": " 250 "}, "linger_ms", 250),
        ({"enable.idempotence": "true"}, "enable_idempotence", True),
        ({"enable.idempotence": "FALSE"}, "enable_idempotence", False),
        ({"compression.type": "ZSTD"}, "compression_type", "zstd"),
        ({"client.id": "  billing  "}, "client_id", "billing"),
        ({"transactional.id": "tx-1"}, "transactional_id", "tx-1"),
        ({"retries": "0", "enable.idempotence": "false"}, "retries", 0),
    ],
)
def test_strings_from_properties_files_are_accepted(
    settings: dict[str, object], attr: str, expected: object
) -> None:
    assert getattr(ProducerConfig.from_user({**BOOTSTRAP, **settings}), attr) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("linger.ms", -1, r"-1 \(int\) is out of range; expected an integer >= 0"),
        ("batch.size", 2**31, r"is out of range; expected an integer from 0 to 2147483647"),
        ("linger.ms", 5.0, r"5.0 \(float\) is not an integer"),
        ("linger.ms", True, r"True \(bool\) is not an integer"),
        ("linger.ms", "5ms", r"'5ms' is not an integer"),
        ("enable.idempotence", "yes", r"'yes' is not a boolean; expected true or false"),
        ("enable.idempotence", 1, r"1 \(int\) is not a boolean"),
        ("compression.type", "lz5", r"'lz5' is not allowed; expected one of none, gzip, snappy"),
        ("client.id", 7, r"7 \(int\) is not a string"),
        ("client.id", None, r"must be set to a string, not None"),
        ("max.in.flight.requests.per.connection", 0, r"expected an integer from 1 to 2147483647"),
        ("acks", "2", r"'2' is not allowed; expected one of all, -1, 0, 1"),
        ("acks", True, r"True \(bool\) is not allowed"),
        ("transactional.id", "  ", r"is empty \(leave the property unset instead\)"),
    ],
)
def test_bad_values_name_the_property_the_value_and_what_is_allowed(
    name: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        ProducerConfig.from_user({**BOOTSTRAP, name: value})
    assert info.value.name == name
    assert isinstance(info.value, ValueError) and isinstance(info.value, KayakError)
    assert str(info.value).startswith(f"invalid configuration {name!r}: ")


@pytest.mark.parametrize(("value", "expected"), [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1),
                                                 ("0", 0), (0, 0), ("1", 1), (1, 1)])  # fmt: skip
def test_acks_is_normalised_to_the_wire_value(value: object, expected: int) -> None:
    assert producer(acks=value, enable_idempotence=False).acks == expected


# --------------------------------------------------------------------------------------------
# Names: unknown, for another client, librdkafka's
# --------------------------------------------------------------------------------------------


def test_unknown_names_suggest_the_closest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"is not a producer setting; did you mean 'linger.ms'"):
        ProducerConfig.from_user({**BOOTSTRAP, "linger.msec": 5})
    with pytest.raises(ConfigError, match=r"did you mean 'linger_ms'") as info:
        producer(lingr_ms=5)
    assert info.value.name == "lingr_ms"
    with pytest.raises(ConfigError, match=r"'no.such.thing': is not a consumer setting$"):
        ConsumerConfig.from_user({**BOOTSTRAP, "no.such.thing": 1})


def test_a_setting_of_another_client_kind_says_so() -> None:
    with pytest.raises(ConfigError, match="is a consumer setting, not a producer one"):
        producer(group_id="g")
    with pytest.raises(ConfigError, match="is a producer setting, not a consumer one"):
        consumer(linger_ms=5)
    with pytest.raises(ConfigError, match="is a consumer and admin setting, not a producer"):
        producer(default_api_timeout_ms=5)


@pytest.mark.parametrize(
    ("alias", "value", "attr", "expected"),
    [
        ("queue.buffering.max.ms", 25, "linger_ms", 25),
        ("compression.codec", "lz4", "compression_type", "lz4"),
        ("socket.timeout.ms", 45_000, "request_timeout_ms", 45_000),
        ("message.timeout.ms", 200_000, "delivery_timeout_ms", 200_000),
        ("request.required.acks", "all", "acks", -1),
        ("message.send.max.retries", 10, "retries", 10),
        ("partitioner.class", "round_robin", "partitioner", "round_robin"),
    ],
)
def test_librdkafka_aliases_set_the_kafka_property(
    alias: str, value: object, attr: str, expected: object
) -> None:
    cfg = ProducerConfig.from_user({**BOOTSTRAP, alias: value})
    assert getattr(cfg, attr) == expected
    assert LIBRDKAFKA_ALIASES[alias] in cfg.explicitly_set


def test_consumer_librdkafka_aliases() -> None:
    cfg = consumer(fetch_wait_max_ms=100, fetch_message_max_bytes=4096)
    assert (cfg.fetch_max_wait_ms, cfg.max_partition_fetch_bytes) == (100, 4096)


def test_an_alias_and_its_kafka_name_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"queue.buffering.max.ms=3 and linger.ms=4"):
        ProducerConfig.from_user({**BOOTSTRAP, "queue.buffering.max.ms": 3, "linger.ms": 4})


def test_an_alias_for_another_client_kind_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"stands for 'fetch\.max\.wait\.ms', not a producer"):
        ProducerConfig.from_user({**BOOTSTRAP, "fetch.wait.max.ms": 100})


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_NO_EQUIVALENT))
def test_librdkafka_names_without_equivalent_explain_what_to_use(name: str) -> None:
    with pytest.raises(ConfigError, match="has no kayak equivalent") as info:
        ProducerConfig.from_user({**BOOTSTRAP, name: 1})
    assert info.value.name == name
    assert "batch.size" in str(info.value) or name != "batch.num.messages"


def test_message_max_bytes_points_at_max_request_size() -> None:
    with pytest.raises(ConfigError, match=r"max\.request\.size"):
        producer(message_max_bytes=1_000_000)


# --------------------------------------------------------------------------------------------
# bootstrap.servers and security.protocol
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost:9092", [("localhost", 9092)]),
        (" a:1 , b.example.com:2 ,", [("a", 1), ("b.example.com", 2)]),
        (["a:1", "my_host:2"], [("a", 1), ("my_host", 2)]),
        ([("a", 1), "b:2"], [("a", 1), ("b", 2)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("[2001:db8::7348]:5678,10.0.0.1:9092", [("2001:db8::7348", 5678), ("10.0.0.1", 9092)]),
        ("[fe80::b1da:69ca:57f7:63d8%3]:5678", [("fe80::b1da:69ca:57f7:63d8%3", 5678)]),
        ("PLAINTEXT://broker:9092", [("broker", 9092)]),
        ("SASL_SSL://broker:9093", [("broker", 9093)]),
    ],
)
def test_bootstrap_servers_are_parsed(value: object, expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap_servers(value) == expected
    assert ProducerConfig.from_user(bootstrap_servers=value).bootstrap_servers == tuple(expected)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("localhost", "has no port; expected host:port"),
        ("localhost:", "has port ''"),
        ("localhost:0", "has port '0'; a port is a number from 1 to 65535"),
        ("localhost:65536", "a port is a number from 1 to 65535"),
        ("localhost:90a", "has port '90a'"),
        (":9092", "has no valid host name"),
        ("bad host:9092", "has no valid host name"),
        ("::1:9092", r"looks like an IPv6 address: write it as \[address\]:port"),
        ("[::1:9092", "has no ']'"),
        ("[::1]", r"has no port; expected \[address\]:port"),
        ("[nope]:9092", "is not an IPv6 address"),
        ("TLS://broker:9093", "is not a Kafka listener"),
        ("", "is empty"),
        (" , ", "is empty"),
        ([], "is empty"),
        ("a:1,a:1", "lists a:1 twice"),
        ([("a", "1")], "is not a 'host:port' string or a \\(host, port\\) pair"),
        (9092, "expected 'host:port,...' or a list"),
    ],
)
def test_bad_bootstrap_servers_are_explained(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_bootstrap_servers(value)
    assert info.value.name == "bootstrap.servers"


def test_bootstrap_servers_are_required() -> None:
    for config_class in (ProducerConfig, ConsumerConfig, AdminConfig):
        with pytest.raises(ConfigError, match="is required") as info:
            config_class.from_user()
        assert info.value.name == "bootstrap.servers"


def test_security_protocols_are_kafkas_four() -> None:
    assert producer(security_protocol="plaintext").security_protocol == "PLAINTEXT"
    assert producer(security_protocol="ssl").security_protocol == "SSL"
    # (SASL_* protocols need credentials: tests/client/test_security_config.py)
    with pytest.raises(ConfigError, match="is not a security protocol"):
        producer(security_protocol="TLS")


# --------------------------------------------------------------------------------------------
# Producer rules (Java's)
# --------------------------------------------------------------------------------------------


def test_idempotence_is_silently_off_when_not_asked_for_and_acks_is_not_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="kayak.client.config"):
        cfg = producer(acks=1)
    assert (cfg.acks, cfg.enable_idempotence) == (1, False)
    assert "idempotence disabled because acks=1" in caplog.text
    assert producer(retries=0).enable_idempotence is False


def test_explicit_idempotence_conflicting_with_acks_or_retries_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"is 1, but the idempotent producer .* needs all") as e:
        producer(acks="1", enable_idempotence=True)
    assert e.value.name == "acks"
    with pytest.raises(ConfigError, match="needs more than 0") as e:
        producer(retries=0, enable_idempotence="true")
    assert e.value.name == "retries"
    assert producer(acks=0, enable_idempotence=False).acks == 0


def test_idempotence_allows_at_most_five_requests_in_flight() -> None:
    with pytest.raises(ConfigError, match="allows at most 5") as info:
        producer(max_in_flight_requests_per_connection=6)
    assert info.value.name == "max.in.flight.requests.per.connection"
    relaxed = producer(max_in_flight_requests_per_connection=6, enable_idempotence=False)
    assert relaxed.max_in_flight_requests_per_connection == 6
    # Idempotence already off because of acks=1: nothing left to protect.
    assert producer(acks=1, max_in_flight_requests_per_connection=10).enable_idempotence is False


def test_transactions_need_idempotence() -> None:
    assert producer(transactional_id="tx").enable_idempotence is True
    with pytest.raises(ConfigError, match="needs the idempotent producer") as info:
        producer(transactional_id="tx", acks=1)
    assert info.value.name == "transactional.id"


def test_delivery_timeout_must_cover_linger_and_request_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert producer(delivery_timeout_ms=30_005).delivery_timeout_ms == 30_005
    with pytest.raises(ConfigError, match=r"less than linger\.ms \+ request\.timeout\.ms = 30005"):
        producer(delivery_timeout_ms=30_004)
    # Not set explicitly: raised to the floor with a warning, as Java does.
    with caplog.at_level(logging.WARNING, logger="kayak.client.config"):
        cfg = producer(linger_ms=100_000, request_timeout_ms=60_000)
    assert cfg.delivery_timeout_ms == 160_000
    assert "delivery.timeout.ms defaults to 120000 ms" in caplog.text


def test_partitioner_setting() -> None:
    assert producer(partitioner="Murmur2_Random").partitioner == "murmur2_random"
    java = "org.apache.kafka.clients.producer.RoundRobinPartitioner"
    cfg = ProducerConfig.from_user({**BOOTSTRAP, "partitioner.class": java})
    assert cfg.partitioner == "round_robin"
    assert isinstance(cfg.make_partitioner(), RoundRobinPartitioner)
    assert cfg.make_partitioner() is not cfg.make_partitioner()
    assert isinstance(producer().make_partitioner(), DefaultPartitioner)

    def custom(topic: str, key: bytes | None, n: int, available: object) -> int:
        return 0

    assert producer(partitioner=custom).partitioner is custom
    with pytest.raises(ConfigError, match="unknown partitioner 'crc'") as info:
        producer(partitioner="crc")
    assert info.value.name == "partitioner"
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig.from_user({**BOOTSTRAP, "partitioner.class": "random"}, partitioner="sticky")


# --------------------------------------------------------------------------------------------
# Consumer and admin rules
# --------------------------------------------------------------------------------------------


def test_heartbeat_must_be_shorter_than_the_session() -> None:
    assert consumer(session_timeout_ms=10_000, heartbeat_interval_ms=3_000).session_timeout_ms
    with pytest.raises(ConfigError, match=r"is not lower than session\.timeout\.ms") as info:
        consumer(session_timeout_ms=3_000)
    assert info.value.name == "heartbeat.interval.ms"


def test_auto_commit_needs_a_group() -> None:
    assert consumer(group_id="g").enable_auto_commit is True
    assert consumer().enable_auto_commit is False  # no group: nothing to commit to
    assert consumer(enable_auto_commit=False).enable_auto_commit is False
    with pytest.raises(ConfigError, match=r"cannot be true without a group\.id"):
        consumer(enable_auto_commit=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("range", ("range",)),
        ("roundrobin, Cooperative-Sticky", ("roundrobin", "cooperative-sticky")),
        (["cooperative-sticky"], ("cooperative-sticky",)),
        (
            "org.apache.kafka.clients.consumer.RangeAssignor,"
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            ("range", "cooperative-sticky"),
        ),
    ],
)
def test_assignment_strategies(value: object, expected: tuple[str, ...]) -> None:
    assert consumer(partition_assignment_strategy=value).partition_assignment_strategy == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [("sticky", "not an assignor kayak has"), ("range,range", "names range twice"),
     ("", "is empty"), ([1], "holds something other than strings")],
)  # fmt: skip
def test_bad_assignment_strategies(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        consumer(partition_assignment_strategy=value)
    assert info.value.name == "partition.assignment.strategy"


def test_consumer_enums_and_group_instance_id() -> None:
    cfg = consumer(isolation_level="READ_COMMITTED", auto_offset_reset="earliest")
    assert (cfg.isolation_level, cfg.auto_offset_reset) == ("read_committed", "earliest")
    with pytest.raises(ConfigError, match="expected one of latest, earliest, none"):
        consumer(auto_offset_reset="smallest")
    assert consumer(group_id="g", group_instance_id="pod-1").group_instance_id == "pod-1"
    with pytest.raises(ConfigError, match="is empty"):
        consumer(group_instance_id="")
    with pytest.raises(ConfigError, match="expected an integer from 1 to"):
        consumer(fetch_pipeline_depth=0)


def test_admin_api_timeout_must_cover_the_request_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ConfigError, match=r"less than request\.timeout\.ms"):
        AdminConfig.from_user(BOOTSTRAP, default_api_timeout_ms=10_000)
    with caplog.at_level(logging.WARNING, logger="kayak.client.config"):
        cfg = AdminConfig.from_user(BOOTSTRAP, request_timeout_ms=90_000)
    assert cfg.default_api_timeout_ms == 90_000
    assert "default.api.timeout.ms defaults to 60000 ms" in caplog.text


# --------------------------------------------------------------------------------------------
# Common rules
# --------------------------------------------------------------------------------------------


def test_reconnect_backoff_alone_makes_it_constant(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kayak.client.config"):
        cfg = consumer(reconnect_backoff_ms=200)
    assert (cfg.reconnect_backoff_ms, cfg.reconnect_backoff_max_ms) == (200, 200)
    assert "constant 200 ms backoff" in caplog.text
    both = consumer(reconnect_backoff_ms=200, reconnect_backoff_max_ms=5_000)
    assert both.reconnect_backoff_max_ms == 5_000


def test_retry_backoff_above_its_cap_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kayak.client.config"):
        cfg = producer(retry_backoff_ms=2_000)
    assert cfg.retry_backoff_ms == 2_000
    assert "retry.backoff.ms (2000) is greater than retry.backoff.max.ms (1000)" in caplog.text


def test_config_property_describes_what_it_allows() -> None:
    prop = ConfigProperty("x.y", ValueKind.INT, 1, "doc", minimum=1, maximum=10)
    assert prop.attr == "x_y"
    assert prop.allowed() == "an integer from 1 to 10"
    assert prop.convert("10") == 10
    with pytest.raises(ConfigError, match="out of range"):
        prop.convert(11)
