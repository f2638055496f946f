"""One client connection to one broker: many requests in flight, versions negotiated.

The socket side is an ``asyncio.BufferedProtocol``: each response is received straight into a
buffer of exactly the size its prefix announced, so a large fetch response costs one copy
from the kernel and is then decoded in place (its records are views of that buffer). The
protocol side is kayak's sans-I/O :class:`~kayak.protocol.ClientConnection`.

On connect, ApiVersions tells which versions the broker speaks; every request then goes at
the highest version both sides know, so the same client works with old and new clusters.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Any, cast

from kayak import __version__
from kayak.errors import (
    FrameTooLargeError,
    KafkaTimeoutError,
    KayakError,
    NetworkError,
    ProtocolError,
    UnsupportedVersionError,
    raise_for_code,
)
from kayak.protocol import ClientConnection, Message
from kayak.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from kayak.protocol.messages import ApiVersionsRequest
from kayak.protocol.primitives import RecordsRegion

log = logging.getLogger(__name__)

_HEADER = 4
# Buffers handed to the transport for frames whose size is not known yet.
_SMALL_READ = 64 * 1024


class _FrameReceiver(asyncio.BufferedProtocol):
    """Reads size-prefixed frames into exactly-sized buffers and hands them on."""

    def __init__(self, owner: BrokerConnection, max_frame_size: int) -> None:
        self._owner = owner
        self._max = max_frame_size
        self._prefix = bytearray(_HEADER)
        self._prefix_filled = 0
        self._frame: bytearray | None = None
        self._filled = 0
        self._scratch = bytearray(_SMALL_READ)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                self._deliver()
            return
        self._consume_scratch(memoryview(self._scratch)[:nbytes])

    def _consume_scratch(self, data: memoryview) -> None:
        """Split bytes read without a frame buffer into prefixes, frames and leftovers."""
        pos = 0
        while pos < len(data):
            if self._frame is None:
                take = min(_HEADER - self._prefix_filled, len(data) - pos)
                self._prefix[self._prefix_filled : self._prefix_filled + take] = data[
                    pos : pos + take
                ]
                self._prefix_filled += take
                pos += take
                if self._prefix_filled == _HEADER:
                    self._start_frame(int.from_bytes(self._prefix, "big", signed=True))
                continue
            take = min(len(self._frame) - self._filled, len(data) - pos)
            self._frame[self._filled : self._filled + take] = data[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(self._frame):
                self._deliver()

    def _start_frame(self, size: int) -> None:
        self._prefix_filled = 0
        if size < 0 or size > self._max:
            self._owner._fail(
                FrameTooLargeError(f"response frame of {size} bytes (limit {self._max})")
            )
            return
        self._frame, self._filled = bytearray(size), 0
        if size == 0:
            self._deliver()

    def _deliver(self) -> None:
        frame, self._frame, self._filled = self._frame, None, 0
        assert frame is not None
        self._owner._frame_received(frame)

    def eof_received(self) -> bool | None:
        self._owner._fail(NetworkError("the broker closed the connection"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost: {exc}" if exc else "connection closed"
        self._owner._fail(NetworkError(reason))


class BrokerConnection:
    """A connection to one broker, shared by everything that talks to that broker."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "kayak",
        request_timeout_ms: int = 30_000,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.request_timeout = request_timeout_ms / 1000
        self._protocol = ClientConnection(client_id=client_id, max_frame_size=max_frame_size)
        self._receiver = _FrameReceiver(self, max_frame_size)
        self._waiters: dict[int, asyncio.Future[Message]] = {}
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._error: KayakError | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    # -- connecting ---------------------------------------------------------------------

    async def connect(self, timeout: float) -> None:
        """Open the socket and negotiate API versions; raises NetworkError/KafkaTimeoutError."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self._receiver, self.host, self.port), timeout
            )
        except TimeoutError:
            raise KafkaTimeoutError(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise NetworkError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        transport = self._receiver.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await self._negotiate_versions()

    async def _negotiate_versions(self) -> None:
        request = ApiVersionsRequest(
            client_software_name="kayak-python", client_software_version=__version__
        )
        response = await self.request(request, version=3)
        if response.error_code == 35 and response.api_keys:
            pass  # the broker answered at v0 with its own table: use it
        elif response.error_code:
            raise_for_code(response.error_code)
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    # -- versions -----------------------------------------------------------------------

    def version_for(self, cls: type[Message], highest: int | None = None) -> int:
        """The highest version of ``cls``'s API that both this client and the broker speak."""
        return pick_version(self.api_versions, cls, highest)

    # -- requests -----------------------------------------------------------------------

    async def request(
        self,
        message: Message,
        version: int | None = None,
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Send ``message`` and wait for its response (None with ``expect_response=False``).

        Typed ``Any`` because the response's class depends on the request's API key;
        callers annotate the variable they assign it to.
        """
        waiter = self.send(message, version, expect_response=expect_response)
        if waiter is None:
            return None
        return await self.wait_response(waiter, message, timeout)

    def send(
        self, message: Message, version: int | None = None, *, expect_response: bool = True
    ) -> asyncio.Future[Message] | None:
        """Write ``message`` now; return the future of its response (None without one).

        For callers that must know a request is on the wire before they go on (the
        producer, whose requests must leave in the order it made them). Await the response
        with :meth:`wait_response`, which applies the request timeout.
        """
        if self._error is not None:
            raise self._error
        if version is None:
            version = self.version_for(type(message))
        correlation_id, parts = self._protocol.send_request_parts(message, version, expect_response)
        transport = self._receiver.transport
        assert transport is not None
        waiter: asyncio.Future[Message] | None = None
        if expect_response:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[correlation_id] = waiter
        if len(parts) == 1:
            transport.write(_wire_bytes(parts[0]))
        else:
            transport.writelines([_wire_bytes(part) for part in parts])
        return waiter

    async def wait_response(
        self, waiter: asyncio.Future[Message], message: Message, timeout: float | None = None
    ) -> Any:
        """The response ``waiter`` (from :meth:`send`) resolves to, within ``timeout`` (default
        ``request.timeout.ms``); after a timeout the connection is given up."""
        try:
            response = await asyncio.wait_for(waiter, timeout or self.request_timeout)
        except TimeoutError:
            # The stream is now out of step with what we think is pending: give it up.
            self._fail(KafkaTimeoutError(f"request to {self} timed out"))
            raise KafkaTimeoutError(
                f"{type(message).__name__} to {self.host}:{self.port} got no response in "
                f"{timeout or self.request_timeout:g}s (request.timeout.ms)"
            ) from None
        return response

    def in_flight(self) -> int:
        return len(self._waiters)

    # -- receiving ----------------------------------------------------------------------

    def _frame_received(self, frame: bytearray) -> None:
        try:
            event = self._protocol.receive_frame(frame)
        except ProtocolError as exc:
            self._fail(exc)
            return
        waiter = self._waiters.pop(event.correlation_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(event.response)

    def _fail(self, error: KayakError) -> None:
        if self._error is None:
            self._error = error
            if not self._closed:
                log.debug("%s failed: %s", self, error)
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        transport = self._receiver.transport
        if transport is not None:
            transport.close()

    @property
    def usable(self) -> bool:
        return self._error is None and self._receiver.transport is not None

    async def close(self) -> None:
        self._closed = True
        self._fail(NetworkError("connection closed by the client"))


class RecordsView:
    """Encoded record batches for a request's records field, written to the socket as they
    are instead of being copied into the request's encoding (a ``RecordsRegion``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return bytes(self.data)


def _wire_bytes(part: memoryview | RecordsRegion) -> bytes | bytearray | memoryview:
    if isinstance(part, memoryview):
        return part
    if isinstance(part, RecordsView):
        return part.data
    return part.read()


def pick_version(
    broker_versions: Mapping[int, tuple[int, int]], cls: type[Message], highest: int | None = None
) -> int:
    """Highest version of ``cls`` both sides support (capped at ``highest``)."""
    ours = min(cls.MAX_VERSION, highest if highest is not None else cls.MAX_VERSION)
    theirs = broker_versions.get(cls.API_KEY)
    if theirs is None:
        raise UnsupportedVersionError(
            f"the broker does not support {cls.NAME.removesuffix('Request')}"
        )
    version = min(ours, theirs[1])
    if version < max(cls.MIN_VERSION, theirs[0]):
        raise UnsupportedVersionError(
            f"no common {cls.NAME} version: broker {theirs[0]}-{theirs[1]}, kayak "
            f"{cls.MIN_VERSION}-{ours}"
        )
    return version
