"""Golden bytes: kayak's encodings against kafka-python's, an independent implementation.

kafka-python 3.x encodes from its own copy of Kafka's JSON specs with its own code, so agreeing
with it byte for byte (bodies, request headers, frames) is strong evidence that kayak's generator
read the specs right: field order, compact vs classic encodings, nullability, tagged fields.

Content is written once as kayak objects; ``to_kp`` rebuilds the same content as kafka-python
objects by walking kafka-python's schema for the version (so every field kafka-python puts on
the wire is taken from the kayak object by name, and a name mismatch fails loudly).
"""

from __future__ import annotations

import random
import typing
import uuid
from types import UnionType
from typing import Any

import pytest
from kafka.protocol import admin as kp_admin
from kafka.protocol import consumer as kp_consumer
from kafka.protocol import metadata as kp_metadata
from kafka.protocol import producer as kp_producer
from kafka.protocol.api_message import ApiMessage
from kafka.record import MemoryRecordsBuilder

from kayak.errors import EncodeError
from kayak.protocol import messages as km
from kayak.protocol.connection import ClientConnection, ServerConnection
from kayak.protocol.message import Message
from kayak.protocol.messages.api_versions_response import ApiVersion
from kayak.protocol.messages.fetch_request import (
    FetchPartition,
    FetchTopic,
    ForgottenTopic,
)
from kayak.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    PartitionData,
)
from kayak.protocol.messages.join_group_request import JoinGroupRequestProtocol
from kayak.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from kayak.protocol.messages.metadata_request import MetadataRequestTopic
from kayak.protocol.messages.metadata_response import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kayak.protocol.messages.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import (
    PartitionProduceResponse,
    TopicProduceResponse,
)

CLIENT_ID = "kayak-golden"
TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
OTHER_TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")

KP_CLASSES: dict[str, type[ApiMessage]] = {
    name: cls
    for mod in (kp_metadata, kp_consumer, kp_producer, kp_admin)
    for name in mod.__all__
    if isinstance(cls := getattr(mod, name), type) and issubclass(cls, ApiMessage)
}

# kafka-python renames a few fields (json_patch) and turns int32 bitfields into sets.
ALIASES = {
    ("MetadataResponse", "authorized_operations"): "cluster_authorized_operations",
    ("MetadataResponseTopic", "authorized_operations"): "topic_authorized_operations",
    ("DescribeClusterResponse", "authorized_operations"): "cluster_authorized_operations",
}


# -- kayak <-> kafka-python content ------------------------------------------------------------


def _kayak_name(owner: object, kp_name: str) -> str:
    return ALIASES.get((type(owner).__name__, kp_name), kp_name)


def _bits(value: int) -> set[int] | None:
    bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def _kayak_default(obj: object, name: str) -> object:
    if name not in type(obj).FIELDS:  # type: ignore[attr-defined]
        raise AttributeError(name)
    return getattr(type(obj)(), name)


def to_kp(obj: object, struct: Any, version: int, data_class: Any) -> Any:
    """The kafka-python object holding the same content as kayak's ``obj`` at ``version``."""
    kwargs: dict[str, Any] = {}
    for f in struct.fields.values():
        if not f.for_version_q(version):
            continue
        name = _kayak_name(obj, f.name)
        value = getattr(obj, name)  # AttributeError: kayak names the field differently
        if f.tagged_field_q(version) and value == _kayak_default(obj, name):
            continue  # both sides leave a default tagged field off the wire
        if value is None:
            kwargs[f.name] = None
        elif f.is_struct_array():
            kwargs[f.name] = [to_kp(v, f.array_of, version, f.data_class) for v in value]
        elif f.is_struct():
            kwargs[f.name] = to_kp(value, f, version, f.data_class)
        elif f.type_str == "bitfield":
            kwargs[f.name] = _bits(value)
        elif isinstance(value, memoryview):
            kwargs[f.name] = bytes(value)
        else:
            kwargs[f.name] = value
    return data_class(version=version, **kwargs)


