"""A cancel that meets an arriving response cancels: the client never loses it.

Before Python 3.12 ``asyncio.wait_for`` returns the awaited result when a cancel arrives in
the loop turn that result lands (python/cpython#86296), and the cancelled task runs on. A
consumer's close cancels its heartbeat and membership tasks and waits for them; CI met one
such lost cancel under load, and ``close()`` hung. kayak waits with ``asyncio.timeout``,
which lets every cancel through.
"""

from __future__ import annotations

import ast
import asyncio
import socket
import time
from pathlib import Path

import pytest

from kayak.client.connection import BrokerConnection
from kayak.errors import KafkaTimeoutError
from kayak.protocol.messages.metadata_request import MetadataRequest
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import run

KAYAK = Path(__file__).resolve().parents[2] / "kayak"


def test_a_request_cancelled_as_its_response_lands_is_cancelled(
    kafka_cluster: RunningBroker,
) -> None:
    host, port = kafka_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)

    async def main() -> None:
        connection = BrokerConnection(host, int(port))
        await connection.connect(10)
        try:
            for _ in range(20):
                task = await _cancelled_as_its_response_lands(connection)
                assert task.done()
                assert task.cancelled(), f"the cancel was swallowed: {task.result()!r}"
            # The connection is still in step: the next request gets its own answer.
            assert (await connection.request(MetadataRequest(topics=[]))).brokers
        finally:
            await connection.close()

    run(main())


async def _cancelled_as_its_response_lands(connection: BrokerConnection) -> asyncio.Task[object]:
    request = MetadataRequest(topics=[])
    waiter = connection.send(request)
    assert waiter is not None
    waiting: list[asyncio.Task[object]] = []
    # Registered before the task awaits: the cancel comes in the turn the response lands,
    # ahead of the task's own wake-up.
    waiter.add_done_callback(lambda _: waiting[0].cancel())
    waiting.append(asyncio.ensure_future(connection.wait_response(waiter, request)))
    await asyncio.wait(waiting, timeout=10)
    return waiting[0]


def test_a_request_without_an_answer_times_out_and_gives_up_the_connection() -> None:
    """The other side of the same wait: a broker that accepts and never answers. The request
    fails after ``request.timeout.ms`` naming itself, and the connection is given up."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]

        async def main() -> None:
            connection = BrokerConnection("127.0.0.1", port, request_timeout_ms=300)
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match=r"ApiVersionsRequest to 127\.0\.0\.1:\d+ "
                               r"got no response in 0\.3s \(request\.timeout\.ms\)"):
                await connection.connect(5)
            assert 0.3 <= time.monotonic() - started < 3
            assert not connection.usable

        run(main())


def test_kayak_never_waits_with_asyncio_wait_for() -> None:
    """The rule, for code written later: a timeout around an await is ``asyncio.timeout``."""
    offenders = []
    for path in sorted(KAYAK.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                offenders.append(f"{path.relative_to(KAYAK.parent)}:{node.lineno}")
    assert offenders == [], "asyncio.wait_for loses cancels before Python 3.12: " + ", ".join(
        offenders
    )
