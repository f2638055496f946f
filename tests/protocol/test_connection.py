"""ClientConnection <-> ServerConnection in memory: framing, headers, correlation, hostile bytes."""

from __future__ import annotations

import contextlib
import functools
import random
import struct
import typing
import uuid
from types import UnionType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.errors import (
    EncodeError,
    KayakError,
    MalformedMessageError,
    UnsupportedVersionError,
)
from kayak.protocol.connection import ClientConnection, ServerConnection
from kayak.protocol.correlation import CorrelationError, CorrelationTracker
from kayak.protocol.events import RequestReceived, ResponseReceived, UnsupportedRequest
from kayak.protocol.headers import request_header_version, response_header_version
from kayak.protocol.message import Message, Struct
from kayak.protocol.messages import (
    API_MESSAGES,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ControlledShutdownRequest,
    FetchRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    request_class,
    response_class,
)
from kayak.protocol.messages.api_versions_response import ApiVersion
from kayak.protocol.messages.metadata_request import MetadataRequestTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData

UNSUPPORTED_VERSION = 35

# -- content ---------------------------------------------------------------------------------


def _hint_value(hint: Any, depth: int) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, UnionType):
        return _hint_value(next(a for a in typing.get_args(hint) if a is not type(None)), depth)
    if origin is list:
        elem = typing.get_args(hint)[0]
        return [_hint_value(elem, depth + 1) for _ in range(2)]
    if hint is bool:
        return True
    if hint is int:
        return 7  # fits every integer width, int8 and uint16 included
    if hint is float:
        return 1.5
    if hint is str:
        return "s-é"
    if hint in (bytes, memoryview, bytearray):
        return b"\x01\x02\x03"
    if hint is uuid.UUID:
        return uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    if isinstance(hint, type) and issubclass(hint, Struct):
        return rich(hint, depth + 1)
    raise AssertionError(f"no value for {hint!r}")


def rich(cls: Any, depth: int = 0) -> Any:
    """An instance of a generated class with every field set to something non-default."""
    assert depth < 8, f"{cls} nests too deep"
    hints = typing.get_type_hints(cls)
    values = {name: _hint_value(hints[name], depth) for name in cls.FIELDS}
    return cls(**values)


def all_versions(cls: type[Message]) -> range:
    return range(cls.MIN_VERSION, cls.MAX_VERSION + 1)


def interesting_versions(cls: type[Message]) -> list[int]:
    versions = {cls.MIN_VERSION, cls.MAX_VERSION}
    if cls.FLEXIBLE_VERSION is not None:
        versions |= {cls.FLEXIBLE_VERSION, max(cls.FLEXIBLE_VERSION - 1, cls.MIN_VERSION)}
    return sorted(versions)


API_KEYS = sorted(API_MESSAGES)
ALL_REQUEST_VERSIONS = [(k, v) for k in API_KEYS for v in all_versions(request_class(k))]
ALL_RESPONSE_VERSIONS = [(k, v) for k in API_KEYS for v in all_versions(response_class(k))]


def feed(
    conn: ClientConnection | ServerConnection, data: bytes | bytearray, chunk: int | None
) -> list[Any]:
    """Feed ``data`` in chunks of ``chunk`` bytes (all at once if None); collect events."""
    events: list[Any] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step])
        while (event := conn.next_event()) is not None:
            events.append(event)
    return events


# -- loop-back ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 1, 7], ids=["all-at-once", "byte-by-byte", "7-bytes"])
@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda k: ApiKey(k).name)
def test_every_api_crosses_both_ways(api_key: int, chunk: int | None) -> None:
    req_cls, resp_cls = request_class(api_key), response_class(api_key)
    client = ClientConnection(client_id="loop")
    server = ServerConnection()
    for version in interesting_versions(req_cls):
        request = rich(req_cls)
        correlation_id, frame = client.send_request(request, version)
        (event,) = feed(server, frame, chunk)
        assert isinstance(event, RequestReceived)
        assert (event.api_key, event.api_version) == (api_key, version)
        assert event.correlation_id == correlation_id
        # header v0 (ControlledShutdown v0) has no client id: the spec default is ""
        expected_client_id = "" if request_header_version(api_key, version) == 0 else "loop"
        assert event.header.client_id == expected_client_id
        assert type(event.request) is req_cls
        assert event.request.encode(version) == request.encode(version)

        response = rich(resp_cls)
        reply = server.send_response(correlation_id, api_key, version, response)
        (got,) = feed(client, reply, chunk)
        assert isinstance(got, ResponseReceived)
        assert (got.correlation_id, got.api_key, got.api_version) == (
            correlation_id,
            api_key,
            version,
        )
        assert type(got.response) is resp_cls
        assert got.response.encode(version) == response.encode(version)
        assert client.in_flight == 0


