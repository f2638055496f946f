"""connections.max.idle.ms, max.connections.per.ip and the deadline for a started request."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.server import Broker
from kayak.protocol.messages import ApiVersionsRequest, FetchRequest
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

CONNECTION_LOG = "kayak.broker.connection"


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start a broker with the given settings (stopped after the test)."""
    running: list[ThreadedBroker] = []

    def starter(**settings: Any) -> Broker:
        threaded = ThreadedBroker(tmp_path / f"data{len(running)}", **settings)
        broker = threaded.__enter__()
        running.append(threaded)
        return broker

    yield starter
    for threaded in running:
        threaded.__exit__(None, None, None)


def api_versions_ok(client: WireClient) -> bool:
    response: Any = client.request(ApiVersionsRequest(), 0)
    return bool(response.error_code == 0)


def test_idle_connections_are_closed(
    start: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CONNECTION_LOG)
    broker = start(connections_max_idle_ms=300)
    busy, idle = WireClient(broker.bootstrap_servers), WireClient(broker.bootstrap_servers)
    try:
        assert api_versions_ok(idle)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # a connection in use stays open
            assert api_versions_ok(busy)
            time.sleep(0.1)
        assert idle.closes_within(0.1) or idle.closes_within(3)
        assert not busy.closes_within(0.05)
    finally:
        busy.close()
        idle.close()
    idle_lines = [r for r in caplog.records if "connections.max.idle.ms=300" in r.getMessage()]
    assert len(idle_lines) == 1
    assert idle_lines[0].levelno == logging.INFO


def test_a_long_poll_is_not_idle(start: Callable[..., Broker]) -> None:
    broker = start(connections_max_idle_ms=200)
    client = WireClient(broker.bootstrap_servers)
    try:
        request = FetchRequest(
            max_wait_ms=1000,
            min_bytes=1,
            topics=[FetchTopic(topic="quiet", partitions=[FetchPartition(0, fetch_offset=0)])],
        )
        started = time.monotonic()
        response = client.request(request, 12)  # waits ~1 s for data that never comes
        assert response.responses  # type: ignore[attr-defined]
        assert time.monotonic() - started >= 0.5  # it really waited past the idle limit
    finally:
        client.close()


def test_connections_per_address_are_limited(
    start: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CONNECTION_LOG)
    broker = start(max_connections_per_ip=2)
    first, second = WireClient(broker.bootstrap_servers), WireClient(broker.bootstrap_servers)
    third = WireClient(broker.bootstrap_servers)
    try:
        assert api_versions_ok(first) and api_versions_ok(second)
        assert third.closes_within(5)
        warnings = [r for r in caplog.records if "max.connections.per.ip=2" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        first.close()
        # Once one closes, the address may connect again.
        deadline = time.monotonic() + 5
        while True:
            again = WireClient(broker.bootstrap_servers)
            try:
                if api_versions_ok(again):
                    break
            except ConnectionError:
                pass
            finally:
                again.close()
            assert time.monotonic() < deadline, "the freed slot was never given back"
            time.sleep(0.05)
        assert api_versions_ok(second)
    finally:
        for client in (first, second, third):
            client.close()


def test_a_request_that_never_finishes_arriving_is_closed(
    start: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CONNECTION_LOG)
    broker = start(request_receive_timeout_ms=300)
    half = WireClient(broker.bootstrap_servers)
    slow = WireClient(broker.bootstrap_servers)
    good = WireClient(broker.bootstrap_servers)
    try:
        half.send_raw(struct.pack(">i", 100) + b"\x00\x12\x00\x00")  # 8 of 104 bytes
        # A slowloris: a byte every 50 ms keeps bytes flowing, but the request never ends.
        slow.send_raw(struct.pack(">i", 100))
        closed_slow = False
        for _ in range(60):
            try:
                slow.send_raw(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed_slow = True
                break
            if slow.closes_within(0.05):
                closed_slow = True
                break
        assert closed_slow, "a slowly dripping request held its connection for 3 s"
        assert half.closes_within(3)
        assert api_versions_ok(good)  # whole requests are unaffected
    finally:
        for client in (half, slow, good):
            client.close()
    lines = [r for r in caplog.records if "request.receive.timeout.ms=300" in r.getMessage()]
    assert len(lines) == 2


def test_requests_split_across_reads_are_not_overdue(start: Callable[..., Broker]) -> None:
    """Every read ends mid-request, for longer than the deadline, but each request completes
    within it: the deadline runs per request, so the connection stays open."""
    from kayak.protocol import ClientConnection

    broker = start(request_receive_timeout_ms=300)
    client = WireClient(broker.bootstrap_servers)
    protocol = ClientConnection(client_id="split")
    try:
        frames = [bytes(protocol.send_request(ApiVersionsRequest(), 0)[1]) for _ in range(16)]
        stream = b"".join(frames)
        chunk = len(frames[0]) // 2 + len(frames[0])  # 1.5 requests per write
        for start_at in range(0, len(stream), chunk):
            client.send_raw(stream[start_at : start_at + chunk])
            time.sleep(0.1)  # 16 requests over ~1.1 s, past the 0.3 s deadline
        answered = 0
        client.sock.settimeout(5)
        while answered < len(frames):
            data = client.sock.recv(1 << 16)
            assert data, f"closed after {answered} of {len(frames)} answers"
            protocol.receive_data(data)
            while protocol.next_event() is not None:
                answered += 1
    finally:
        client.close()
