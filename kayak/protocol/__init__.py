"""The Kafka wire protocol as sans-I/O code: bytes in, events out; messages in, bytes out.

- :mod:`kayak.protocol.messages`: every request, response, header and data record, generated
  from Kafka's JSON specs (``tools/generate_protocol.py``).
- :mod:`kayak.protocol.connection`: :class:`ClientConnection` and :class:`ServerConnection`.
- :mod:`kayak.protocol.framing`: size-prefixed frames, with the size limit checked first.
- :mod:`kayak.protocol.records`: record batches (magic v2, CRC32C, compression) and legacy
  message sets.
- :mod:`kayak.protocol.primitives`: the wire's integer, varint, string and bytes encodings.

Nothing in this package opens a socket or needs an event loop.
"""

from __future__ import annotations

from kayak.protocol.connection import ClientConnection, ServerConnection
from kayak.protocol.correlation import CorrelationError, CorrelationTracker
from kayak.protocol.events import RequestReceived, ResponseReceived, UnsupportedRequest
from kayak.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from kayak.protocol.headers import request_header_version, response_header_version
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey, message_class, request_class, response_class

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ApiKey",
    "ClientConnection",
    "CorrelationError",
    "CorrelationTracker",
    "FrameDecoder",
    "Message",
    "RequestReceived",
    "ResponseReceived",
    "ServerConnection",
    "UnsupportedRequest",
    "encode_frame",
    "message_class",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
]