def test_request_frame_layout() -> None:
    client = ClientConnection(client_id="abc")
    corr, frame = client.send_request(MetadataRequest(topics=None), 4)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert struct.unpack(">hhih", frame[4:14]) == (3, 4, corr, 3)
    assert frame[14:17] == b"abc"
    assert frame[17:] == MetadataRequest(topics=None).encode(4)
    # flexible: header v2 adds an empty tagged-field section after the (non-compact) client id
    corr, frame = client.send_request(MetadataRequest(topics=None), 9)
    assert struct.unpack(">hhih", frame[4:14]) == (3, 9, corr, 3)
    assert frame[14:18] == b"abc\x00"


def test_controlled_shutdown_v0_uses_header_v0() -> None:
    client = ClientConnection(client_id="never-sent")
    request = ControlledShutdownRequest(broker_id=3)
    corr, frame = client.send_request(request, 0)
    assert b"never-sent" not in frame
    assert frame[4:12] == struct.pack(">hhi", ApiKey.CONTROLLED_SHUTDOWN, 0, corr)
    assert frame[12:] == request.encode(0)
    (event,) = feed(ServerConnection(), frame, None)
    assert event.request.broker_id == 3


def test_header_versions() -> None:
    assert request_header_version(ApiKey.METADATA, 8) == 1
    assert request_header_version(ApiKey.METADATA, 9) == 2
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.FETCH, 11) == 0
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0  # always v0


# -- pipelining and correlation ------------------------------------------------------------------

PIPELINE: list[tuple[Message, int, type[Message]]] = [
    (
        ApiVersionsRequest(client_software_name="k", client_software_version="1"),
        3,
        ApiVersionsResponse,
    ),
    (MetadataRequest(topics=[MetadataRequestTopic(name="t")]), 12, MetadataResponse),
    (MetadataRequest(topics=None), 1, MetadataResponse),
    (FindCoordinatorRequest(key="g"), 2, FindCoordinatorResponse),
    (FindCoordinatorRequest(coordinator_keys=["g"]), 4, FindCoordinatorResponse),
    (HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4, HeartbeatResponse),
    (ApiVersionsRequest(), 1, ApiVersionsResponse),
]


@pytest.mark.parametrize("chunk", [None, 1], ids=["all-at-once", "byte-by-byte"])
def test_pipelined_requests_pair_with_their_responses(chunk: int | None) -> None:
    client, server = ClientConnection(), ServerConnection()
    rng = random.Random(5)
    plan = [rng.choice(PIPELINE) for _ in range(60)]
    sent = [client.send_request(req, v) for req, v, _ in plan]
    assert client.in_flight == 60
    assert [c for c, _ in sent] == list(range(60))

    requests = feed(server, b"".join(frame for _, frame in sent), chunk)
    assert [(e.correlation_id, e.api_key, e.api_version) for e in requests] == [
        (c, req.API_KEY, v) for (c, _), (req, v, _) in zip(sent, plan, strict=True)
    ]

    def marked(cls: type[Message], i: int) -> Message:
        # Metadata v1 has no throttle time; its controller id is there from v1 on
        return cls(controller_id=i) if cls is MetadataResponse else cls(throttle_time_ms=i)

    replies = b"".join(
        server.send_response(e.correlation_id, e.api_key, e.api_version, marked(resp, i))
        for i, (e, (_, _, resp)) in enumerate(zip(requests, plan, strict=True))
    )
    responses = feed(client, replies, chunk)
    assert len(responses) == 60
    for i, (event, (req, v, resp)) in enumerate(zip(responses, plan, strict=True)):
        assert (event.correlation_id, event.api_key, event.api_version) == (i, req.API_KEY, v)
        assert type(event.response) is resp
        marker = "controller_id" if resp is MetadataResponse else "throttle_time_ms"
        assert getattr(event.response, marker) == i
    assert client.in_flight == 0


