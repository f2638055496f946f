"""One client connection to one broker: many requests in flight, versions negotiated.

The socket side is an ``asyncio.BufferedProtocol``: each response is received straight into a
buffer of exactly the size its prefix announced, so a large fetch response costs one copy
from the kernel and is then decoded in place (its records are views of that buffer). The
protocol side is kayak's sans-I/O :class:`~kayak.protocol.ClientConnection`.

On connect, ApiVersions tells which versions the broker speaks; every request then goes at
the highest version both sides know, so the same client works with old and new clusters.

Security (``ConnectionSecurity``, one per client): with TLS the socket is wrapped by asyncio's
SSL transport (which feeds the same buffered receiver); with SASL the connection
authenticates after ApiVersions, and again before the session the broker granted expires
(KIP-368): requests already sent carry on, new ones wait until re-authentication is done,
then leave in the order they were made.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any, cast

from kayak import __version__
from kayak.client.security.channel import PLAINTEXT, ConnectionSecurity
from kayak.client.security.config import SaslSettings
from kayak.client.security.sasl import SaslLoginThrottledError, authenticate
from kayak.client.security.tls import tls_failure
from kayak.client.statistics import ConnectionCounters
from kayak.errors import (
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

# Re-authenticate after this share of the session lifetime, picked at random per connection
# so that many connections do not all re-authenticate at once (as Kafka's Java client does).
_REAUTH_AT = (0.85, 0.95)

# A request made while the connection re-authenticates: written when that is done.
_Held = tuple[Message, int, bool, "asyncio.Future[Message] | None"]


class _FrameReceiver(asyncio.BufferedProtocol):
    """Reads responses into the buffers the sans-I/O framer hands out: a large response is
    received straight into a buffer of exactly its size (see ``protocol/framing.py``)."""

    def __init__(self, owner: BrokerConnection) -> None:
        self._owner = owner
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    @property
    def _replaced(self) -> bool:
        """Whether the owner has moved on to a new socket (a throttled login retried)."""
        return self._owner._receiver is not self

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._replaced:
            return memoryview(bytearray(max(sizehint, 1024)))
        return self._owner._protocol.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._replaced:
            return
        self._owner.counters.rx_bytes += nbytes
        self._owner._protocol.buffer_updated(nbytes)
        self._owner._responses_arrived()

    def eof_received(self) -> bool | None:
        if not self._replaced:
            self._owner._fail(NetworkError("the broker closed the connection"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._replaced:
            return
        if isinstance(exc, ssl.SSLError):
            # E.g. TLS 1.3: the broker refuses our certificate after the handshake.
            self._owner._fail(tls_failure(exc, self._owner.host, self._owner.port))
            return
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
        security: ConnectionSecurity = PLAINTEXT,
        counters: ConnectionCounters | None = None,
    ) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.request_timeout = request_timeout_ms / 1000
        self.security = security
        self._client_id, self._max_frame_size = client_id, max_frame_size
        self._protocol = ClientConnection(client_id=client_id, max_frame_size=max_frame_size)
        self._receiver = _FrameReceiver(self)
        self._waiters: dict[int, asyncio.Future[Message]] = {}
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._error: KayakError | None = None
        self._closed = False
        self._held: list[_Held] | None = None  # a list while re-authenticating
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self.authentications = 0  # SASL authentications done on this connection
        # Requests, bytes and round trips (see kayak.client.statistics); given by the owner to
        # keep counting across reconnects, else this connection's own.
        self.counters = counters if counters is not None else ConnectionCounters()
        self._sent_at: dict[int, float] = {}  # correlation id -> when written, for the RTT

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    # -- connecting ---------------------------------------------------------------------

    async def connect(self, timeout: float) -> None:
        """Open the socket (with TLS if configured), negotiate API versions and authenticate
        (with SASL if configured).

        Raises NetworkError/KafkaTimeoutError when the broker cannot be reached;
        ``SslAuthenticationError`` when the TLS handshake fails (untrusted certificate, wrong
        host name, ...) and ``SaslAuthenticationFailedError`` when the credentials are
        refused: those two name the broker and are not worth retrying. A login the broker
        did not check for now, saying when to retry (too many logins from this address in
        line), is retried on a new socket then, within ``request.timeout.ms``.
        """
        deadline = time.monotonic() + max(self.request_timeout, timeout)
        while True:
            try:
                await self._connect_once(timeout)
                return
            except SaslLoginThrottledError as exc:
                wait = max(exc.retry_after_s, 0.05)
                if self._closed or time.monotonic() + wait > deadline:
                    raise
                log.info("%s; retrying in %gs", exc.message, wait)
            self._start_over()
            await asyncio.sleep(wait)
            if self._closed:
                raise NetworkError("connection closed by the client")

    def _start_over(self) -> None:
        """Drop the socket and the protocol state for a new connection attempt."""
        old = self._receiver
        self._receiver = _FrameReceiver(self)
        if old.transport is not None:
            old.transport.close()
        self._protocol = ClientConnection(
            client_id=self._client_id, max_frame_size=self._max_frame_size
        )
        self._waiters = {}
        self._sent_at.clear()
        self._error = None
        self.api_versions = {}

    async def _connect_once(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        context = self.security.ssl_context
        tls: dict[str, Any] = {}
        if context is not None:
            tls = {"ssl": context, "server_hostname": self.host, "ssl_handshake_timeout": timeout}
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: self._receiver, self.host, self.port, **tls)
        except TimeoutError:
            raise KafkaTimeoutError(f"connecting to {self.host}:{self.port} timed out") from None
        except ssl.SSLError as exc:
            if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                # Closed mid-handshake: maybe not a TLS port, maybe a broker going away.
                raise NetworkError(
                    f"cannot connect to {self.host}:{self.port}: the broker closed the "
                    "connection during the TLS handshake; does it speak TLS on that port?"
                ) from exc
            raise tls_failure(exc, self.host, self.port) from exc
        except OSError as exc:
            if context is not None and isinstance(exc, ConnectionResetError):
                raise NetworkError(
                    f"cannot connect to {self.host}:{self.port}: the TLS handshake was cut off "
                    f"({exc or type(exc).__name__}); does the broker speak TLS on that port?"
                ) from exc
            raise NetworkError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        transport = self._receiver.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await self._negotiate_versions()
        except NetworkError as exc:
            if context is None:
                raise
            # A broker refusing our client certificate (or the lack of one) under TLS 1.3
            # closes the connection after the handshake, often without a readable alert. It
            # stays retriable: a broker at its connection limit closes the same way.
            raise NetworkError(
                f"{exc.message}, right after the TLS handshake with {self.host}:{self.port}: "
                "if the broker requires client certificates, set ssl.certificate.location and "
                "ssl.key.location to one signed by a CA it trusts"
            ) from exc
        if self.security.sasl is not None:
            self._authenticated(await authenticate(self, self.security.sasl))

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

    # -- SASL (re-)authentication -------------------------------------------------------

    async def authentication_request(self, message: Message, version: int) -> Any:
        """Send a SASL request now, ahead of any held requests, and await its response."""
        waiter = self._write(message, version, True)
        assert waiter is not None
        return await self.wait_response(waiter, message)

    def _authenticated(self, lifetime_ms: int) -> None:
        self.authentications += 1
        if lifetime_ms <= 0 or self._closed:
            return
        delay = lifetime_ms / 1000 * random.uniform(*_REAUTH_AT)
        self._reauth_timer = asyncio.get_running_loop().call_later(delay, self._reauthenticate)

    def _reauthenticate(self) -> None:
        self._reauth_timer = None
        if self._error is not None or self._closed or self.security.sasl is None:
            return
        self._held = []
        self._reauth_task = asyncio.ensure_future(self._run_reauthentication(self.security.sasl))

    async def _run_reauthentication(self, settings: SaslSettings) -> None:
        try:
            lifetime_ms = await authenticate(self, settings)
        except KayakError as exc:
            log.warning("re-authentication with broker %s:%s failed: %s", self.host, self.port, exc)
            self._fail(exc)
            return
        held, self._held = self._held or [], None
        for message, version, expect_response, waiter in held:
            self._write(message, version, expect_response, waiter)
        log.debug("%s re-authenticated; %d held requests sent", self, len(held))
        self._authenticated(lifetime_ms)

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
        if self._held is not None:
            held = asyncio.get_running_loop().create_future() if expect_response else None
            self._held.append((message, version, expect_response, held))
            return held
        return self._write(message, version, expect_response)

    def _write(
        self,
        message: Message,
        version: int,
        expect_response: bool,
        waiter: asyncio.Future[Message] | None = None,
    ) -> asyncio.Future[Message] | None:
        if self._error is not None:
            if waiter is not None and not waiter.done():
                waiter.set_exception(self._error)
                return waiter
            raise self._error
        correlation_id, parts = self._protocol.send_request_parts(message, version, expect_response)
        transport = self._receiver.transport
        assert transport is not None
        if expect_response:
            waiter = waiter or asyncio.get_running_loop().create_future()
            self._waiters[correlation_id] = waiter
            self._sent_at[correlation_id] = time.monotonic()
        counters = self.counters
        counters.tx += 1
        requests = counters.requests
        cls = type(message)
        requests[cls] = requests.get(cls, 0) + 1
        if len(parts) == 1:
            data = _wire_bytes(parts[0])
            counters.tx_bytes += _size(data)
            transport.write(data)
        else:
            chunks = [_wire_bytes(part) for part in parts]
            counters.tx_bytes += sum(map(_size, chunks))
            transport.writelines(chunks)
        return waiter

    async def wait_response(
        self, waiter: asyncio.Future[Message], message: Message, timeout: float | None = None
    ) -> Any:
        """The response ``waiter`` (from :meth:`send`) resolves to, within ``timeout`` (default
        ``request.timeout.ms``); after a timeout the connection is given up."""
        try:
            async with asyncio.timeout(timeout or self.request_timeout):
                response = await waiter
        except TimeoutError:
            # The stream is now out of step with what we think is pending: give it up.
            self._fail(KafkaTimeoutError(f"request to {self} timed out"))
            raise KafkaTimeoutError(
                f"{type(message).__name__} to {self.host}:{self.port} got no response in "
                f"{timeout or self.request_timeout:g}s (request.timeout.ms)"
            ) from None
        return response

    def in_flight(self) -> int:
        return len(self._waiters) + len(self._held or ())

    # -- receiving ----------------------------------------------------------------------

    def _responses_arrived(self) -> None:
        now = 0.0
        counters = self.counters
        while self._error is None:
            try:
                event = self._protocol.next_event()
            except ProtocolError as exc:
                self._fail(exc)
                return
            if event is None:
                return
            counters.rx += 1
            sent = self._sent_at.pop(event.correlation_id, None)
            if sent is not None:
                now = now or time.monotonic()  # one clock read for the responses of one read
                counters.rtt.add(now - sent)
            waiter = self._waiters.pop(event.correlation_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event.response)

    def _fail(self, error: KayakError) -> None:
        if self._error is None:
            self._error = error
            if not self._closed:
                log.debug("%s failed: %s", self, error)
        waiters, self._waiters = self._waiters, {}
        self._sent_at.clear()
        held, self._held = self._held or [], None
        for waiter in [*waiters.values(), *(h[3] for h in held if h[3] is not None)]:
            if not waiter.done():
                waiter.set_exception(error)
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        transport = self._receiver.transport
        if transport is not None:
            transport.close()

    @property
    def usable(self) -> bool:
        return self._error is None and self._receiver.transport is not None

    async def close(self) -> None:
        self._closed = True
        self._fail(NetworkError("connection closed by the client"))
        task, self._reauth_task = self._reauth_task, None
        if task is not None and not task.done():
            task.cancel()


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


def _size(data: bytes | bytearray | memoryview) -> int:
    return data.nbytes if type(data) is memoryview else len(data)


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
