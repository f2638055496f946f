"""Sans-I/O Kafka connections, one per side: bytes in, events out; messages in, bytes out.

Nothing here touches a socket. The caller reads from its transport, calls
``receive_data``, then drains ``next_event`` until it returns None; to send, it writes
whatever ``send_request``/``send_response`` return.
"""

from __future__ import annotations

import struct

from kayak.errors import MalformedMessageError
from kayak.protocol.correlation import CorrelationTracker
from kayak.protocol.events import RequestReceived, ResponseReceived, UnsupportedRequest
from kayak.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from kayak.protocol.headers import request_header_version, response_header_version
from kayak.protocol.message import Message
from kayak.protocol.messages import API_MESSAGES, ApiKey, request_class, response_class
from kayak.protocol.messages.request_header import RequestHeader
from kayak.protocol.messages.response_header import ResponseHeader
from kayak.protocol.primitives import INT16, INT32, Buffer, RecordsRegion, SplicedBuffer

# The first fields of every request header: api key, api version, correlation id.
_REQUEST_KEYS = struct.Struct(">hhi")

_UNSUPPORTED_VERSION = 35


def _framed(out: bytearray) -> bytes:
    """Fill the four bytes reserved at the start of ``out`` with the frame size."""
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


class ClientConnection:
    """The client side of one Kafka connection."""

    def __init__(
        self, client_id: str | None = "kayak", max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    ) -> None:
        self.client_id = client_id
        self._frames = FrameDecoder(max_frame_size)
        self._tracker = CorrelationTracker()

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived."""
        return len(self._tracker)

    def send_request(
        self, request: Message, version: int, expect_response: bool = True
    ) -> tuple[int, bytes]:
        """Encode ``request`` at ``version`` as a frame; returns its correlation id and bytes.

        Pass ``expect_response=False`` only for what the protocol answers with silence
        (Produce with acks=0), so the tracker does not wait for it.
        """
        out = bytearray(4)
        correlation_id = self._encode_request(out, request, version, expect_response)
        return correlation_id, _framed(out)

    def send_request_parts(
        self, request: Message, version: int, expect_response: bool = True
    ) -> tuple[int, list[memoryview | RecordsRegion]]:
        """Like ``send_request``, without copying: the frame as parts to write in order.

        Records fields may hold a ``RecordsRegion`` (say, an encoded record batch kept as it
        is); such a part is the region itself, for the caller to write. The other parts are
        views of one encoding buffer.
        """
        out = SplicedBuffer(4)
        correlation_id = self._encode_request(out, request, version, expect_response)
        INT32.pack_into(out, 0, out.total_size - 4)
        return correlation_id, out.parts()

    def _encode_request(
        self, out: bytearray, request: Message, version: int, expect_response: bool
    ) -> int:
        api_key = request.API_KEY
        header = RequestHeader(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=0,
            client_id=self.client_id,
        )
        header.write(out, request_header_version(api_key, version))
        request.write(out, version)
        # Register only once encoding succeeded: a request that raised was never sent, and a
        # phantom in the tracker would make the next response look out of order. Every header
        # version starts api_key (2), api_version (2), correlation_id (4) after the size.
        correlation_id = self._tracker.register(api_key, version, expect_response)
        INT32.pack_into(out, 8, correlation_id)
        return correlation_id

    def receive_data(self, data: Buffer) -> None:
        """Feed bytes read from the transport."""
        self._frames.feed(data)

    def get_buffer(self) -> memoryview:
        """Where to read the next bytes into (see :class:`~kayak.protocol.framing.FrameDecoder`:
        the rest of the response being received, so a large one is never copied)."""
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the buffer :meth:`get_buffer` returned last."""
        self._frames.buffer_updated(nbytes)

    def next_event(self) -> ResponseReceived | None:
        """The next whole response, decoded, or None until more bytes arrive."""
        frame = self._frames.next_frame()
        if frame is None:
            return None
        return self.receive_frame(frame)

    def receive_frame(self, frame: Buffer) -> ResponseReceived:
        """Decode one whole response frame (without its size prefix).

        For transports that do their own framing, e.g. receiving straight into a buffer of
        the announced size; records fields come back as views of ``frame``.
        """
        if len(frame) < 4:
            raise MalformedMessageError(f"response frame of {len(frame)} bytes has no header")
        correlation_id = INT32.unpack_from(frame, 0)[0]
        pending = self._tracker.match(correlation_id)
        api_key, version = pending.api_key, pending.api_version
        _, pos = ResponseHeader.read(frame, 0, response_header_version(api_key, version))
        cls = response_class(api_key)
        if api_key == ApiKey.API_VERSIONS and self._answered_at_v0(frame, pos, version):
            version = 0
        response, _ = cls.read(frame, pos, version)
        return ResponseReceived(correlation_id, api_key, version, response)

    @staticmethod
    def _answered_at_v0(frame: Buffer, pos: int, version: int) -> bool:
        """A broker that does not know our ApiVersions version answers at v0 (KIP-511)."""
        if version == 0 or len(frame) < pos + 2:
            return False
        return bool(INT16.unpack_from(frame, pos)[0] == _UNSUPPORTED_VERSION)

    def pending_requests(self) -> list[tuple[int, int, int]]:
        """``(correlation_id, api_key, api_version)`` of every request still waiting."""
        return [(p.correlation_id, p.api_key, p.api_version) for p in self._tracker.pending()]