def test_acks_zero_produce_is_not_waited_for() -> None:
    client, server = ClientConnection(), ServerConnection()
    produce = ProduceRequest(
        acks=0,
        timeout_ms=100,
        topic_data=[TopicProduceData(name="t", partition_data=[PartitionProduceData(0, b"batch")])],
    )
    c0, f0 = client.send_request(MetadataRequest(topics=None), 9)
    c1, f1 = client.send_request(produce, 9, expect_response=False)
    c2, f2 = client.send_request(produce, 3, expect_response=False)
    c3, f3 = client.send_request(HeartbeatRequest(group_id="g"), 4)
    assert (c0, c1, c2, c3) == (0, 1, 2, 3)
    assert client.in_flight == 2
    assert client.pending_requests() == [(0, 3, 9), (3, 12, 4)]

    events = feed(server, f0 + f1 + f2 + f3, 1)
    assert [e.correlation_id for e in events] == [0, 1, 2, 3]
    assert bytes(events[1].request.topic_data[0].partition_data[0].records) == b"batch"
    assert events[2].request.acks == 0

    replies = server.send_response(0, 3, 9, MetadataResponse(controller_id=9))
    replies += server.send_response(3, 12, 4, HeartbeatResponse(error_code=27))
    got = feed(client, replies, None)
    assert [(g.correlation_id, g.api_key) for g in got] == [(0, 3), (3, 12)]
    assert got[0].response.controller_id == 9
    assert got[1].response.error_code == 27
    assert client.in_flight == 0


def test_response_out_of_order_is_a_correlation_error() -> None:
    client, server = ClientConnection(), ServerConnection()
    client.send_request(ApiVersionsRequest(), 0)
    c1, _ = client.send_request(ApiVersionsRequest(), 0)
    client.receive_data(server.send_response(c1, 18, 0, ApiVersionsResponse()))
    with pytest.raises(CorrelationError):
        client.next_event()


def test_unknown_correlation_id_is_a_correlation_error() -> None:
    client, server = ClientConnection(), ServerConnection()
    client.send_request(ApiVersionsRequest(), 0)
    client.receive_data(server.send_response(999, 18, 0, ApiVersionsResponse()))
    with pytest.raises(CorrelationError):
        client.next_event()


def test_response_with_nothing_in_flight_is_a_correlation_error() -> None:
    client, server = ClientConnection(), ServerConnection()
    client.send_request(ProduceRequest(acks=0), 3, expect_response=False)
    client.receive_data(server.send_response(0, 0, 3, ApiVersionsResponse()))
    with pytest.raises(CorrelationError) as info:
        client.next_event()
    assert isinstance(info.value, KayakError)


def test_failed_encode_leaves_nothing_in_flight() -> None:
    client, server = ClientConnection(), ServerConnection()
    with pytest.raises(EncodeError):
        client.send_request(MetadataRequest(topics=None), 0)  # v0 topics are not nullable
    with pytest.raises(UnsupportedVersionError):
        client.send_request(MetadataRequest(), MetadataRequest.MAX_VERSION + 1)
    assert client.in_flight == 0
    assert client.pending_requests() == []
    # the next request still pairs with its response
    corr, frame = client.send_request(MetadataRequest(), 1)
    (event,) = feed(server, frame, None)
    assert event.correlation_id == corr
    (got,) = feed(client, server.send_response(corr, 3, 1, MetadataResponse(controller_id=4)), None)
    assert got.response.controller_id == 4


