"""The machine's floor for answering small requests: a server that does no work at all.

It frames requests exactly as kayak's broker does (``FrameDecoder``, a ``BufferedProtocol`` on
uvloop, one ``writelines`` per read) and answers every Produce request with the same
successful ProduceResponse, encoded once per version, only its correlation id patched in:
no decoding, no storage, no fsync. Its CPU per request at a given connection count and depth
is what the event loop and the socket system calls cost on this machine, the part of a
broker's per-request CPU that no request handling can remove.

Run as ``python bench/empty_server.py PORT``; :func:`peers.start_empty_server` does that.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kayak.protocol.framing import FrameDecoder
from kayak.protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kayak.protocol.primitives import SplicedBuffer

_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_PRODUCE = 0
_FIRST_FLEXIBLE_PRODUCE = 9


def canned_produce_response(version: int, topic: str) -> bytes:
    """The frame answering any Produce request at ``version``, correlation id 0."""
    out = SplicedBuffer(4)
    header_size = 5 if version >= _FIRST_FLEXIBLE_PRODUCE else 4  # flexible: a tag count
    out.extend(bytes(header_size))
    partition = PartitionProduceResponse(index=0, base_offset=0)
    ProduceResponse(
        responses=[TopicProduceResponse(name=topic, partition_responses=[partition])]
    ).write(out, version)
    struct.pack_into(">i", out, 0, out.total_size - 4)
    return bytes(out)


class EmptyServerConnection(asyncio.BufferedProtocol):
    """Frames in, the canned answer out; anything but Produce closes the connection."""

    def __init__(self, topic: str, canned: dict[int, bytes]) -> None:
        self._frames = FrameDecoder(100 * 1024 * 1024)
        self._topic = topic
        self._canned = canned
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._frames.buffer_updated(nbytes)
        out: list[bytes] = []
        while (frame := self._frames.next_frame()) is not None:
            api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
            if api_key != _PRODUCE:
                assert self._transport is not None
                self._transport.close()
                return
            answer = self._canned.get(version)
            if answer is None:
                answer = self._canned[version] = canned_produce_response(version, self._topic)
            out.append(answer[:4] + correlation_id.to_bytes(4, "big", signed=True) + answer[8:])
        if out and self._transport is not None:
            self._transport.writelines(out)


async def serve(port: int, topic: str) -> None:
    canned: dict[int, bytes] = {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: EmptyServerConnection(topic, canned), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "appends"))
