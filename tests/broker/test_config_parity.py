"""Config answers as a Kafka 3.x broker gives them, tried with confluent-kafka's AdminClient
on a real broker process: dynamic broker configs kayak does not use (and custom ones) are
accepted and described; a legacy ``message.format.version`` is accepted and ignored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kayak.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import unique
from tests.broker.wire import WireClient

pytestmark = pytest.mark.timeout(90)

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
KERBEROS = "sasl.kerberos.min.time.before.relogin"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("config-parity") / "data").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def error_of(future: Any) -> KafkaError | None:
    try:
        future.result(15)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def incremental(admin: AdminClient, kind: ResourceType, name: str, *ops: ConfigEntry) -> Any:
    resource = ConfigResource(kind, name, incremental_configs=list(ops))
    (future,) = admin.incremental_alter_configs([resource]).values()
    return error_of(future)


def legacy(admin: AdminClient, kind: ResourceType, name: str, configs: dict[str, str]) -> Any:
    (future,) = admin.alter_configs([ConfigResource(kind, name, set_config=configs)]).values()
    return error_of(future)


def op(name: str, value: str | None, operation: AlterConfigOpType = SET) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=operation)


def described(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, Any]:
    resource = ConfigResource(kind, name)
    entries: dict[str, Any] = admin.describe_configs([resource])[resource].result(15)
    return entries


def test_a_dynamic_broker_config_kayak_does_not_use_is_accepted(admin: AdminClient) -> None:
    assert legacy(admin, ResourceType.BROKER, "0", {KERBEROS: "60000"}) is None
    entry = described(admin, ResourceType.BROKER, "0")[KERBEROS]
    assert (entry.value, entry.source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert incremental(admin, ResourceType.BROKER, "0", op(KERBEROS, "90000")) is None
    assert described(admin, ResourceType.BROKER, "0")[KERBEROS].value == "90000"
    # Thread pools kayak does not have are the same kind of config.
    assert incremental(admin, ResourceType.BROKER, "0", op("num.io.threads", "16")) is None
    assert described(admin, ResourceType.BROKER, "0")["num.io.threads"].value == "16"
    assert incremental(admin, ResourceType.BROKER, "0", op(KERBEROS, None, DELETE)) is None
    assert KERBEROS not in described(admin, ResourceType.BROKER, "0")


def test_broker_configs_kafka_refuses_are_refused(admin: AdminClient) -> None:
    error = incremental(admin, ResourceType.BROKER, "0", op(KERBEROS, "soon"))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert KERBEROS in error.str() and "LONG" in error.str()
    error = incremental(admin, ResourceType.BROKER, "0", op("ssl.keystore.location", "/k.jks"))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert "only per-listener using the listener prefix" in error.str()
    error = incremental(admin, ResourceType.BROKER, "0", op("log.dirs", "/elsewhere"))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: log.dirs" in error.str()
    # One kayak acts on, changed: kayak does not apply broker changes at runtime.
    error = incremental(admin, ResourceType.BROKER, "0", op("max.connections", "10"))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    assert "at runtime" in error.str()


def test_a_custom_broker_config_is_accepted_as_kafka_accepts_it(admin: AdminClient) -> None:
    """Kafka only refuses the names it knows as static; others (a plugin's) pass."""
    assert incremental(admin, ResourceType.BROKER, "0", op("acme.plugin.mode", "fast")) is None
    assert described(admin, ResourceType.BROKER, "0")["acme.plugin.mode"].value == "fast"


def test_the_cluster_default_level(admin: AdminClient, broker: BrokerProcess) -> None:
    """The empty resource name (confluent-kafka cannot send it: a raw request): per-broker
    configs are refused there, as Kafka refuses them; others are kept as cluster defaults."""
    wire = WireClient(broker.bootstrap_servers)
    answers: list[Any] = []
    try:
        for name, value in ((KERBEROS, "60000"), ("acme.plugin.level", "3")):
            request = IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
                4, "", [AlterableConfig(name, SET.value, value)])])  # fmt: skip
            answers.append(wire.request(request, 1).responses[0])  # type: ignore[attr-defined]
    finally:
        wire.close()
    refused, kept = answers
    assert refused.error_code == KafkaError.INVALID_REQUEST
    assert "broker id must be specified" in refused.error_message
    assert kept.error_code == 0
    entry = described(admin, ResourceType.BROKER, "0")["acme.plugin.level"]
    assert (entry.value, entry.source) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


@pytest.mark.parametrize("version", ["0.10.0.0", "0.10.0", "0.8.2.1", "2.8-IV1", "2.8.1", "3.0"])
def test_a_legacy_message_format_version_is_accepted(admin: AdminClient, version: str) -> None:
    topic = unique("legacy-format")
    config = {"message.format.version": version}
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values()
    assert error_of(future) is None
    assert described(admin, ResourceType.TOPIC, topic)["message.format.version"].value == version
    other = unique("legacy-format-altered")
    (future,) = admin.create_topics([NewTopic(other, 1, 1)]).values()
    assert error_of(future) is None
    assert (
        incremental(admin, ResourceType.TOPIC, other, op("message.format.version", version)) is None
    )
    assert legacy(admin, ResourceType.TOPIC, other, config) is None
    assert described(admin, ResourceType.TOPIC, other)["message.format.version"].value == version


@pytest.mark.parametrize("version", ["9.9", "0.10.7", "3.0-IV9", "banana"])
def test_a_version_kafka_does_not_know_is_refused(admin: AdminClient, version: str) -> None:
    topic = unique("bad-format")
    config = {"message.format.version": version}
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values()
    error = error_of(future)
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG
    assert f"Version {version} is not a valid version" in error.str()
