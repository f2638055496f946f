"""One client connection: bytes in, requests handled concurrently, responses out in order.

Every request starts its handler as soon as it is decoded, in arrival order (so appends reach
the log in the order a producer pipelined them), but responses leave in request order, as
the protocol requires. That lets a producer keep several acks=all requests in flight on one
connection and have them all ride the same group-commit fsync.

Fetch responses carry file slices instead of record bytes; on a plaintext listener those go
out with ``os.sendfile`` on a duplicate of the socket's descriptor once the transport's own
buffer has drained, so record data never passes through Python. On a TLS listener the bytes
must be encrypted first, so slices are read and written through the TLS transport.

Each connection carries a :class:`ConnectionSession` (listener, principal, SASL state) that
decides which requests may run. Deadlines (``connections.max.idle.ms`` and the time a started
request has to arrive completely) are checked by :class:`ConnectionTracker`'s periodic sweep
over timestamps the connection keeps, so the request path pays for no timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import cast

from kayak.broker.connection_tracker import ConnectionTracker
from kayak.broker.context import BrokerContext, RequestContext
from kayak.broker.handlers import (
    ANSWERED_NOW,
    HANDLERS,
    ImmediateHandler,
    error_response,
    unsupported_version_response,
)
from kayak.broker.log import FileSlice
from kayak.broker.security.listeners import Listener
from kayak.broker.security.session import ConnectionSession
from kayak.broker.security.tls import principal_from_peercert
from kayak.broker.versions import is_supported
from kayak.errors import FrameTooLargeError, KafkaError, ProtocolError
from kayak.protocol import RequestReceived, ServerConnection, UnsupportedRequest
from kayak.protocol.message import Message
from kayak.protocol.primitives import SplicedBuffer

log = logging.getLogger(__name__)

# Stop reading from a client that does not read its responses once this much is queued.
_MAX_BUFFERED_RESPONSES = 16 * 1024 * 1024

# A request's times for the metrics (``time.monotonic()``, read where the connection reads
# the clock anyway when it can): received, handler started, handler done, dequeued for
# sending; None when the metrics are off.
Timing = list[float]
Pending = tuple[int, int, int, "asyncio.Future[Message | None]", Timing | None]

# Requests an expired SASL session may still send: re-authentication (KIP-368).
_REAUTHENTICATION_APIS = frozenset({17, 36})


class BrokerConnection(asyncio.BufferedProtocol):
    """The broker's side of one TCP connection.

    Requests are read into the buffers the sans-I/O framer hands out (a produce request's
    batches land in a buffer of exactly the request's size and reach the log from there).
    Each request runs as a task, except Produce, which appends as it is read and is answered
    through a future (``ANSWERED_NOW``) unless a task read before it has yet to start. When
    the oldest unanswered request finishes, every finished response at the head of the queue
    is encoded and written together, once per event-loop pass, so that a group commit that
    releases many requests costs one write per connection.
    """

    def __init__(
        self,
        broker: BrokerContext,
        listener: Listener,
        tracker: ConnectionTracker,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.broker = broker
        self.listener = listener
        self._tracker = tracker
        # TLS listeners: the connection is admitted (counted against the limits) when it is
        # accepted, then its socket is handed to the loop's TLS handshake (_hand_over_to_tls).
        self._tls = tls
        self._handshake: asyncio.Task[None] | None = None
        self._protocol = ServerConnection(broker.config.socket_request_max_bytes)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()  # looked up once: each lookup costs a getpid()
        self._client_host = "?"
        self.session = ConnectionSession(listener, "?")
        self._send_fd = -1
        # Deadline bookkeeping, read by the tracker's sweep (time.monotonic() seconds).
        self._last_activity = time.monotonic()
        self._receiving_since = 0.0  # when a partly received request began; 0: none
        self._in_flight = 0  # requests received and not yet answered
        self._unstarted = 0  # request tasks whose handler has not started yet
        self._pending: deque[Pending] = deque()
        self._flush_scheduled = False
        # Set while a response with file slices is being sent: responses behind it wait.
        self._slow_writer: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False
        self._released = False  # not (or no longer) counted by the tracker: refused or lost
        self._metrics = tracker.metrics
        self._unsent: list[tuple[int, Timing]] = []  # encoded, not yet written (metrics)

    # -- transport callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        if self._handshake is not None:  # the TLS transport, its handshake done
            self._serve(transport)
            return
        peer = transport.get_extra_info("peername")
        self._client_host = str(peer[0]) if peer else "?"
        if not self._tracker.admit(self, self._client_host):
            self._released = True
            self._closed = True
            transport.close()
            return
        self.session = ConnectionSession(self.listener, self._client_host)
        self._last_activity = time.monotonic()
        if self._tls is not None:
            # Counted from accept, so sockets that never finish (or start) a handshake use
            # up max.connections(.per.ip) like any other, for at most the handshake timeout.
            self._hand_over_to_tls(transport, self._tls)
            return
        self._serve(transport)

    def _hand_over_to_tls(self, transport: asyncio.Transport, context: ssl.SSLContext) -> None:
        """Give the accepted socket to the loop's TLS server side (connect_accepted_socket),
        which calls connection_made again once the handshake is done. Done before the loop
        reads anything from the plain transport (uvloop starts reading right after
        connection_made), so the ClientHello is still in the kernel for the TLS side."""
        raw = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        transport.set_protocol(asyncio.Protocol())  # its connection_lost is not this one's
        transport.abort()  # the duplicate descriptor keeps the TCP connection open
        self._handshake = self._loop.create_task(self._start_tls(raw, context))

    async def _start_tls(self, raw: socket.socket, context: ssl.SSLContext) -> None:
        timeout_s = self._tracker.receive_s
        try:
            await self._loop.connect_accepted_socket(
                lambda: self, raw, ssl=context, ssl_handshake_timeout=timeout_s
            )
        except asyncio.CancelledError:  # closed (the broker stops) during the handshake
            raw.close()
            self.connection_lost(None)
            raise
        except Exception as exc:  # a failed handshake fails in many ways
            log.info(
                "closing connection from %s: no TLS handshake within %d ms "
                "(request.receive.timeout.ms), or a failed one: %s",
                self._client_host, round(timeout_s * 1000), exc or type(exc).__name__,
            )  # fmt: skip
            raw.close()
            self.connection_lost(None)  # gives the slot back (once: it checks)

    def _serve(self, transport: asyncio.Transport) -> None:
        """The connection is admitted (and encrypted, on TLS listeners): requests may flow."""
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.listener.protocol.uses_tls:
            # sendfile would bypass the encryption: TLS connections write slices' bytes.
            principal = principal_from_peercert(transport.get_extra_info("peercert"))
            if principal is not None:
                self.session.principal = principal
        elif sock is not None:
            # A descriptor of our own for sendfile and its writability waits; the transport
            # keeps its registration on the original one.
            self._send_fd = os.dup(sock.fileno())
        # high=0: pause_writing fires whenever anything is buffered, resume once drained,
        # which is exactly when sendfile may take over the socket.
        transport.set_write_buffer_limits(high=0)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Authentication completes in a handler, and a client waits for that answer before
        # sending more, so checking here is early enough to raise the limit for what follows.
        self._protocol.max_frame_size = self._frame_limit()
        return self._protocol.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._last_activity = now = time.monotonic()
        self._protocol.buffer_updated(nbytes)
        completed = False
        while not self._closed:
            try:
                event = self._protocol.next_event()
            except FrameTooLargeError as exc:
                log.warning(
                    "closing connection from %s: %s (%s)",
                    self._client_host,
                    exc,
                    self._frame_limit_name(),
                )
                self.close()
                return
            except ProtocolError as exc:
                log.warning("closing connection from %s: %s", self._client_host, exc)
                self.close()
                return
            if event is None:
                break
            completed = True
            self._dispatch(event, now)
        if not self._protocol.buffered:
            self._receiving_since = 0.0
        elif completed or not self._receiving_since:
            self._receiving_since = now  # the bytes left over begin the next request

    def _frame_limit(self) -> int:
        """The largest request accepted now: sasl.server.max.receive.size until the session
        has authenticated (an anonymous peer cannot make us buffer much), then
        socket.request.max.bytes."""
        config = self.broker.config
        if self.session.authenticated:
            return config.socket_request_max_bytes
        return min(config.sasl_server_max_receive_size, config.socket_request_max_bytes)

    def _frame_limit_name(self) -> str:
        config = self.broker.config
        if (
            not self.session.authenticated
            and config.sasl_server_max_receive_size < config.socket_request_max_bytes
        ):
            return "sasl.server.max.receive.size, before SASL authentication"
        return "socket.request.max.bytes"

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
        if self._released:
            return
        self._released = True  # once: a failed TLS handshake may report it twice
        self._closed = True
        self._drained.set()
        self._cancel_pending()
        if self._send_fd >= 0:
            os.close(self._send_fd)
            self._send_fd = -1
        self._tracker.remove(self, self._client_host)

    def close(self) -> None:
        """Close the connection; requests in flight are abandoned."""
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        elif self._handshake is not None:  # still in its TLS handshake
            self._handshake.cancel()

    def check_deadlines(self, now: float, idle_s: float, receive_s: float) -> None:
        """Close if a started request is overdue, or if idle for ``idle_s`` (the sweep)."""
        if self._closed:
            return
        if self._receiving_since and now - self._receiving_since > receive_s:
            log.warning(
                "closing connection from %s: a request started %.1fs ago is still incomplete "
                "(request.receive.timeout.ms=%d)",
                self._client_host,
                now - self._receiving_since,
                round(receive_s * 1000),
            )
            self.close()
        elif not self._in_flight and now - self._last_activity > idle_s:
            log.info(
                "closing connection from %s: idle for %.1fs (connections.max.idle.ms=%d)",
                self._client_host,
                now - self._last_activity,
                round(idle_s * 1000),
            )
            self.close()

    # -- requests -----------------------------------------------------------------------

    def _dispatch(self, event: RequestReceived | UnsupportedRequest, received: float) -> None:
        key, version, correlation_id = event.api_key, event.api_version, event.correlation_id
        if not self._session_allows(key):
            return
        timing = None if self._metrics is None else [received, 0.0, 0.0, 0.0]
        answer: asyncio.Future[Message | None]
        ready: Callable[[asyncio.Future[Message | None]], None] = self._response_ready
        if isinstance(event, RequestReceived) and is_supported(key, version) and key in HANDLERS:
            self.broker.catalog.follow()
            ctx = RequestContext(self.broker, event.header, self._client_host, self.session)
            now = ANSWERED_NOW.get(key)
            if now is not None and not self._unstarted:
                # Run now only behind requests already started, so that handlers still
                # start in the order their requests arrived.
                answer = self._answer_now(now, ctx, event.request, timing)
                if timing is not None:  # the handler's end, stamped as the answer comes
                    ready = functools.partial(self._answered, timing)
            else:
                self._unstarted += 1
                answer = self._loop.create_task(self._handle(ctx, event.request, timing))
        else:
            answer = self._loop.create_task(self._unsupported(key, version, timing))
        self._in_flight += 1
        self._pending.append((correlation_id, key, version, answer, timing))
        answer.add_done_callback(ready)

    def _session_allows(self, api_key: int) -> bool:
        """Whether the session lets ``api_key`` run now; if not, the connection is closed
        without an answer, as Kafka closes unauthenticated or expired sessions."""
        session = self.session
        if not session.admits(api_key):
            log.warning(
                "closing connection from %s on %s: API %d before SASL authentication",
                self._client_host,
                session.listener.name,
                api_key,
            )
        elif (
            session.expires_at is not None
            and api_key not in _REAUTHENTICATION_APIS
            and session.expired()
        ):
            log.info(
                "closing connection from %s (%s): its SASL session expired without "
                "re-authentication (connections.max.reauth.ms)",
                self._client_host,
                session.principal,
            )
        else:
            return True
        self.close()
        return False

    async def _handle(
        self, ctx: RequestContext, request: Message, timing: Timing | None
    ) -> Message | None:
        self._unstarted -= 1
        if timing is not None:
            timing[1] = time.monotonic()
        try:
            return await HANDLERS[ctx.header.request_api_key](ctx, request)
        except KafkaError as exc:
            # A whole-request failure a handler did not turn into per-partition codes.
            response = error_response(ctx.header.request_api_key, ctx.version, exc.code)
            if response is None:
                raise
            return response
        finally:
            if timing is not None:
                timing[2] = time.monotonic()

    def _answer_now(
        self,
        handler: ImmediateHandler,
        ctx: RequestContext,
        request: Message,
        timing: Timing | None,
    ) -> asyncio.Future[Message | None]:
        if timing is not None:
            timing[1] = time.monotonic()
        try:
            return handler(ctx, request, self._loop)
        except Exception as exc:  # answered as a task's handler would be: see _handle, _flush
            failed: asyncio.Future[Message | None] = self._loop.create_future()
            response = None
            if isinstance(exc, KafkaError):
                response = error_response(ctx.header.request_api_key, ctx.version, exc.code)
            if response is None:
                failed.set_exception(exc)
            else:
                failed.set_result(response)
            return failed

    async def _unsupported(
        self, api_key: int, version: int, timing: Timing | None
    ) -> Message | None:
        if timing is not None:
            timing[1] = timing[2] = time.monotonic()
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

    def _answered(self, timing: Timing, answer: asyncio.Future[Message | None]) -> None:
        timing[2] = time.monotonic()
        self._response_ready(answer)

    def _response_ready(self, _answer: asyncio.Future[Message | None]) -> None:
        """A request finished: write what is ready once this event-loop pass is over."""
        if not self._flush_scheduled and not self._closed:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Encode and write, in request order, every finished response at the head of the
        queue, as one write; a response with file slices hands over to ``_send_slow``."""
        self._flush_scheduled = False
        if self._slow_writer is not None or self._transport is None:
            return
        ready: list[memoryview] = []
        try:
            while not self._closed and self._pending and self._pending[0][3].done():
                out = self._next_response()
                if out is None:
                    continue
                if out.splices and any(isinstance(r, FileSlice) for _, r in out.splices):
                    slow = self._unsent.pop() if self._unsent else None
                    self._write_now(ready)
                    ready = []
                    self._slow_writer = self._loop.create_task(self._send_slow(out, slow))
                    return
                if out.splices:  # regions held in memory (copied slices): their bytes
                    ready.extend(
                        part if isinstance(part, memoryview) else memoryview(part.read())
                        for part in out.parts()
                    )
                else:
                    ready.append(memoryview(out))
                if self.session.close_after_response:
                    self._write_now(ready)
                    self.close()  # the transport still flushes what was written
                    return
        except Exception:
            self._write_now(ready)  # the answers before the failed one still go out
            log.exception("closing connection from %s after a handler failed", self._client_host)
            self.close()
            return
        self._write_now(ready)

    def _write_now(self, ready: list[memoryview]) -> None:
        if ready and not self._closed:
            assert self._transport is not None
            self._transport.writelines(ready)
        if self._unsent:
            self._record_sent()

    def _record_sent(self) -> None:
        """The encoded responses waiting in ``_unsent`` are written: time them."""
        metrics = self._metrics
        assert metrics is not None
        sent = time.monotonic()
        for api_key, (received, started, done, dequeued) in self._unsent:
            metrics.finished(api_key, received, started, done, dequeued, sent)
        self._unsent.clear()

    def _next_response(self) -> SplicedBuffer | None:
        """Take the finished request at the head of the queue and encode its response;
        None when there is nothing to send (acks=0 produce: the protocol says no response)."""
        correlation_id, api_key, version, answer, timing = self._pending.popleft()
        self._in_flight -= 1
        self._last_activity = now = time.monotonic()
        if answer.cancelled():
            raise ConnectionError("request cancelled")  # only when the connection closes
        response = answer.result()
        if timing is not None:
            assert self._metrics is not None
            timing[3] = now
            if response is None:  # acks=0: counted, with nothing to send
                received, started, done, _ = timing
                self._metrics.finished(api_key, received, started, done, now, now)
                return None
            self._metrics.count_errors(api_key, response)
            self._unsent.append((api_key, timing))
        if response is None:
            return None
        if api_key == 18 and not is_supported(api_key, version):
            version = 0  # an UNSUPPORTED_VERSION ApiVersions answer is always v0
        return self._protocol.send_response(correlation_id, api_key, version, response)

    async def _send_slow(self, out: SplicedBuffer, timing: tuple[int, Timing] | None) -> None:
        """Send a response holding file slices (sendfile waits for the socket), then carry on
        with whatever finished meanwhile."""
        try:
            await self._send(out)
            if timing is not None:
                self._unsent.append(timing)
                self._record_sent()
            if self.session.close_after_response:
                self.close()
                return
            while not self._closed and self._pending and self._pending[0][3].done():
                next_out = self._next_response()
                if next_out is not None:
                    await self._send(next_out)
                    if self._unsent:
                        self._record_sent()
                    if self.session.close_after_response:
                        self.close()
                        return
        except (ConnectionError, OSError) as exc:
            log.info("connection from %s lost while writing: %s", self._client_host, exc)
            self.close()
        except Exception:
            log.exception("closing connection from %s after a handler failed", self._client_host)
            self.close()
        finally:
            self._slow_writer = None
        if not self._closed and self._pending and self._pending[0][3].done():
            self._flush()

    def _cancel_pending(self) -> None:
        while self._pending:
            self._pending.popleft()[3].cancel()
        if self._slow_writer is not None:
            self._slow_writer.cancel()

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
        offset, remaining = region.position, region.length
        while remaining:
            if self._closed:
                # A closing transport drops what it is given, our own descriptor does not:
                # sending now would put records on the wire without the frame around them
                # (a writer task that starts after close() would otherwise get here).
                raise ConnectionError("connection closed")
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


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