def kp_of(msg: Message, version: int) -> Any:
    kp_cls = KP_CLASSES[msg.NAME]
    return to_kp(msg, kp_cls._struct, version, kp_cls)


def project(obj: object, struct: Any, version: int) -> Any:
    """kayak's ``obj`` as plain data, limited to the fields on the wire at ``version``."""
    out: dict[str, Any] = {}
    for f in struct.fields.values():
        if not f.for_version_q(version):
            continue
        value = getattr(obj, _kayak_name(obj, f.name))
        if value is None:
            out[f.name] = None
        elif f.is_struct_array():
            out[f.name] = [project(v, f.array_of, version) for v in value]
        elif f.is_struct():
            out[f.name] = project(value, f, version)
        elif isinstance(value, memoryview):
            out[f.name] = bytes(value)
        else:
            out[f.name] = value
    return out


def project_message(msg: Message, version: int) -> Any:
    return project(msg, KP_CLASSES[msg.NAME]._struct, version)


def record_batch(count: int, base_timestamp: int = 1_700_000_000_000) -> bytes:
    """A real magic-v2 record batch (CRC-32C and all), built by kafka-python."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(
            timestamp=base_timestamp + i,
            key=f"key-{i}".encode(),
            value=f"value-{i}-é".encode() * (i + 1),
            headers=[("h", b"\x00\x01")],
        )
    builder.close()
    return bytes(builder.buffer())


BATCH_A = record_batch(3)
BATCH_B = record_batch(1, base_timestamp=1_800_000_000_000)


# -- request content ---------------------------------------------------------------------------


def api_versions_request(v: int) -> Message:
    return km.ApiVersionsRequest(client_software_name="kayak-test", client_software_version="1.2.3")


def metadata_request(v: int) -> Message:
    topics = [MetadataRequestTopic(name="orders"), MetadataRequestTopic(name="payments-é")]
    if v >= 10:
        topics[0].topic_id = TOPIC_ID
    return km.MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=8 <= v <= 10,
        include_topic_authorized_operations=v >= 8,
    )


def metadata_all_topics_request(v: int) -> Message:
    return km.MetadataRequest(topics=None, allow_auto_topic_creation=True)


def produce_request(v: int) -> Message:
    return km.ProduceRequest(
        transactional_id="txn-7" if v >= 3 else None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            TopicProduceData(
                name="orders",
                partition_data=[
                    PartitionProduceData(index=0, records=BATCH_A),
                    PartitionProduceData(index=3, records=BATCH_B),
                ],
            ),
            TopicProduceData(
                name="empty", partition_data=[PartitionProduceData(index=1, records=b"")]
            ),
        ],
    )


def produce_acks0_request(v: int) -> Message:
    return km.ProduceRequest(
        transactional_id=None,
        acks=0,
        timeout_ms=1_500,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=BATCH_B)]
            )
        ],
    )


def fetch_request(v: int) -> Message:
    def topic(name: str, topic_id: uuid.UUID, partitions: list[int]) -> FetchTopic:
        return FetchTopic(
            topic=name,
            topic_id=topic_id,
            partitions=[
                FetchPartition(
                    partition=p,
                    current_leader_epoch=5 + p,
                    fetch_offset=42 + 1000 * p,
                    last_fetched_epoch=4,
                    log_start_offset=7,
                    partition_max_bytes=1 << 20,
                )
                for p in partitions
            ],
        )

    return km.FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
        session_id=123 if v >= 7 else 0,
        session_epoch=9 if v >= 7 else -1,
        topics=[topic("orders", TOPIC_ID, [0, 2]), topic("audit", OTHER_TOPIC_ID, [1])],
        forgotten_topics_data=[
            ForgottenTopic(topic="old", topic_id=OTHER_TOPIC_ID, partitions=[4, 5])
        ],
        rack_id="rack-a",
    )


def list_offsets_request(v: int) -> Message:
    return km.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[
            ListOffsetsTopic(
                name="orders",
                partitions=[
                    ListOffsetsPartition(partition_index=0, current_leader_epoch=3, timestamp=-1),
                    ListOffsetsPartition(partition_index=1, timestamp=-2),
                    ListOffsetsPartition(partition_index=2, timestamp=1_700_000_000_000),
                ],
            )
        ],
    )


def find_coordinator_request(v: int) -> Message:
    return km.FindCoordinatorRequest(
        key="group-a", key_type=1 if v >= 1 else 0, coordinator_keys=["group-a", "group-b"]
    )


def join_group_request(v: int) -> Message:
    return km.JoinGroupRequest(
        group_id="group-a",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=300_000,
        member_id="",
        group_instance_id="static-1" if v >= 5 else None,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01\x00\x00\x00\x01\x00\x01t"),
            JoinGroupRequestProtocol(name="roundrobin", metadata=b""),
        ],
        reason="rebalance please" if v >= 8 else None,
    )


def offset_commit_request(v: int) -> Message:
    return km.OffsetCommitRequest(
        group_id="group-a",
        generation_id_or_member_epoch=17,
        member_id="member-1",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            OffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=99,
                        committed_leader_epoch=2,
                        commit_timestamp=-1,
                        committed_metadata="meta",
                    ),
                    OffsetCommitRequestPartition(
                        partition_index=1, committed_offset=5, committed_metadata=None
                    ),
                ],
            )
        ],
    )


REQUEST_CASES: list[tuple[str, Any, int]] = [
    *(("ApiVersions", api_versions_request, v) for v in (0, 1, 2, 3)),
    *(("Metadata", metadata_request, v) for v in (1, 4, 9, 12)),
    *(("Metadata(all)", metadata_all_topics_request, v) for v in (1, 4, 9, 12)),
    *(("Produce", produce_request, v) for v in (3, 7, 9)),
    ("Produce(acks=0)", produce_acks0_request, 9),
    *(("Fetch", fetch_request, v) for v in (4, 11, 12, 13)),
    *(("ListOffsets", list_offsets_request, v) for v in (1, 6)),
    *(("FindCoordinator", find_coordinator_request, v) for v in (1, 3, 4)),
    *(("JoinGroup", join_group_request, v) for v in (1, 6)),
    *(("OffsetCommit", offset_commit_request, v) for v in (2, 8)),
]
REQUEST_IDS = [f"{name}-v{v}" for name, _, v in REQUEST_CASES]


@pytest.mark.parametrize(("name", "build", "version"), REQUEST_CASES, ids=REQUEST_IDS)
def test_request_body_matches_kafka_python(name: str, build: Any, version: int) -> None:
    msg = build(version)
    ours = msg.encode(version)
    theirs = bytes(kp_of(msg, version).encode(version=version))
    assert ours == theirs
    # and kayak reads kafka-python's bytes back to the same content
    assert project_message(type(msg).decode(theirs, version), version) == project_message(
        msg, version
    )


@pytest.mark.parametrize(("name", "build", "version"), REQUEST_CASES, ids=REQUEST_IDS)
def test_request_frame_with_header_matches_kafka_python(
    name: str, build: Any, version: int
) -> None:
    msg = build(version)
    client = ClientConnection(client_id=CLIENT_ID)
    for _ in range(3):  # move past correlation id 0 so the id is really compared
        client.send_request(km.ApiVersionsRequest(), 0)
    correlation_id, frame = client.send_request(msg, version)
    assert correlation_id == 3
    kp_msg = kp_of(msg, version)
    kp_msg.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
    assert frame[4:] == bytes(kp_msg.encode(version=version, header=True))
    assert frame == bytes(kp_msg.encode(version=version, header=True, framed=True))


def test_request_header_null_client_id_matches_kafka_python() -> None:
    for version in (0, 3):  # header v1 and v2
        client = ClientConnection(client_id=None)
        _, frame = client.send_request(km.ApiVersionsRequest(), version)
        kp_msg = KP_CLASSES["ApiVersionsRequest"][version]()
        kp_msg.with_header(correlation_id=0, client_id=None)
        assert frame[4:] == bytes(kp_msg.encode(version=version, header=True))
        assert frame[12:14] == b"\xff\xff"  # null client id, int16 -1 even in header v2


def test_metadata_v0_rejects_null_topics() -> None:
    # v0 has no "all topics" null; kafka-python silently rewrites None to [] instead.
    with pytest.raises(EncodeError):
        km.MetadataRequest(topics=None).encode(0)


def test_fetch_v13_puts_topic_ids_on_the_wire() -> None:
    body = fetch_request(13).encode(13)
    assert TOPIC_ID.bytes in body
    assert b"orders" not in body  # the name is gone from v13 on
    assert b"orders" in fetch_request(12).encode(12)


def test_produce_records_survive_as_is() -> None:
    for version in (3, 7, 9):
        decoded = km.ProduceRequest.decode(produce_request(version).encode(version), version)
        records = decoded.topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview)
        assert records.readonly
        assert bytes(records) == BATCH_A


# -- responses: kafka-python encodes, kayak decodes --------------------------------------------


def api_versions_response(v: int) -> Message:
    return km.ApiVersionsResponse(
        error_code=0,
        api_keys=[
            ApiVersion(api_key=0, min_version=0, max_version=9),
            ApiVersion(api_key=3, min_version=0, max_version=12),
            ApiVersion(api_key=18, min_version=0, max_version=3),
        ],
        throttle_time_ms=25,
    )


def metadata_response(v: int) -> Message:
    def partition(i: int, error: int = 0) -> MetadataResponsePartition:
        return MetadataResponsePartition(
            error_code=error,
            partition_index=i,
            leader_id=i % 2,
            leader_epoch=11 + i,
            replica_nodes=[0, 1, 2],
            isr_nodes=[i % 2, 2],
            offline_replicas=[1] if i == 1 else [],
        )

    return km.MetadataResponse(
        throttle_time_ms=5,
        brokers=[
            MetadataResponseBroker(node_id=0, host="127.0.0.1", port=9092, rack="r0"),
            MetadataResponseBroker(node_id=1, host="broker-1.example", port=19092, rack=None),
        ],
        cluster_id="cluster-é",
        controller_id=1,
        topics=[
            MetadataResponseTopic(
                name="orders",
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=[partition(0), partition(1), partition(2, error=9)],
                topic_authorized_operations=0b1011_1000 if v >= 8 else -2147483648,
            ),
            MetadataResponseTopic(error_code=3, name="missing", topic_id=uuid.UUID(int=0)),
        ],
        cluster_authorized_operations=-2147483648,
    )


def produce_response(v: int) -> Message:
    return km.ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="orders",
                partition_responses=[
                    PartitionProduceResponse(
                        index=0,
                        error_code=0,
                        base_offset=1234,
                        log_append_time_ms=-1,
                        log_start_offset=17,
                    ),
                    PartitionProduceResponse(
                        index=3,
                        error_code=6,
                        base_offset=-1,
                        error_message="not leader",
                    ),
                ],
            )
        ],
        throttle_time_ms=7,
    )


def fetch_response(v: int) -> Message:
    return km.FetchResponse(
        throttle_time_ms=3,
        error_code=0,
        session_id=555,
        responses=[
            FetchableTopicResponse(
                topic="orders",
                topic_id=TOPIC_ID,
                partitions=[
                    PartitionData(
                        partition_index=0,
                        error_code=0,
                        high_watermark=3,
                        last_stable_offset=3,
                        log_start_offset=0,
                        aborted_transactions=[AbortedTransaction(producer_id=77, first_offset=1)],
                        preferred_read_replica=-1,
                        records=BATCH_A,
                    ),
                    PartitionData(
                        partition_index=1,
                        error_code=0,
                        high_watermark=0,
                        aborted_transactions=None,
                        records=b"",
                    ),
                    PartitionData(partition_index=2, error_code=1, records=None),
                ],
            )
        ],
    )


RESPONSE_CASES: list[tuple[str, Any, int]] = [
    *(("ApiVersions", api_versions_response, v) for v in (0, 1, 2, 3)),
    *(("Metadata", metadata_response, v) for v in (1, 9, 12)),
    *(("Produce", produce_response, v) for v in (7, 8, 9)),
    *(("Fetch", fetch_response, v) for v in (4, 11, 12, 13)),
]
RESPONSE_IDS = [f"{name}-v{v}" for name, _, v in RESPONSE_CASES]


@pytest.mark.parametrize(("name", "build", "version"), RESPONSE_CASES, ids=RESPONSE_IDS)
def test_kafka_python_response_decodes_to_same_content(name: str, build: Any, version: int) -> None:
    expected = build(version)
    theirs = bytes(kp_of(expected, version).encode(version=version))
    decoded = type(expected).decode(theirs, version)
    assert project_message(decoded, version) == project_message(expected, version)
    assert decoded.encode(version) == theirs  # and kayak writes the same bytes


@pytest.mark.parametrize(("name", "build", "version"), RESPONSE_CASES, ids=RESPONSE_IDS)
def test_kafka_python_response_frame_through_client_connection(
    name: str, build: Any, version: int
) -> None:
    expected = build(version)
    request = km.request_class(expected.API_KEY)()
    client = ClientConnection(client_id=CLIENT_ID)
    client.send_request(km.ApiVersionsRequest(), 0, expect_response=False)
    correlation_id, _ = client.send_request(request, version)
    kp_msg = kp_of(expected, version)
    kp_msg.with_header(correlation_id=correlation_id)
    # (kafka-python breaks on encode(version=...) of a response with a header: the object
    # already carries its version)
    frame = bytes(kp_msg.encode(header=True, framed=True))
    # and the server side writes exactly that frame
    server = ServerConnection()
    assert server.send_response(correlation_id, expected.API_KEY, version, expected) == frame
    for cut in (1, len(frame) // 2, len(frame) - 1):  # split anywhere: nothing until whole
        client_copy = ClientConnection(client_id=CLIENT_ID)
        client_copy.send_request(km.ApiVersionsRequest(), 0, expect_response=False)
        client_copy.send_request(request, version)
        client_copy.receive_data(frame[:cut])
        assert client_copy.next_event() is None
    client.receive_data(frame)
    event = client.next_event()
    assert event is not None
    assert (event.correlation_id, event.api_key, event.api_version) == (
        correlation_id,
        expected.API_KEY,
        version,
    )
    assert project_message(event.response, version) == project_message(expected, version)
    assert client.in_flight == 0
    assert client.next_event() is None


def test_metadata_response_v12_fields_spot_check() -> None:
    theirs = bytes(kp_of(metadata_response(12), 12).encode(version=12))
    decoded = km.MetadataResponse.decode(theirs, 12)
    assert [b.host for b in decoded.brokers] == ["127.0.0.1", "broker-1.example"]
    assert decoded.brokers[1].rack is None
    assert decoded.cluster_id == "cluster-é"
    orders = decoded.topics[0]
    assert orders.topic_id == TOPIC_ID
    assert orders.topic_authorized_operations == 0b1011_1000
    assert [p.leader_epoch for p in orders.partitions] == [11, 12, 13]
    assert orders.partitions[1].offline_replicas == [1]
    assert decoded.topics[1].error_code == 3


def test_fetch_response_records_decode_as_views() -> None:
    for version in (11, 12, 13):
        theirs = bytes(kp_of(fetch_response(version), version).encode(version=version))
        decoded = km.FetchResponse.decode(theirs, version)
        parts = decoded.responses[0].partitions
        assert isinstance(parts[0].records, memoryview) and parts[0].records.readonly
        assert bytes(parts[0].records) == BATCH_A
        assert parts[1].records is not None and bytes(parts[1].records) == b""
        assert parts[2].records is None
        assert parts[1].aborted_transactions is None
        assert decoded.responses[0].topic_id == (TOPIC_ID if version >= 13 else uuid.UUID(int=0))
        assert decoded.responses[0].topic == ("" if version >= 13 else "orders")


def test_api_versions_v3_response_header_is_v0_like_kafka_python() -> None:
    msg = api_versions_response(3)
    kp_msg = kp_of(msg, 3)
    kp_msg.with_header(correlation_id=7)
    frame = ServerConnection().send_response(7, km.ApiKey.API_VERSIONS, 3, msg)
    assert frame == bytes(kp_msg.encode(header=True, framed=True))
    assert frame[8] == 0  # body starts right after the correlation id: error_code high byte


# -- broad sweep: random content, every API and version both libraries know -------------------

_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _random_scalar(type_str: str, rng: random.Random) -> Any:
    if type_str in _RANGES:
        bits = _RANGES[type_str]
        lo, hi = -(2**bits), 2**bits - 1
        return rng.choice([0, 1, -1, lo, hi, rng.randint(lo, hi)])
    if type_str == "uint16":
        return rng.choice([0, 65535, rng.randint(0, 65535)])
    if type_str == "float64":
        return rng.choice([0.0, 1.5, -2.25])
    if type_str == "bool":
        return rng.random() < 0.5
    if type_str == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if type_str == "string":
        return rng.choice(["", "a", "topic-é", "x" * 200])
    if type_str in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 3, 200]))
    if type_str == "bitfield":
        return rng.choice([0, 8, 0x7FFF, -(2**31)])
    raise AssertionError(f"unexpected type {type_str}")


def _element_class(cls: type, name: str) -> Any:
    hint = typing.get_type_hints(cls)[name]
    while True:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        elif origin is list:
            hint = typing.get_args(hint)[0]
        else:
            return hint


def random_kayak(cls: type, struct: Any, version: int, rng: random.Random) -> Any:
    """A kayak object of ``cls`` with random content in every field on the wire at ``version``."""
    obj = cls()
    for f in struct.fields.values():
        if not f.for_version_q(version):
            continue
        name = ALIASES.get((cls.__name__, f.name), f.name)
        if f.nullable_for_version_q(version) and rng.random() < 0.25:
            value: Any = None
        elif f.tagged_field_q(version) and rng.random() < 0.4:
            continue  # leave at the default
        elif f.is_struct_array():
            elem = _element_class(cls, name)
            value = [random_kayak(elem, f.array_of, version, rng) for _ in range(rng.randint(0, 2))]
        elif f.is_struct():
            value = random_kayak(_element_class(cls, name), f, version, rng)
        elif f.is_array():
            value = [_random_scalar(f.array_of.type_str, rng) for _ in range(rng.randint(0, 3))]
        else:
            value = _random_scalar(f.type_str, rng)
        setattr(obj, name, value)
    return obj


def _sweep_cases() -> list[tuple[str, int]]:
    cases = []
    for name in sorted(KP_CLASSES):
        if name not in km.MODULES:
            continue  # newer than kayak's specs (e.g. ListConfigResources)
        ours, theirs = km.message_class(name), KP_CLASSES[name]
        for v in range(ours.MIN_VERSION, min(ours.MAX_VERSION, theirs.max_version) + 1):
            cases.append((name, v))
    return cases


SWEEP = _sweep_cases()


def test_sweep_covers_the_common_apis() -> None:
    names = {name for name, _ in SWEEP}
    assert len(names) >= 90
    assert {
        "ProduceRequest",
        "FetchResponse",
        "JoinGroupRequest",
        "DescribeClusterResponse",
    } <= names


@pytest.mark.parametrize("name", sorted({name for name, _ in SWEEP}))
def test_random_content_matches_kafka_python_at_every_version(name: str) -> None:
    ours, theirs = km.message_class(name), KP_CLASSES[name]
    rng = random.Random(name)
    for version in (v for n, v in SWEEP if n == name):
        for _ in range(4):
            msg = random_kayak(ours, theirs._struct, version, rng)
            kp_bytes = bytes(to_kp(msg, theirs._struct, version, theirs).encode(version=version))
            assert msg.encode(version) == kp_bytes, f"{name} v{version}: {msg!r}"
            decoded = ours.decode(kp_bytes, version)
            assert project_message(decoded, version) == project_message(msg, version)
