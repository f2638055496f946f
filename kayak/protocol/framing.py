"""Size-prefixed framing: a byte stream in, whole frames out, and back.

Every Kafka request and response travels as an int32 size followed by that many bytes. The
size is checked against a limit as soon as its four bytes arrive, before any of the frame is
buffered, so a lying or hostile peer cannot make us allocate more than the limit. A server
(``lazy_large_frames``) assembles a frame over 1 MiB in anonymous memory that the kernel backs
only as bytes arrive, so a client that announces a large request and sends nothing costs
address space, not memory; a client trusts its broker's announced sizes and takes ordinary
buffers, which the allocator reuses without page faults (large fetch responses stay fast).

Each frame is assembled in a buffer of exactly its announced size, which it then owns: decoded
messages may keep views of it (record batches are never copied out). Bytes arrive one of two
ways, and both end in the same frames:

* ``get_buffer()`` / ``buffer_updated(n)``, for transports that read into a buffer they are
  given (``asyncio.BufferedProtocol``): while a frame is being assembled the transport reads
  straight into the rest of that frame, so a large frame costs no user-space copy at all;
  between frames it reads into a scratch buffer, and small frames are copied out of it once;
* ``feed(data)``, for bytes already read (``asyncio.Protocol.data_received``, tests): one copy.
"""

from __future__ import annotations

import mmap
import sys
from collections import deque

from kayak.errors import FrameTooLargeError, KayakError, MalformedMessageError
from kayak.protocol.primitives import INT32, Buffer
from kayak.protocol.records.native import codec

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default

_PREFIX = 4
# Frames above this are assembled in lazily backed anonymous memory (see the module's doc).
_LAZY_FRAME_SIZE = 1 << 20
# Where reads go between frames: big enough for a burst of small frames in one read.
_SCRATCH_SIZE = 64 * 1024


def encode_frame(payload: Buffer) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return INT32.pack(len(payload)) + bytes(payload)


Frame = bytearray | memoryview
"""One frame's bytes, owned by whoever took it: a bytearray, or for a large frame a writable
view of anonymous memory that is unmapped when the last view of it goes."""


# A frame is filled whole before it is handed out, so its buffer need not be zeroed first
# (the C codec's when built: bytearray(size) writes a megabyte fetch answer twice).
_new_bytearray = bytearray if codec is None else codec.unfilled_bytearray


def _frame_buffer(size: int, lazy_above: int) -> Frame:
    if size <= lazy_above:
        return _new_bytearray(size)
    return memoryview(mmap.mmap(-1, size))


class FrameDecoder:
    """Reassembles size-prefixed frames from a byte stream, each into its own buffer.

    ``max_frame_size`` may be changed between frames (say, raised once a peer has
    authenticated); it applies to the next size prefix that arrives. A bad prefix (negative,
    or over the limit) is raised by :meth:`next_frame` once the frames before it are taken;
    nothing after it is assembled.
    """

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, lazy_large_frames: bool = False
    ) -> None:
        self.max_frame_size = max_frame_size
        self._lazy_above = _LAZY_FRAME_SIZE if lazy_large_frames else sys.maxsize
        self._ready: deque[Frame] = deque()
        self._prefix = bytearray(_PREFIX)
        self._prefix_filled = 0
        self._frame: Frame | None = None
        self._filled = 0
        self._scratch = bytearray(_SCRATCH_SIZE)
        self._error: KayakError | None = None
        self._buffered = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as frames (prefixes included)."""
        return self._buffered

    # -- bytes in -------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """Where the transport should read next: the rest of the frame being assembled, or
        scratch space between frames. Call :meth:`buffer_updated` with what was read."""
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the buffer :meth:`get_buffer` returned last."""
        frame = self._frame
        if frame is not None:
            self._buffered += nbytes
            self._filled += nbytes
            if self._filled == len(frame):
                self._finish_frame()
            return
        with memoryview(self._scratch) as scratch:
            self._consume(scratch[:nbytes])

    def feed(self, data: Buffer) -> None:
        """Add bytes already read from the stream."""
        with memoryview(data) as view:
            self._consume(view.cast("B") if view.format != "B" else view)

    def _consume(self, data: memoryview) -> None:
        """Split ``data`` into prefixes and frame bytes (copying each into its frame)."""
        self._buffered += len(data)
        pos, end = 0, len(data)
        while pos < end and self._error is None:
            frame = self._frame
            if frame is None and not self._prefix_filled and end - pos >= _PREFIX:
                # Between frames with a whole prefix at hand (the common case for a burst of
                # small requests): read it in place, and take a whole frame in one slice.
                size = INT32.unpack_from(data, pos)[0]
                if 0 <= size <= self._lazy_above and size <= self.max_frame_size:
                    start = pos + _PREFIX
                    if end - start >= size:
                        self._ready.append(bytearray(data[start : start + size]))
                        pos = start + size
                        continue
            if frame is None:
                take = min(_PREFIX - self._prefix_filled, end - pos)
                filled = self._prefix_filled
                self._prefix[filled : filled + take] = data[pos : pos + take]
                self._prefix_filled += take
                pos += take
                if self._prefix_filled == _PREFIX:
                    self._start_frame(INT32.unpack(self._prefix)[0])
                continue
            take = min(len(frame) - self._filled, end - pos)
            # Through a view: a bytearray's own slice assignment copies a memoryview twice.
            with memoryview(frame) as into:
                into[self._filled : self._filled + take] = data[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(frame):
                self._finish_frame()

    def _start_frame(self, size: int) -> None:
        if size < 0:
            self._error = MalformedMessageError(f"negative frame size {size}")
        elif size > self.max_frame_size:
            self._error = FrameTooLargeError(
                f"frame of {size} bytes exceeds the limit of {self.max_frame_size} bytes"
            )
        else:
            self._prefix_filled = 0
            self._frame, self._filled = _frame_buffer(size, self._lazy_above), 0
            if size == 0:
                self._finish_frame()

    def _finish_frame(self) -> None:
        assert self._frame is not None
        self._ready.append(self._frame)
        self._frame, self._filled = None, 0

    # -- frames out -----------------------------------------------------------------------

    def pending_frame_size(self) -> int | None:
        """Size of the next frame to come out, once its prefix has arrived (checked first)."""
        if self._ready:
            return len(self._ready[0])
        if self._error is not None:
            raise self._error
        if self._frame is not None:
            return len(self._frame)
        return None

    def next_frame(self) -> Frame | None:
        """The next whole frame's payload (a buffer it owns), or None until more bytes arrive."""
        if self._ready:
            frame = self._ready.popleft()
            self._buffered -= _PREFIX + len(frame)
            return frame
        if self._error is not None:
            raise self._error
        return None
