"""The Java Admin client against kayak: every Admin call kayak answers, run once by
``tests/jvm/java/AdminCalls.java`` (one JSON line per call) over SASL_SSL + SCRAM as the
super user, and checked here: topics, configs, records and offsets, groups (a live static
member too), ACLs, SCRAM users, quotas and the cluster."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.certs import TlsFiles
from tests.fixtures.jvm import java_command
from tests.jvm.kayak_brokers import SecuredKayak, json_lines

pytestmark = pytest.mark.timeout(240)

ADMIN_CALLS = Path(__file__).with_name("java") / "AdminCalls.java"


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
) -> Iterator[SecuredKayak]:
    broker = SecuredKayak(tmp_path_factory.mktemp("java-admin"), tls_files).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def calls(secured: SecuredKayak) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        java_command(str(ADMIN_CALLS), [secured.sasl_ssl, str(secured.properties("admin")), "adm"]),
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = {str(line["call"]): line for line in json_lines(done.stdout)}
    errors = {name: line["error"] for name, line in results.items() if "error" in line}
    assert not errors, errors
    return results


def test_cluster(calls: dict[str, dict[str, object]], secured: SecuredKayak) -> None:
    cluster = calls["describeCluster"]
    host, port = secured.sasl_ssl.rsplit(":", 1)
    assert cluster["nodes"] == [{"id": 0, "host": host, "port": int(port)}]
    assert cluster["controller"] == 0
    assert isinstance(cluster["cluster_id"], str) and cluster["cluster_id"]
    assert {"ALTER", "DESCRIBE", "ALTER_CONFIGS"} <= set(cluster["operations"])  # type: ignore[arg-type]


def test_topics(calls: dict[str, dict[str, object]]) -> None:
    created = calls["createTopics"]
    assert (created["partitions"], created["replication_factor"]) == (2, 1)
    assert created["retention_ms"] == "3600000"  # the configs CreateTopics v5+ answers with
    assert created["bad"] == "InvalidConfigurationException"  # retention.ms=soon
    assert "adm-topic" in calls["listTopics"]["names"]  # type: ignore[operator]
    assert "adm-bad" not in calls["listTopics"]["names"]  # type: ignore[operator]
    described = calls["describeTopics"]  # after createPartitions to 4
    assert described["partitions"] == [
        {"partition": p, "leader": 0, "replicas": 1, "isr": 1} for p in range(4)
    ]
    assert described["internal"] is False
    assert {"READ", "WRITE", "DELETE"} <= set(described["operations"])  # type: ignore[arg-type]
    assert calls["deleteTopics"]["exists"] is False


def test_configs(calls: dict[str, dict[str, object]]) -> None:
    described = calls["describeConfigs"]
    assert described["retention_ms"] == ["3600000", "DYNAMIC_TOPIC_CONFIG"]
    assert described["cleanup_policy"] == ["delete", "DEFAULT_CONFIG"]
    assert described["broker_id"] == "0"
    assert described["topic_entries"] >= 30  # type: ignore[operator]
    altered = calls["incrementalAlterConfigs"]
    assert altered["retention.ms"] == ["7200000", "DYNAMIC_TOPIC_CONFIG"]  # SET
    assert altered["segment.bytes"] == ["1073741824", "DEFAULT_CONFIG"]  # DELETE
    assert altered["cleanup.policy"] == ["delete,compact", "DYNAMIC_TOPIC_CONFIG"]  # APPEND


def test_records_and_offsets(calls: dict[str, dict[str, object]]) -> None:
    assert calls["produce"]["offsets"] == list(range(10))  # idempotent, acks=all
    offsets = calls["listOffsets"]
    assert offsets["earliest"] == [0, -1]
    assert offsets["latest"] == [10, -1]
    assert offsets["max_timestamp"] == [7, 5000]
    assert offsets["for_timestamp_1005"] == [5, 1005]
    assert offsets["earliest_local"] == [0, -1]  # ListOffsets v8: nothing is tiered
    assert offsets["latest_tiered"] == [-1, -1]  # v9, as Kafka without remote storage
    assert calls["deleteRecords"]["low_watermark"] == 3


def test_groups(calls: dict[str, dict[str, object]]) -> None:
    assert calls["listConsumerGroupOffsets"]["offsets"] == {"adm-topic-0": [5, "m"]}
    live = calls["liveGroup"]
    assert live["records"] == 7  # offsets 3..9 of partition 0, after deleteRecords
    assert (live["state"], live["assignor"], live["members"], live["assigned"]) == (
        "Stable", "cooperative-sticky", 1, 4,
    )  # fmt: skip
    assert live["members_after_removal"] == 0  # removeMembersFromConsumerGroup
    assert {"adm-group", "adm-live"} <= set(calls["listGroups"]["groups"])  # type: ignore[arg-type]
    assert calls["deleteConsumerGroupOffsets"]["offsets"] == {}
    assert calls["deleteConsumerGroups"]["groups"] == []


def test_acls_users_and_quotas(calls: dict[str, dict[str, object]]) -> None:
    expected = ["LITERAL User:app READ ALLOW", "PREFIXED User:app WRITE DENY"]
    assert calls["describeAcls"]["acls"] == expected
    assert calls["deleteAcls"]["deleted"] == expected
    assert calls["alterUserScramCredentials"]["credentials"] == ["SCRAM_SHA_256 8192"]
    assert calls["deleteUserScramCredentials"]["credentials"] == "ResourceNotFoundException"
    assert calls["describeClientQuotas"]["entities"] == 0  # kayak enforces no quotas
