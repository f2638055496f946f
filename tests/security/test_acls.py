"""ACLs: the authorizer's rules (Kafka's AclAuthorizer semantics), their durable store,
CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's AdminClient, and enforcement on
every API with Kafka's error codes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOperation
from confluent_kafka.admin import AclPermissionType as CkPermission
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from confluent_kafka.admin import ResourcePatternType as CkPattern
from confluent_kafka.admin import ResourceType as CkResource

from kayak.broker import Broker
from kayak.broker.config import BrokerConfig
from kayak.broker.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclStore,
    AclStoreError,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import Listener, SecurityProtocol, parse_listeners
from kayak.broker.security.principal import Principal
from kayak.broker.security.session import ConnectionSession
from kayak.cli.main import cli
from kayak.errors import ErrorCode
from kayak.protocol.messages.alter_configs_request import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from kayak.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from kayak.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kayak.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from kayak.protocol.messages.delete_groups_request import DeleteGroupsRequest
from kayak.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicsRequest
from kayak.protocol.messages.describe_acls_request import DescribeAclsRequest
from kayak.protocol.messages.describe_cluster_request import DescribeClusterRequest
from kayak.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kayak.protocol.messages.describe_groups_request import DescribeGroupsRequest
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from kayak.protocol.messages.heartbeat_request import HeartbeatRequest
from kayak.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig as IncrementalConfig,
)
from kayak.protocol.messages.incremental_alter_configs_request import (
    AlterConfigsResource as IncrementalResource,
)
from kayak.protocol.messages.incremental_alter_configs_request import (
    IncrementalAlterConfigsRequest,
)
from kayak.protocol.messages.init_producer_id_request import InitProducerIdRequest
from kayak.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from kayak.protocol.messages.leave_group_request import LeaveGroupRequest
from kayak.protocol.messages.list_groups_request import ListGroupsRequest
from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.messages.offset_for_leader_epoch_request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kayak.protocol.messages.sync_group_request import SyncGroupRequest
from tests.security.acl_support import (
    AsyncWire,
    create_topic,
    latest_offset,
    offset_commit,
    offset_fetch_all,
    one_record,
    partition_errors,
    produce,
)
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"


def acl(
    principal: str,
    operation: AclOperation,
    name: str = "orders",
    resource_type: ResourceType = TOPIC,
    pattern: PatternType = LITERAL,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )


def authorizer(
    data_dir: Path, *bindings: AclBinding, super_users: tuple[str, ...] = (), open_: bool = False
) -> Authorizer:
    store = AclStore.open(data_dir)
    store.add(bindings)
    return Authorizer(store, super_users, allow_everyone=open_)


def may(
    auth: Authorizer,
    principal: str,
    op: AclOperation,
    name: str = "orders",
    resource_type: ResourceType = TOPIC,
    host: str = "10.0.0.1",
) -> bool:
    return auth.allowed(principal, host, op, resource_type, name)


# -- the authorizer's rules -------------------------------------------------------------------


def test_deny_wins_over_allow_and_all_covers_every_operation(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl(ALICE, Op.ALL),
        acl(ALICE, Op.WRITE, permission=DENY),
        acl(BOB, Op.READ),
        acl(BOB, Op.ALL, permission=DENY, host="10.0.0.66"),
    )
    assert may(auth, ALICE, Op.READ) and may(auth, ALICE, Op.DELETE)
    assert not may(auth, ALICE, Op.WRITE)
    assert may(auth, BOB, Op.READ) and not may(auth, BOB, Op.WRITE)
    assert not may(auth, BOB, Op.READ, host="10.0.0.66")


def test_prefixed_literal_and_wildcard_patterns(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl(ALICE, Op.READ, "pay-", pattern=PREFIXED),
        acl(BOB, Op.READ, "*"),
        acl(BOB, Op.READ, "secret-", pattern=PREFIXED, permission=DENY),
        acl("User:*", Op.WRITE, "public"),
        acl(ALICE, Op.READ, "g-", GROUP, PREFIXED),
    )
    assert may(auth, ALICE, Op.READ, "pay-eu") and may(auth, ALICE, Op.READ, "pay-")
    assert not may(auth, ALICE, Op.READ, "pa") and not may(auth, ALICE, Op.READ, "xpay-eu")
    assert may(auth, BOB, Op.READ, "anything") and not may(auth, BOB, Op.READ, "secret-plans")
    assert may(auth, ALICE, Op.WRITE, "public") and may(auth, "User:carol", Op.WRITE, "public")
    assert may(auth, ALICE, Op.READ, "g-1", GROUP) and not may(auth, ALICE, Op.READ, "g-1")


def test_implied_operations_as_kafka(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl(ALICE, Op.READ, "r"),
        acl(ALICE, Op.WRITE, "w"),
        acl(ALICE, Op.ALTER_CONFIGS, "c"),
        acl(ALICE, Op.DESCRIBE, "d"),
    )
    for name in ("r", "w"):
        assert may(auth, ALICE, Op.DESCRIBE, name), name
    assert not may(auth, ALICE, Op.WRITE, "r") and not may(auth, ALICE, Op.READ, "w")
    assert may(auth, ALICE, Op.DESCRIBE_CONFIGS, "c") and not may(auth, ALICE, Op.DESCRIBE, "c")
    assert not may(auth, ALICE, Op.READ, "d")  # DESCRIBE implies nothing


def test_super_users_may_do_everything_even_when_denied(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path, acl("User:admin", Op.ALL, "*", permission=DENY), super_users=("User:admin",)
    )
    assert may(auth, "User:admin", Op.DELETE) and may(
        auth, "User:admin", Op.ALTER, CLUSTER_NAME, CLUSTER
    )
    assert not may(auth, ALICE, Op.READ)  # ACLs exist on every topic: none allows alice
    empty = authorizer(tmp_path / "empty", super_users=("User:admin",))
    assert may(empty, "User:admin", Op.WRITE) and not may(empty, ALICE, Op.WRITE)


def test_a_resource_without_acls_follows_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    bindings = (acl(ALICE, Op.READ, "guarded"),)
    closed = authorizer(tmp_path / "closed", *bindings)
    opened = authorizer(tmp_path / "open", *bindings, open_=True)
    assert not may(closed, BOB, Op.READ, "unguarded") and may(opened, BOB, Op.READ, "unguarded")
    # An ACL for anybody on a resource takes the open default away for everybody else.
    assert not may(opened, BOB, Op.READ, "guarded") and may(opened, ALICE, Op.READ, "guarded")


@pytest.mark.parametrize(
    ("listeners", "open_by_default"),
    [
        ((), True),
        ((Listener(SecurityProtocol.PLAINTEXT, "127.0.0.1", 0),), True),
        ((Listener(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0),), False),
        (
            (
                Listener(SecurityProtocol.PLAINTEXT, "127.0.0.1", 0),
                Listener(SecurityProtocol.SSL, "127.0.0.1", 0),
            ),
            False,
        ),
    ],
)
def test_the_open_default_holds_only_for_plaintext_listeners(
    tmp_path: Path, listeners: tuple[Listener, ...], open_by_default: bool
) -> None:
    auth = Authorizer.open(tmp_path, BrokerConfig(listeners=listeners))
    assert may(auth, BOB, Op.WRITE) is open_by_default
    forced = BrokerConfig(listeners=listeners, allow_everyone_if_no_acl_found=True)
    assert may(Authorizer.open(tmp_path, forced), BOB, Op.WRITE)


def test_write_on_any_topic_allows_idempotent_producers(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl(ALICE, Op.WRITE, "orders"),
        acl(BOB, Op.WRITE, "t-", pattern=PREFIXED),
        acl(BOB, Op.WRITE, "t", pattern=PREFIXED, permission=DENY),
        acl("User:carol", Op.WRITE, "x"),
        acl("User:carol", Op.ALL, "*", permission=DENY),
    )
    assert auth.allowed_on_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not auth.allowed_on_any(BOB, "h", Op.WRITE, TOPIC)  # every allow is denied
    assert not auth.allowed_on_any("User:carol", "h", Op.WRITE, TOPIC)
    assert not auth.allowed_on_any("User:dave", "h", Op.WRITE, TOPIC)


def test_sessions_give_the_principal_and_host(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, acl(ALICE, Op.READ, host="10.1.1.1"))
    listener = Listener(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0)
    session = ConnectionSession(listener, "10.1.1.1", Principal.user("alice"))
    assert auth.authorize(session, Op.READ, TOPIC, "orders")
    elsewhere = ConnectionSession(listener, "10.9.9.9", Principal.user("alice"))
    assert not auth.authorize(elsewhere, Op.READ, TOPIC, "orders")
    assert not auth.authorize(None, Op.READ, TOPIC, "orders")


def test_filters_select_as_kafkas(tmp_path: Path) -> None:
    bindings = [
        acl(ALICE, Op.READ, "pay-", pattern=PREFIXED),
        acl(ALICE, Op.READ, "pay-eu"),
        acl(BOB, Op.WRITE, "*"),
        acl(BOB, Op.READ, "g", GROUP),
    ]
    store = AclStore.open(tmp_path)
    store.add(bindings)

    def selected(**criteria: Any) -> set[AclBinding]:
        return set(store.matching(AclBindingFilter(**criteria)))

    assert selected() == set(bindings)
    assert selected(name="pay-eu", pattern_type=PatternType.MATCH) == set(bindings[:3])
    assert selected(name="pay-eu", pattern_type=PatternType.ANY) == {bindings[1]}
    assert selected(name="pay-", pattern_type=PREFIXED) == {bindings[0]}
    assert selected(resource_type=GROUP) == {bindings[3]}
    assert selected(principal=BOB, operation=Op.WRITE) == {bindings[2]}


# -- the durable store ------------------------------------------------------------------------


def test_acls_survive_a_restart_and_changes_by_other_processes_apply(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, acl(ALICE, Op.READ))
    assert may(auth, ALICE, Op.READ) and not may(auth, BOB, Op.READ)
    # Another process (the CLI, another shard) adds bob: picked up at the next refresh.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kayak",
            "acls",
            "add",
            "--allow-principal",
            BOB,
            "--operation",
            "Read",
            "--topic",
            "orders",
            "--data-dir",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    auth.refresh()
    assert may(auth, BOB, Op.READ)
    reopened = Authorizer(AclStore.open(tmp_path))
    assert may(reopened, ALICE, Op.READ) and may(reopened, BOB, Op.READ)
    deleted = reopened.delete([AclBindingFilter(principal=ALICE)])
    assert deleted == [[acl(ALICE, Op.READ)]]
    auth.refresh()
    assert not may(auth, ALICE, Op.READ) and may(auth, BOB, Op.READ)


def test_a_damaged_acl_file_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    auth = authorizer(tmp_path, acl(ALICE, Op.READ))
    path = tmp_path / "acls.json"
    document = json.loads(path.read_text())
    path.write_text(path.read_text()[:40])
    with pytest.raises(AclStoreError, match=r"acls\.json"):
        AclStore.open(tmp_path)
    auth.refresh()  # a running broker keeps what it had, and says so
    assert may(auth, ALICE, Op.READ) and "holds no valid ACLs" in caplog.text
    path.write_text(json.dumps(document))
    os.utime(path, ns=(1, 1))
    assert AclStore.open(tmp_path).bindings == (acl(ALICE, Op.READ),)


# -- over the wire ----------------------------------------------------------------------------


def _ck_binding(
    principal: str,
    operation: CkOperation,
    name: str = "orders",
    pattern: CkPattern = CkPattern.LITERAL,
) -> CkBinding:
    return CkBinding(CkResource.TOPIC, name, pattern, principal, "*", operation, CkPermission.ALLOW)


def _everything() -> CkFilter:
    return CkFilter(
        CkResource.ANY, None, CkPattern.ANY, None, None, CkOperation.ANY, CkPermission.ANY
    )


def test_admin_client_creates_describes_and_deletes_acls(tmp_path: Path) -> None:
    wanted = [
        _ck_binding(ALICE, CkOperation.READ),
        _ck_binding(ALICE, CkOperation.WRITE, "pay-", CkPattern.PREFIXED),
        CkBinding(
            CkResource.GROUP, "g", CkPattern.LITERAL, BOB, "*", CkOperation.READ, CkPermission.ALLOW
        ),
    ]
    with ThreadedBroker(tmp_path / "data", port=0) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for future in admin.create_acls(wanted, request_timeout=10).values():
            future.result()
        bad = CkBinding(
            CkResource.BROKER,
            "not-the-cluster",
            CkPattern.LITERAL,
            ALICE,
            "*",
            CkOperation.ALTER,
            CkPermission.ALLOW,
        )
        with pytest.raises(KafkaException) as refused:
            admin.create_acls([bad], request_timeout=10)[bad].result()
        assert refused.value.args[0].code() == ConfluentError.INVALID_REQUEST
        described = admin.describe_acls(_everything(), request_timeout=10).result()
        assert set(described) == set(wanted)
        only_alice = CkFilter(
            CkResource.TOPIC,
            "pay-eu",
            CkPattern.MATCH,
            ALICE,
            None,
            CkOperation.ANY,
            CkPermission.ANY,
        )
        assert admin.describe_acls(only_alice, request_timeout=10).result() == [wanted[1]]
    with ThreadedBroker(tmp_path / "data", port=0) as broker:  # durable across a restart
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert set(admin.describe_acls(_everything(), request_timeout=10).result()) == set(wanted)
        topic_filter = CkFilter(
            CkResource.TOPIC, None, CkPattern.ANY, None, None, CkOperation.ANY, CkPermission.ANY
        )
        deleted = admin.delete_acls([topic_filter], request_timeout=10)[topic_filter].result()
        assert set(deleted) == set(wanted[:2])
        assert admin.describe_acls(_everything(), request_timeout=10).result() == [wanted[2]]


def test_acl_changes_on_a_damaged_file_are_refused_and_the_connection_lives(
    tmp_path: Path,
) -> None:
    with ThreadedBroker(tmp_path / "data", port=0) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        first = _ck_binding(ALICE, CkOperation.READ)
        admin.create_acls([first], request_timeout=10)[first].result()
        (tmp_path / "data" / "acls.json").write_text("{not json")
        for change in (
            lambda: admin.create_acls([_ck_binding(BOB, CkOperation.READ)], request_timeout=10),
            lambda: admin.delete_acls([_everything()], request_timeout=10),
        ):
            with pytest.raises(KafkaException) as refused:
                next(iter(change().values())).result()
            assert refused.value.args[0].code() == ConfluentError.UNKNOWN
            assert "acls.json" in refused.value.args[0].str()
        # the same connection still answers, with the ACLs the broker had
        assert admin.describe_acls(_everything(), request_timeout=10).result() == [first]


def _seed_topics(data_dir: Path, *names: str) -> None:
    """Create topics (one record each) and a committed offset, on an open broker."""

    async def seed() -> None:
        async with Broker(data_dir, port=0) as broker:
            wire = await AsyncWire.connect(broker.port)
            for name in names:
                assert (await wire.request(create_topic(name), 7)).topics[0].error_code == 0
                assert partition_errors(await wire.request(produce(name, one_record()), 9)) == {0}
            committed = await wire.request(offset_commit("g", names[0], {0: 1}), 8)
            assert partition_errors(committed) == {0}
            await wire.close()

    asyncio.run(seed())


def _anonymous(
    operation: AclOperation, name: str, resource_type: ResourceType = TOPIC
) -> AclBinding:
    return acl("User:ANONYMOUS", operation, name, resource_type)


def test_principals_get_only_what_their_acls_allow(tmp_path: Path) -> None:
    """User:ANONYMOUS on a plaintext listener, with the open default switched off."""
    data = tmp_path / "data"
    _seed_topics(data, "readable", "writable")
    AclStore.open(data).add(
        [
            _anonymous(Op.READ, "readable"),
            _anonymous(Op.WRITE, "writable"),
            _anonymous(Op.READ, "g", GROUP),
        ]
    )
    with ThreadedBroker(data, port=0, allow_everyone_if_no_acl_found=False) as broker:
        bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
        outcomes: dict[str, Any] = {}
        for topic in ("readable", "writable"):
            producer.produce(
                topic, b"x", on_delivery=lambda e, m: outcomes.__setitem__(m.topic(), e)
            )
        producer.flush(15)
        assert outcomes["writable"] is None
        assert outcomes["readable"].code() == ConfluentError.TOPIC_AUTHORIZATION_FAILED
        admin = AdminClient({"bootstrap.servers": bootstrap})
        with pytest.raises(KafkaException) as refused:
            broker_configs = ConfigResource(ConfigResource.Type.BROKER, "0")
            admin.describe_configs([broker_configs], request_timeout=10)[broker_configs].result()
        assert refused.value.args[0].code() == ConfluentError.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(KafkaException) as refused:
            admin.create_acls([_ck_binding(ALICE, CkOperation.READ)], request_timeout=10)[
                _ck_binding(ALICE, CkOperation.READ)
            ].result()
        assert refused.value.args[0].code() == ConfluentError.CLUSTER_AUTHORIZATION_FAILED

        async def over_the_wire() -> None:
            wire = await AsyncWire.connect(broker.port)
            read = await wire.request(_fetch("readable", "writable"), 11)
            codes = {t.topic: t.partitions[0].error_code for t in read.responses}
            assert codes == {"readable": 0, "writable": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            commit = await wire.request(offset_commit("g", "readable", {0: 1}), 8)
            assert partition_errors(commit) == {0}
            commit = await wire.request(offset_commit("g", "writable", {0: 1}), 8)
            assert partition_errors(commit) == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            commit = await wire.request(offset_commit("other", "readable", {0: 1}), 8)
            assert partition_errors(commit) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
            listed = await wire.request(MetadataRequest(topics=None), 12)
            assert sorted(t.name for t in listed.topics) == ["readable", "writable"]
            fetched = await wire.request(offset_fetch_all("g"), 7)
            assert [t.name for t in fetched.topics] == ["readable"]  # "writable": not described
            await wire.close()

        asyncio.run(over_the_wire())  # a loop of this thread's own: the broker has another


def _fetch(*topics: str) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        topics=[
            FetchTopic(t, partitions=[FetchPartition(0, -1, 0, -1, -1, 1 << 20)]) for t in topics
        ],
    )


def _snapshot(data_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(data_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


_T, _G, _C = (
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
)


def _every_api() -> list[tuple[str, Any, int, Callable[[Any], set[Any]], set[Any]]]:
    """(name, request, version, how to read its error codes, expected) for each API."""
    topic_id = uuid.uuid4()
    join = JoinGroupRequest(
        "g", 6000, 6000, "m", None, "consumer", [JoinGroupRequestProtocol("range", b"")]
    )
    return [
        ("Produce", produce("orders", one_record()), 9, partition_errors, {_T}),
        (
            "Fetch",
            _fetch("orders"),
            11,
            lambda r: {p.error_code for t in r.responses for p in t.partitions},
            {_T},
        ),
        ("ListOffsets", latest_offset("orders"), 4, partition_errors, {_T}),
        (
            "Metadata",
            MetadataRequest(topics=[MetadataRequestTopic(name="orders")]),
            12,
            lambda r: {t.error_code for t in r.topics},
            {_T},
        ),
        (
            "Metadata (auto-create)",
            MetadataRequest(topics=[MetadataRequestTopic(name="new")]),
            12,
            lambda r: {t.error_code for t in r.topics},
            {_T},
        ),
        ("Metadata (all)", MetadataRequest(topics=None), 12, lambda r: {len(r.topics)}, {0}),
        ("OffsetCommit", offset_commit("g", "orders", {0: 5}), 8, partition_errors, {_G}),
        ("OffsetFetch", offset_fetch_all("g"), 7, lambda r: {r.error_code}, {_G}),
        ("FindCoordinator", FindCoordinatorRequest("g"), 3, lambda r: {r.error_code}, {_G}),
        ("JoinGroup", join, 5, lambda r: {r.error_code}, {_G}),
        ("SyncGroup", SyncGroupRequest("g", 1, "m"), 3, lambda r: {r.error_code}, {_G}),
        ("Heartbeat", HeartbeatRequest("g", 1, "m"), 3, lambda r: {r.error_code}, {_G}),
        ("LeaveGroup", LeaveGroupRequest("g", "m"), 1, lambda r: {r.error_code}, {_G}),
        (
            "DescribeGroups",
            DescribeGroupsRequest(["g"]),
            5,
            lambda r: {g.error_code for g in r.groups},
            {_G},
        ),
        ("ListGroups", ListGroupsRequest(), 4, lambda r: {len(r.groups), r.error_code}, {0}),
        (
            "DeleteGroups",
            DeleteGroupsRequest(["g"]),
            2,
            lambda r: {g.error_code for g in r.results},
            {_G},
        ),
        (
            "CreateTopics",
            create_topic("created"),
            7,
            lambda r: {t.error_code for t in r.topics},
            {_T},
        ),
        (
            "DeleteTopics",
            DeleteTopicsRequest(topic_names=["orders"]),
            4,
            lambda r: {t.error_code for t in r.responses},
            {_T},
        ),
        (
            "CreatePartitions",
            CreatePartitionsRequest([CreatePartitionsTopic("orders", 3, None)]),
            3,
            lambda r: {t.error_code for t in r.results},
            {_T},
        ),
        (
            "DeleteRecords",
            DeleteRecordsRequest([DeleteRecordsTopic("orders", [DeleteRecordsPartition(0, 1)])]),
            2,
            partition_errors,
            {_T},
        ),
        (
            "OffsetForLeaderEpoch",
            OffsetForLeaderEpochRequest(
                -1, [OffsetForLeaderTopic("orders", [OffsetForLeaderPartition(0, -1, 0)])]
            ),
            4,
            lambda r: {p.error_code for t in r.topics for p in t.partitions},
            {_T},
        ),
        ("InitProducerId", InitProducerIdRequest(None, 60000), 4, lambda r: {r.error_code}, {_C}),
        (
            "DescribeConfigs (topic)",
            DescribeConfigsRequest([DescribeConfigsResource(2, "orders", None)]),
            4,
            lambda r: {x.error_code for x in r.results},
            {_T},
        ),
        (
            "DescribeConfigs (broker)",
            DescribeConfigsRequest([DescribeConfigsResource(4, "0", None)]),
            4,
            lambda r: {x.error_code for x in r.results},
            {_C},
        ),
        (
            "AlterConfigs",
            AlterConfigsRequest(
                [AlterConfigsResource(2, "orders", [AlterableConfig("retention.ms", "1")])]
            ),
            2,
            lambda r: {x.error_code for x in r.responses},
            {_T},
        ),
        (
            "IncrementalAlterConfigs",
            IncrementalAlterConfigsRequest(
                [IncrementalResource(2, "orders", [IncrementalConfig("retention.ms", 0, "1")])]
            ),
            1,
            lambda r: {x.error_code for x in r.responses},
            {_T},
        ),
        # Kafka answers DescribeCluster to everyone: it reveals what Metadata does
        ("DescribeCluster", DescribeClusterRequest(), 1, lambda r: {r.error_code}, {0}),
        (
            "DescribeAcls",
            DescribeAclsRequest(1, None, 1, None, None, 1, 1),
            3,
            lambda r: {r.error_code},
            {_C},
        ),
        (
            "CreateAcls",
            CreateAclsRequest([AclCreation(2, "orders", 3, ALICE, "*", 3, 3)]),
            3,
            lambda r: {x.error_code for x in r.results},
            {_C},
        ),
        (
            "DeleteAcls",
            DeleteAclsRequest([DeleteAclsFilter(1, None, 1, None, None, 1, 1)]),
            3,
            lambda r: {x.error_code for x in r.filter_results},
            {_C},
        ),
        (
            "Fetch by id (unknown)",
            FetchRequest(
                topics=[FetchTopic("", topic_id, [FetchPartition(0, -1, 0, -1, -1, 1024)])]
            ),
            13,
            lambda r: {p.error_code for t in r.responses for p in t.partitions},
            {ErrorCode.UNKNOWN_TOPIC_ID},
        ),
    ]


def test_an_unauthorized_client_is_refused_by_every_api_and_nothing_changes(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    _seed_topics(data, "orders")

    async def try_everything() -> None:
        async with Broker(data, port=0, allow_everyone_if_no_acl_found=False) as broker:
            wire = await AsyncWire.connect(broker.port)
            before = _snapshot(data)
            for name, request, version, codes_of, expected in _every_api():
                response = await wire.request(request, version)
                assert codes_of(response) == expected, name
            assert _snapshot(data) == before
            await wire.close()
            assert broker.context is not None
            assert broker.context.catalog.get("created") is None
            assert broker.context.catalog.get("new") is None

    asyncio.run(try_everything())


# -- two SASL users ---------------------------------------------------------------------------


def _sasl_client(bootstrap: str, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        **extra,
    }


def _produce_one(config: dict[str, Any], topic: str) -> Any:
    producer = Producer({**config, "message.timeout.ms": 10000})
    outcomes: list[Any] = []
    producer.produce(topic, b"hello", on_delivery=lambda e, _: outcomes.append(e))
    producer.flush(15)
    return outcomes[0]


def _first_poll(config: dict[str, Any], topic: str, group: str) -> Any:
    """The first message or error a consumer of ``group`` subscribed to ``topic`` sees."""
    settings = {
        **config,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(settings)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                return message
        raise AssertionError("the consumer saw nothing")
    finally:
        consumer.close()


def test_sasl_users_get_what_their_acls_allow(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    users = CredentialStore.open(data)
    for user in ("admin", "alice", "bob"):
        users.upsert(user, "SCRAM-SHA-256", password=f"{user}-secret")
    settings: dict[str, Any] = {
        "listeners": parse_listeners("SASL_PLAINTEXT://127.0.0.1:0"),
        "super_users": ("User:admin",),
    }
    with ThreadedBroker(data, **settings) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient(_sasl_client(bootstrap, "admin"))
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
        grants = [
            _ck_binding(ALICE, CkOperation.WRITE),
            _ck_binding(ALICE, CkOperation.READ),
            CkBinding(
                CkResource.GROUP,
                "g",
                CkPattern.LITERAL,
                ALICE,
                "*",
                CkOperation.READ,
                CkPermission.ALLOW,
            ),
            CkBinding(
                CkResource.GROUP,
                "bob-g",
                CkPattern.LITERAL,
                BOB,
                "*",
                CkOperation.READ,
                CkPermission.ALLOW,
            ),
        ]
        for future in admin.create_acls(grants, request_timeout=10).values():
            future.result()
        alice, bob = _sasl_client(bootstrap, "alice"), _sasl_client(bootstrap, "bob")
        assert _produce_one(alice, "orders") is None
        refused = _produce_one(bob, "orders")
        assert refused.code() == ConfluentError.TOPIC_AUTHORIZATION_FAILED
        message = _first_poll(alice, "orders", "g")
        assert message.error() is None and message.value() == b"hello"
        denied = _first_poll(bob, "orders", "bob-g")
        assert denied.error().code() == ConfluentError.TOPIC_AUTHORIZATION_FAILED
        not_his = _first_poll(bob, "orders", "g")
        assert not_his.error().code() == ConfluentError.GROUP_AUTHORIZATION_FAILED
        bob_admin = AdminClient(bob)
        for_bob = _ck_binding(BOB, CkOperation.READ)
        with pytest.raises(KafkaException) as not_admin:
            bob_admin.create_acls([for_bob], request_timeout=10)[for_bob].result()
        assert not_admin.value.args[0].code() == ConfluentError.CLUSTER_AUTHORIZATION_FAILED
        admin.create_acls([for_bob], request_timeout=10)[for_bob].result()
        granted = _first_poll(bob, "orders", "bob-g")
        assert granted.error() is None and granted.value() == b"hello"


# -- kayak acls -------------------------------------------------------------------------------


def test_the_cli_adds_lists_and_removes_acls_and_refuses_mistakes(tmp_path: Path) -> None:
    runner = CliRunner()

    def kayak(*args: str) -> Any:
        return runner.invoke(cli, ["acls", *args, "--data-dir", str(tmp_path)])

    added = kayak(
        "add",
        "--allow-principal",
        ALICE,
        "--consumer",
        "--topic",
        "pay-",
        "--group",
        "g",
        "--resource-pattern-type",
        "prefixed",
    )
    assert added.exit_code == 0, added.output
    assert set(AclStore.open(tmp_path).bindings) == {
        acl(ALICE, Op.READ, "pay-", pattern=PREFIXED),
        acl(ALICE, Op.DESCRIBE, "pay-", pattern=PREFIXED),
        acl(ALICE, Op.READ, "g", GROUP, PREFIXED),
    }
    denied = kayak("add", "--deny-principal", BOB, "--operation", "All", "--cluster")
    assert denied.exit_code == 0, denied.output
    listed = kayak("list", "--topic", "pay-eu", "--resource-pattern-type", "match")
    assert listed.exit_code == 0 and listed.output.count("User:alice") == 2
    for mistake in (
        ("add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t"),
        ("add", "--allow-principal", ALICE, "--operation", "Reed", "--topic", "t"),
        ("add", "--allow-principal", ALICE, "--operation", "Read"),
        ("add", "--operation", "Read", "--topic", "t"),
        ("remove",),
        ("remove", "--principal", "User:nobody"),
    ):
        failed = kayak(*mistake)
        assert failed.exit_code != 0, mistake
        assert failed.output.strip().splitlines()[-1].startswith("Error:"), failed.output
    removed = kayak("remove", "--principal", ALICE)
    assert removed.exit_code == 0 and removed.output.count("removed:") == 3
    assert AclStore.open(tmp_path).bindings == (
        acl(BOB, Op.ALL, CLUSTER_NAME, CLUSTER, permission=DENY),
    )
