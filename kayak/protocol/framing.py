"""Size-prefixed framing: a byte stream in, whole frames out, and back.

Every Kafka request and response travels as an int32 size followed by that many bytes. The
size is checked against a limit as soon as its four bytes arrive, before any of the frame is
buffered, so a lying or hostile peer cannot make us allocate more than the limit.
"""

from __future__ import annotations

from kayak.errors import FrameTooLargeError, MalformedMessageError
from kayak.protocol.primitives import INT32, Buffer

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default

# Compacting the buffer on every frame would make a burst of small frames quadratic.
_COMPACT_THRESHOLD = 64 * 1024


def encode_frame(payload: Buffer) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return INT32.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Reassembles size-prefixed frames from arbitrary chunks of a byte stream.

    ``max_frame_size`` may be changed between frames (say, raised once a peer has
    authenticated); it applies to the next size prefix checked.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._start = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as frames."""
        return len(self._buf) - self._start

    def feed(self, data: Buffer) -> None:
        """Add bytes read from the stream."""
        self._buf += data

    def pending_frame_size(self) -> int | None:
        """Size of the frame being assembled, once its prefix has arrived (checked first)."""
        if self.buffered < 4:
            return None
        size: int = INT32.unpack_from(self._buf, self._start)[0]
        if size < 0:
            raise MalformedMessageError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds the limit of {self.max_frame_size} bytes"
            )
        return size

    def next_frame(self) -> bytes | None:
        """The next whole frame's payload, or None until more bytes arrive."""
        size = self.pending_frame_size()
        if size is None or self.buffered < 4 + size:
            return None
        start = self._start + 4
        with memoryview(self._buf) as view:  # one copy, and the export ends before any resize
            frame = bytes(view[start : start + size])
        self._start = start + size
        if self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        elif self._start > _COMPACT_THRESHOLD:
            del self._buf[: self._start]
            self._start = 0
        return frame