class ServerConnection:
    """The server side of one Kafka connection."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._frames = FrameDecoder(max_frame_size, lazy_large_frames=True)

    @property
    def max_frame_size(self) -> int:
        """The largest request frame accepted; a larger size prefix raises at once.

        Settable between events, e.g. small until a client has authenticated, then larger.
        A new limit applies to the frame whose size prefix is checked next.
        """
        return self._frames.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        self._frames.max_frame_size = value

    @property
    def buffered(self) -> int:
        """Bytes of a request received but not yet complete (a request under way)."""
        return self._frames.buffered

    def receive_data(self, data: Buffer) -> None:
        """Feed bytes read from the transport."""
        self._frames.feed(data)

    def get_buffer(self) -> memoryview:
        """Where to read the next bytes into (see :class:`~kayak.protocol.framing.FrameDecoder`:
        the rest of the request being received, so a large produce is never copied)."""
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the buffer :meth:`get_buffer` returned last."""
        self._frames.buffer_updated(nbytes)

    def next_event(self) -> RequestReceived | UnsupportedRequest | None:
        """The next whole request, or None until more bytes arrive.

        Raises :class:`~kayak.errors.ProtocolError` for a frame that cannot be a request;
        the connection should then be closed.
        """
        frame = self._frames.next_frame()
        if frame is None:
            return None
        if len(frame) < 8:
            raise MalformedMessageError(f"request frame of {len(frame)} bytes has no header")
        api_key, api_version, correlation_id = _REQUEST_KEYS.unpack_from(frame, 0)
        if api_key not in API_MESSAGES:
            return UnsupportedRequest(api_key, api_version, correlation_id)
        cls = request_class(api_key)
        if not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
            return UnsupportedRequest(api_key, api_version, correlation_id)
        header, pos = RequestHeader.read(frame, 0, request_header_version(api_key, api_version))
        request, _ = cls.read(frame, pos, api_version)
        return RequestReceived(header, request)

    def send_response(
        self, correlation_id: int, api_key: int, api_version: int, response: Message
    ) -> SplicedBuffer:
        """Encode ``response`` to the request ``correlation_id`` as a frame.

        The result is a bytearray; if the response's records fields hold regions (file
        slices), ``splices`` is non-empty and the frame must be sent as ``parts()``.
        """
        out = SplicedBuffer(4)
        ResponseHeader(correlation_id=correlation_id).write(
            out, response_header_version(api_key, api_version)
        )
        response.write(out, api_version)
        INT32.pack_into(out, 0, out.total_size - 4)
        return out