def test_tracker_ids_wrap_at_int32_max() -> None:
    tracker = CorrelationTracker()
    tracker._next_id = 2**31 - 1  # white-box: skip two billion requests
    assert tracker.register(18, 0) == 2**31 - 1
    assert tracker.register(18, 0) == 0
    assert tracker.match(2**31 - 1).api_key == 18
    assert tracker.match(0).correlation_id == 0
    assert len(tracker) == 0


# -- version negotiation -------------------------------------------------------------------------


def test_api_versions_v3_answered_at_v0_with_unsupported_version() -> None:
    """KIP-511: a broker that does not know our ApiVersions version answers at v0."""
    client = ClientConnection(client_id="new-client")
    corr, frame = client.send_request(
        ApiVersionsRequest(client_software_name="kayak", client_software_version="9.9"), 3
    )
    server = ServerConnection()
    (event,) = feed(server, frame, None)
    assert event.request.client_software_name == "kayak"
    keys = [ApiVersion(api_key=18, min_version=0, max_version=2), ApiVersion(3, 0, 8)]
    reply = server.send_response(
        corr, 18, 0, ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=keys)
    )
    # a v0 body really is different from a v3 one (classic array, no tagged fields)
    assert reply[8:] == ApiVersionsResponse(error_code=35, api_keys=keys).encode(0)
    assert reply[8:] != ApiVersionsResponse(error_code=35, api_keys=keys).encode(3)
    (got,) = feed(client, reply, 1)
    assert got.correlation_id == corr
    assert got.response.error_code == UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in got.response.api_keys] == [
        (18, 0, 2),
        (3, 0, 8),
    ]


def test_api_versions_v3_success_is_decoded_at_v3() -> None:
    client, server = ClientConnection(), ServerConnection()
    corr, _ = client.send_request(ApiVersionsRequest(), 3)
    response = ApiVersionsResponse(
        api_keys=[ApiVersion(18, 0, 3)], throttle_time_ms=11, finalized_features_epoch=4
    )
    (got,) = feed(client, server.send_response(corr, 18, 3, response), None)
    assert got.response.throttle_time_ms == 11
    assert got.response.finalized_features_epoch == 4
    assert got.response.api_keys[0].max_version == 3


def _raw_request(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, 1) + b"x"
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (999, 0),
        (-1, 0),
        (ApiKey.METADATA, MetadataRequest.MAX_VERSION + 1),
        (ApiKey.API_VERSIONS, ApiVersionsRequest.MAX_VERSION + 1),
        (ApiKey.PRODUCE, -1),
        (ApiKey.FETCH, 32767),
    ],
)
def test_unsupported_request_keeps_the_stream_in_sync(api_key: int, version: int) -> None:
    server = ServerConnection()
    client = ClientConnection()
    # whatever body an unknown request has, it is skipped as a whole frame
    stream = _raw_request(api_key, version, 4242, b"\x00\xff" * 50)
    corr, frame = client.send_request(HeartbeatRequest(group_id="g"), 4)
    events = feed(server, stream + frame, 3)
    assert events[0] == UnsupportedRequest(api_key, version, 4242)
    assert isinstance(events[1], RequestReceived)
    assert events[1].correlation_id == corr
    assert events[1].request.group_id == "g"


def test_server_answers_unsupported_api_versions_so_client_can_retry() -> None:
    server = ServerConnection()
    (event,) = feed(server, _raw_request(ApiKey.API_VERSIONS, 99, 5, b"\x07garbage"), None)
    assert isinstance(event, UnsupportedRequest)
    reply = server.send_response(
        event.correlation_id,
        event.api_key,
        0,
        ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=[ApiVersion(18, 0, 3)]),
    )
    assert reply[4:8] == struct.pack(">i", 5)
    assert ApiVersionsResponse.decode(reply[8:], 0).api_keys == [ApiVersion(18, 0, 3)]


