"""One client connection: bytes in, requests handled concurrently, responses out in order.

Every request starts its handler as soon as it is decoded, in arrival order (so appends reach
the log in the order a producer pipelined them), but responses leave in request order, as
the protocol requires. That lets a producer keep several acks=all requests in flight on one
connection and have them all ride the same group-commit fsync.

Fetch responses carry file slices instead of record bytes; those go out with ``os.sendfile``
on a duplicate of the socket's descriptor once the transport's own buffer has drained, so
record data never passes through Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, cast

from kayak.broker.context import BrokerContext, RequestContext
from kayak.broker.handlers import HANDLERS, error_response, unsupported_version_response
from kayak.broker.log import FileSlice
from kayak.broker.versions import is_supported
from kayak.errors import KafkaError, ProtocolError
from kayak.protocol import RequestReceived, ServerConnection, UnsupportedRequest
from kayak.protocol.message import Message
from kayak.protocol.primitives import SplicedBuffer

log = logging.getLogger(__name__)

# Stop reading from a client that does not read its responses once this much is queued.
_MAX_BUFFERED_RESPONSES = 16 * 1024 * 1024

Pending = tuple[int, int, int, "asyncio.Task[Message | None]"]


class BrokerConnection(asyncio.Protocol):
    """The broker's side of one TCP connection."""

    def __init__(self, broker: BrokerContext, on_close: Callable[[BrokerConnection], None]) -> None:
        self.broker = broker
        self._on_close = on_close
        self._protocol = ServerConnection(broker.config.socket_request_max_bytes)
        self._transport: asyncio.Transport | None = None
        self._client_host = "?"
        self._send_fd = -1
        self._pending: asyncio.Queue[Pending | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False
        self._refused = False

    def refuse(self) -> None:
        """Close as soon as the transport exists (the broker is at max.connections)."""
        self._refused = True

    # -- transport callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        if self._refused:
            self._closed = True
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        self._client_host = str(peer[0]) if peer else "?"
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A descriptor of our own for sendfile and its writability waits; the transport
            # keeps its registration on the original one.
            self._send_fd = os.dup(sock.fileno())
        # high=0: pause_writing fires whenever anything is buffered, resume once drained,
        # which is exactly when sendfile may take over the socket.
        transport.set_write_buffer_limits(high=0)
        self._writer = asyncio.get_running_loop().create_task(self._write_responses())

    def data_received(self, data: bytes) -> None:
        self._protocol.receive_data(data)
        while not self._closed:
            try:
                event = self._protocol.next_event()
            except ProtocolError as exc:
                log.warning("closing connection from %s: %s", self._client_host, exc)
                self.close()
                return
            if event is None:
                return
            self._dispatch(event)

    def pause_writing(self) -> None:
        self._drained.clear()
        transport = self._transport
        if transport is not None and transport.get_write_buffer_size() > _MAX_BUFFERED_RESPONSES:
            transport.pause_reading()

    def resume_writing(self) -> None:
        self._drained.set()
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._closed = True
        self._drained.set()
        self._pending.put_nowait(None)
        if self._send_fd >= 0:
            os.close(self._send_fd)
            self._send_fd = -1
        self._on_close(self)

    def close(self) -> None:
        """Close the connection; requests in flight are abandoned."""
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    # -- requests -----------------------------------------------------------------------

    def _dispatch(self, event: RequestReceived | UnsupportedRequest) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(event, UnsupportedRequest):
            coro: Any = self._unsupported(event.api_key, event.api_version)
            key, version, correlation_id = event.api_key, event.api_version, event.correlation_id
        else:
            key, version, correlation_id = event.api_key, event.api_version, event.correlation_id
            if is_supported(key, version) and key in HANDLERS:
                self.broker.catalog.follow()
                ctx = RequestContext(self.broker, event.header, self._client_host)
                coro = self._handle(ctx, event.request)
            else:
                coro = self._unsupported(key, version)
        self._pending.put_nowait((correlation_id, key, version, loop.create_task(coro)))

    async def _handle(self, ctx: RequestContext, request: Message) -> Message | None:
        try:
            return await HANDLERS[ctx.header.request_api_key](ctx, request)
        except KafkaError as exc:
            # A whole-request failure a handler did not turn into per-partition codes.
            response = error_response(ctx.header.request_api_key, ctx.version, exc.code)
            if response is None:
                raise
            return response

    async def _unsupported(self, api_key: int, version: int) -> Message | None:
        response = unsupported_version_response(api_key, version)
        if response is None:
            log.warning(
                "closing connection from %s: API %d v%d is not supported and has no error "
                "response at that version",
                self._client_host,
                api_key,
                version,
            )
            self.close()
        return response

    # -- responses ----------------------------------------------------------------------

    async def _write_responses(self) -> None:
        try:
            while (item := await self._pending.get()) is not None:
                correlation_id, api_key, version, task = item
                response = await task
                if response is None or self._closed:
                    continue  # acks=0 produce: the protocol says no response
                if api_key == 18 and not is_supported(api_key, version):
                    version = 0  # an UNSUPPORTED_VERSION ApiVersions answer is always v0
                out = self._protocol.send_response(correlation_id, api_key, version, response)
                await self._send(out)
        except (ConnectionError, OSError) as exc:
            log.info("connection from %s lost while writing: %s", self._client_host, exc)
            self.close()
        except Exception:
            log.exception("closing connection from %s after a handler failed", self._client_host)
            self.close()
        finally:
            self._cancel_pending()

    def _cancel_pending(self) -> None:
        while not self._pending.empty():
            item = self._pending.get_nowait()
            if item is not None:
                item[3].cancel()

    async def _send(self, out: SplicedBuffer) -> None:
        transport = self._transport
        assert transport is not None
        if not out.splices:
            transport.write(out)
            return
        for part in out.parts():
            if isinstance(part, memoryview):
                transport.write(part)
            elif isinstance(part, FileSlice):
                await self._sendfile(part)
            else:
                transport.write(part.read())

    async def _sendfile(self, region: FileSlice) -> None:
        transport = self._transport
        assert transport is not None
        if self._send_fd < 0:
            transport.write(region.read())
            return
        while transport.get_write_buffer_size():
            self._drained.clear()
            await self._drained.wait()
            if self._closed:
                raise ConnectionError("connection closed")
        offset, remaining = region.position, region.length
        while remaining:
            try:
                sent = os.sendfile(self._send_fd, region.fd, offset, remaining)
            except BlockingIOError:
                await self._writable()
                continue
            if sent == 0:
                raise ConnectionError(f"segment ended {remaining} bytes early")
            offset += sent
            remaining -= sent

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = self._send_fd
        loop.add_writer(fd, _resolve, ready)
        try:
            await ready
        finally:
            loop.remove_writer(fd)
        if self._closed:
            raise ConnectionError("connection closed")


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
