"""A broker that drops the client's first Metadata request (a restart as the client starts):
the client's bootstrap retries it with backoff instead of failing its start."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

from kayak.broker import Broker
from kayak.client import Producer


async def _frame(reader: asyncio.StreamReader) -> bytes:
    size = await reader.readexactly(4)
    return size + await reader.readexactly(struct.unpack(">i", size)[0])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def test_a_connection_reset_during_bootstrap_is_retried(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_reset_then_produce(tmp_path), 45))


async def _reset_then_produce(tmp_path: Path) -> None:
    async with Broker(tmp_path / "data", port=0) as broker:
        host, port = broker.bootstrap_servers.split(":")
        first_requests: list[bytes] = []

        async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            if len(first_requests) < 2:
                # Relay ApiVersions, then reset the connection under the Metadata request.
                upstream_writer.write(await _frame(reader))
                writer.write(await _frame(upstream_reader))
                first_requests.append(await reader.readexactly(4))
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                upstream_writer.close()
                return
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

        server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        proxy_port = server.sockets[0].getsockname()[1]
        async with server:
            config = {"bootstrap.servers": f"127.0.0.1:{proxy_port}",
                      "reconnect.backoff.ms": 20, "max.block.ms": 10_000}  # fmt: skip
            async with Producer(config) as producer:
                delivered = await producer.send("after-reset", b"x")
                metadata = await delivered
            assert metadata.offset == 0
            assert len(first_requests) == 2  # both Metadata resets were met, and ridden out


def test_a_connection_reset_under_a_new_topics_metadata_is_retried(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_reset_under_topic_metadata(tmp_path), 45))


async def _reset_under_topic_metadata(tmp_path: Path) -> None:
    """After the client started, the Metadata request for a topic it meets for the first time
    loses its connection (the broker asked restarts): ``send`` waits and retries within
    ``max.block.ms`` instead of raising NETWORK_EXCEPTION (seen in the crash harness)."""
    metadata_api_key = 3
    async with Broker(tmp_path / "data", port=0) as broker:
        host, port = broker.bootstrap_servers.split(":")
        armed = asyncio.Event()
        resets: list[int] = []

        async def relay_requests(reader: asyncio.StreamReader, upstream: asyncio.StreamWriter,
                                 writer: asyncio.StreamWriter) -> None:  # fmt: skip
            try:
                while True:
                    frame = await _frame(reader)
                    api_key = struct.unpack_from(">h", frame, 4)[0]
                    if api_key == metadata_api_key and armed.is_set():
                        armed.clear()
                        resets.append(api_key)
                        sock = writer.get_extra_info("socket")
                        linger = struct.pack("ii", 1, 0)
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                        writer.transport.abort()
                        upstream.close()
                        return
                    upstream.write(frame)
                    await upstream.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                upstream.close()

        async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            await asyncio.gather(relay_requests(reader, upstream_writer, writer),
                                 _pipe(upstream_reader, writer))  # fmt: skip

        server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        proxy_port = server.sockets[0].getsockname()[1]
        async with server:
            config = {"bootstrap.servers": f"127.0.0.1:{proxy_port}",
                      "reconnect.backoff.ms": 20, "max.block.ms": 10_000}  # fmt: skip
            async with Producer(config) as producer:
                armed.set()  # the next Metadata request, the new topic's, loses its connection
                delivered = await producer.send("met-late", b"x")
                metadata = await delivered
            assert metadata.offset == 0
            assert resets == [metadata_api_key]