# -- bad values -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "version"),
    [
        (FetchRequest(max_wait_ms=2**31), 4),  # int32 overflow
        (FetchRequest(isolation_level=128), 4),  # int8 overflow
        (FetchRequest(isolation_level=-129), 12),
        (FetchRequest(session_epoch=1.5), 7),  # type: ignore[arg-type]
        (ApiVersionsResponse(api_keys=[ApiVersion(api_key=2**15)]), 3),  # int16 overflow
        (ProduceRequest(timeout_ms=-(2**31) - 1), 9),
        (JoinGroupRequest(group_id=None), 6),  # type: ignore[arg-type]  # never nullable
        (JoinGroupRequest(protocol_type=None), 1),  # type: ignore[arg-type]
        (MetadataRequest(topics=None), 0),  # nullable only from v1
        (MetadataRequest(topics=[MetadataRequestTopic(name=None)]), 9),  # nullable from v10
        (FindCoordinatorRequest(coordinator_keys=None), 4),  # type: ignore[arg-type]
        (FetchRequest(topics=[object()]), 4),  # type: ignore[list-item]
        (MetadataRequest(topics=[MetadataRequestTopic(topic_id="not-a-uuid")]), 10),  # type: ignore[arg-type]
        (HeartbeatRequest(group_id="x" * 40_000), 0),  # int16 string length
    ],
    ids=[
        "int32-overflow",
        "int8-overflow",
        "int8-underflow",
        "float-for-int",
        "int16-overflow",
        "int32-underflow",
        "null-string",
        "null-string-v1",
        "null-array-v0",
        "null-name-v9",
        "null-array",
        "wrong-struct",
        "bad-uuid",
        "string-too-long",
    ],
)
def test_bad_values_raise_encode_error(message: Message, version: int) -> None:
    with pytest.raises(EncodeError):
        message.encode(version)
    with pytest.raises(EncodeError):
        ClientConnection().send_request(message, version)


def test_null_allowed_where_the_version_allows_it() -> None:
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    MetadataRequest(topics=[MetadataRequestTopic(name=None)]).encode(10)  # nullable from v10


@pytest.mark.parametrize("version", [-1, MetadataRequest.MAX_VERSION + 1, 1000])
def test_wrong_version_raises_unsupported_version(version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        MetadataRequest().encode(version)
    with pytest.raises(UnsupportedVersionError):
        MetadataRequest.decode(b"\x00" * 16, version)
    with pytest.raises(UnsupportedVersionError):
        ServerConnection().send_response(0, ApiKey.METADATA, version, MetadataResponse())
    assert issubclass(UnsupportedVersionError, KayakError)


# -- hostile bytes --------------------------------------------------------------------------------


@functools.cache
def _rich_encoding(cls: type[Message], version: int) -> bytes:
    return rich(cls).encode(version)


def _cut_points(n: int) -> list[int]:
    if n <= 400:
        return list(range(n))
    rng = random.Random(n)
    return sorted({*range(64), *range(n - 64, n), *rng.sample(range(n), 150)})


@pytest.mark.parametrize("kind", ["request", "response"])
@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda k: ApiKey(k).name)
def test_every_truncation_is_malformed(api_key: int, kind: str) -> None:
    cls = request_class(api_key) if kind == "request" else response_class(api_key)
    for version in all_versions(cls):
        for full in (cls().encode(version), _rich_encoding(cls, version)):
            assert cls.decode(full, version).encode(version) == full
            for cut in _cut_points(len(full)):
                with pytest.raises(MalformedMessageError):
                    cls.decode(full[:cut], version)


def test_truncated_request_frames_through_the_server() -> None:
    for api_key in API_KEYS:
        cls = request_class(api_key)
        version = cls.MAX_VERSION
        _, frame = ClientConnection().send_request(rich(cls), version)
        for cut in range(4, len(frame), 3):  # header and body, every strict prefix
            payload = frame[4:cut]
            server = ServerConnection()
            server.receive_data(struct.pack(">i", len(payload)) + payload)
            with pytest.raises(MalformedMessageError):
                server.next_event()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(ALL_REQUEST_VERSIONS + ALL_RESPONSE_VERSIONS),
    is_request=st.booleans(),
    data=st.binary(max_size=120),
)
def test_random_bodies_raise_only_kayak_errors(
    case: tuple[int, int], is_request: bool, data: bytes
) -> None:
    api_key, version = case
    cls = request_class(api_key) if is_request else response_class(api_key)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        return
    with contextlib.suppress(KayakError):
        cls.decode(data, version)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(ALL_REQUEST_VERSIONS + ALL_RESPONSE_VERSIONS),
    is_request=st.booleans(),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_encodings_raise_only_kayak_errors(
    case: tuple[int, int], is_request: bool, flips: list[tuple[int, int]]
) -> None:
    api_key, version = case
    cls = request_class(api_key) if is_request else response_class(api_key)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        return
    data = bytearray(_rich_encoding(cls, version))
    if not data:
        return
    for pos, value in flips:
        data[pos % len(data)] = value
    with contextlib.suppress(KayakError):
        cls.decode(bytes(data), version)


