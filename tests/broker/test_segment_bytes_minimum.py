"""``segment.bytes`` below 1 MiB is refused with INVALID_CONFIG naming the minimum (KIP-1030),
on CreateTopics, AlterConfigs and IncrementalAlterConfigs, against the real broker process."""

from __future__ import annotations

from typing import Any

from kayak.errors import ErrorCode
from kayak.protocol.messages import (
    AlterConfigsRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages import alter_configs_request as alter
from kayak.protocol.messages import incremental_alter_configs_request as incremental
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig
from kayak.protocol.messages.describe_configs_request import DescribeConfigsResource
from tests.broker.conftest import BrokerProcess
from tests.broker.wire import WireClient

MINIMUM = 1 << 20
TOPIC_RESOURCE = 2
SET = 0
INVALID_CONFIG = int(ErrorCode.INVALID_CONFIG)


def create(wire: WireClient, name: str, segment_bytes: int) -> Any:
    config = [CreatableTopicConfig("segment.bytes", str(segment_bytes))]
    topic = CreatableTopic(name, 1, 1, configs=config)
    response: Any = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 5)
    return response.topics[0]


def segment_bytes_of(wire: WireClient, name: str) -> str:
    wanted = DescribeConfigsResource(TOPIC_RESOURCE, name, ["segment.bytes"])
    response: Any = wire.request(DescribeConfigsRequest(resources=[wanted]), 1)
    (entry,) = [c for c in response.results[0].configs if c.name == "segment.bytes"]
    return str(entry.value)


def alter_legacy(wire: WireClient, name: str, segment_bytes: int) -> Any:
    configs = [alter.AlterableConfig("segment.bytes", str(segment_bytes))]
    resource = alter.AlterConfigsResource(TOPIC_RESOURCE, name, configs)
    response: Any = wire.request(AlterConfigsRequest(resources=[resource]), 1)
    return response.responses[0]


def alter_incremental(wire: WireClient, name: str, segment_bytes: int) -> Any:
    configs = [incremental.AlterableConfig("segment.bytes", SET, str(segment_bytes))]
    resource = incremental.AlterConfigsResource(TOPIC_RESOURCE, name, configs)
    response: Any = wire.request(IncrementalAlterConfigsRequest(resources=[resource]), 0)
    return response.responses[0]


def test_segment_bytes_below_one_mib_is_refused_naming_the_minimum(
    broker_process: BrokerProcess,
) -> None:
    wire = WireClient(broker_process.bootstrap_servers)
    try:
        refused = create(wire, "too-small", MINIMUM - 1)
        assert refused.error_code == INVALID_CONFIG, refused
        assert str(MINIMUM) in (refused.error_message or ""), refused.error_message

        accepted = create(wire, "smallest", MINIMUM)
        assert accepted.error_code == 0, accepted
        assert segment_bytes_of(wire, "smallest") == str(MINIMUM)

        for factor, alter_configs in enumerate((alter_legacy, alter_incremental), start=2):
            before = segment_bytes_of(wire, "smallest")
            answer = alter_configs(wire, "smallest", MINIMUM - 1)
            assert answer.error_code == INVALID_CONFIG, (alter_configs.__name__, answer)
            assert str(MINIMUM) in (answer.error_message or ""), answer.error_message
            assert segment_bytes_of(wire, "smallest") == before, "a refusal changed it"
            assert alter_configs(wire, "smallest", factor * MINIMUM).error_code == 0
            assert segment_bytes_of(wire, "smallest") == str(factor * MINIMUM)
    finally:
        wire.close()