@settings(max_examples=800, deadline=None)
@given(
    api_key=st.sampled_from([*API_KEYS, 999, -5]),
    version=st.integers(min_value=-2, max_value=20),
    client_id=st.one_of(st.none(), st.text(max_size=10)),
    body=st.binary(max_size=80),
    raw_header_tail=st.binary(max_size=6),
    use_raw=st.booleans(),
)
def test_server_survives_garbage_frames(
    api_key: int,
    version: int,
    client_id: str | None,
    body: bytes,
    raw_header_tail: bytes,
    use_raw: bool,
) -> None:
    if use_raw:  # a header whose client id / tagged fields are garbage too
        payload = struct.pack(">hhi", api_key, version, 1) + raw_header_tail + body
    else:
        cid = b"\xff\xff" if client_id is None else client_id.encode()
        cid_len = -1 if client_id is None else len(cid)
        header = struct.pack(">hhih", api_key, version, 1, cid_len) + (
            b"" if client_id is None else cid
        )
        payload = header + body
    server = ServerConnection()
    server.receive_data(struct.pack(">i", len(payload)) + payload)
    try:
        event = server.next_event()
    except KayakError:
        return
    assert isinstance(event, RequestReceived | UnsupportedRequest)
    assert event.correlation_id == 1
    if isinstance(event, UnsupportedRequest):
        cls = request_class(api_key) if api_key in API_MESSAGES else None
        assert cls is None or not cls.MIN_VERSION <= version <= cls.MAX_VERSION


@settings(max_examples=800, deadline=None)
@given(case=st.sampled_from(ALL_RESPONSE_VERSIONS), body=st.binary(max_size=80))
def test_client_survives_garbage_responses(case: tuple[int, int], body: bytes) -> None:
    api_key, version = case
    client = ClientConnection()
    corr, _ = client.send_request(rich(request_class(api_key)), version)
    payload = struct.pack(">i", corr) + body
    client.receive_data(struct.pack(">i", len(payload)) + payload)
    try:
        event = client.next_event()
    except KayakError:
        return
    assert event is not None
    assert event.correlation_id == corr


def test_short_frames_are_malformed() -> None:
    server = ServerConnection()
    server.receive_data(struct.pack(">i", 7) + b"\x00" * 7)
    with pytest.raises(MalformedMessageError):
        server.next_event()
    client = ClientConnection()
    client.send_request(ApiVersionsRequest(), 0)
    client.receive_data(struct.pack(">i", 3) + b"\x00" * 3)
    with pytest.raises(MalformedMessageError):
        client.next_event()


def test_huge_counts_fail_fast_without_allocating() -> None:
    # an array claiming 2**31-1 elements in a tiny frame must be refused up front
    body = struct.pack(">i", 2**31 - 1)  # MetadataRequest v1: topics array length
    with pytest.raises(MalformedMessageError):
        MetadataRequest.decode(body + b"\x00" * 8, 1)
    compact = b"\xff\xff\xff\xff\x07"  # compact array length varint: 2**31 - 1 + ...
    with pytest.raises(MalformedMessageError):
        MetadataRequest.decode(compact + b"\x00" * 8, 9)
    # a string claiming 32767 bytes with 3 present
    with pytest.raises(MalformedMessageError):
        FindCoordinatorRequest.decode(b"\x7f\xffabc", 0)
