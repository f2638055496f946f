"""Size-prefixed framing: reassembly from any chunking, and the size limit checked first."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kayak.errors import FrameTooLargeError, KayakError, MalformedMessageError
from kayak.protocol.connection import ClientConnection, ServerConnection
from kayak.protocol.framing import FrameDecoder, encode_frame
from kayak.protocol.messages import ApiVersionsRequest


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


def test_encode_frame_prefixes_int32_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(memoryview(b"xy")) == b"\x00\x00\x00\x02xy"
    assert encode_frame(bytearray(300)) == b"\x00\x00\x01\x2c" + bytes(300)


def test_frames_all_at_once() -> None:
    payloads = [b"first", b"", b"\x00" * 1000, "ünïcode".encode()]
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame(p) for p in payloads))
    assert drain(decoder) == payloads
    assert decoder.buffered == 0


def test_frames_one_byte_at_a_time() -> None:
    payloads = [b"a", b"bb", b"", b"dddd" * 10]
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got += drain(decoder)
        # a frame comes out exactly when its last byte arrives, never earlier
        complete = sum(1 for end in _frame_ends(payloads) if end <= i + 1)
        assert len(got) == complete
    assert got == payloads


def _frame_ends(payloads: list[bytes]) -> list[int]:
    ends, pos = [], 0
    for p in payloads:
        pos += 4 + len(p)
        ends.append(pos)
    return ends


def test_pending_frame_size_and_buffered() -> None:
    decoder = FrameDecoder()
    assert decoder.pending_frame_size() is None
    decoder.feed(b"\x00\x00")
    assert decoder.pending_frame_size() is None
    assert decoder.next_frame() is None
    decoder.feed(b"\x00\x05ab")
    assert decoder.pending_frame_size() == 5
    assert decoder.buffered == 6
    assert decoder.next_frame() is None
    decoder.feed(b"cde\x00")
    assert decoder.next_frame() == b"abcde"
    assert decoder.buffered == 1
    assert decoder.pending_frame_size() is None


def test_accepts_bytearray_and_memoryview_chunks() -> None:
    stream = encode_frame(b"hello") + encode_frame(b"world")
    decoder = FrameDecoder()
    decoder.feed(bytearray(stream[:3]))
    decoder.feed(memoryview(stream)[3:12])
    decoder.feed(memoryview(bytearray(stream[12:])))
    assert drain(decoder) == [b"hello", b"world"]


def test_each_frame_owns_its_buffer() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"abc") + encode_frame(b"def")[:5])
    frame = decoder.next_frame()
    decoder.feed(encode_frame(b"def")[5:])
    second = decoder.next_frame()
    assert second == b"def"
    assert frame == b"abc"
    assert isinstance(frame, bytearray) and len(frame) == 3  # exactly its size


def read_into(decoder: FrameDecoder, stream: bytes, chunk: int) -> list[bytes]:
    """Deliver ``stream`` the way a buffered transport does: into get_buffer(), ``chunk``
    bytes at most per read."""
    frames: list[bytes] = []
    pos = 0
    while pos < len(stream):
        target = decoder.get_buffer()
        n = min(len(target), chunk, len(stream) - pos)
        target[:n] = stream[pos : pos + n]
        decoder.buffer_updated(n)
        pos += n
        frames += drain(decoder)
    return frames


def test_buffered_reads_go_straight_into_the_frame() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: past the scratch buffer
    stream = encode_frame(b"small") + encode_frame(big) + encode_frame(b"")
    decoder = FrameDecoder()
    first = decoder.get_buffer()
    first[:14] = stream[:14]  # prefix, "small", and the big frame's prefix and first byte
    decoder.buffer_updated(14)
    assert decoder.next_frame() == b"small"
    target = decoder.get_buffer()
    # the next read lands in the big frame itself: exactly what is left of it
    assert len(target) == len(big) - 1
    target[:] = stream[14 : 14 + len(target)]
    decoder.buffer_updated(len(target))
    assert decoder.next_frame() == big
    assert read_into(decoder, stream[14 + len(big) - 1 :], 3) == [b""]
    assert decoder.buffered == 0


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=70_000), max_size=6),
    chunk=st.integers(min_value=1, max_value=200_000),
)
def test_buffered_and_fed_bytes_give_the_same_frames(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    assert read_into(decoder, stream, chunk) == payloads
    assert decoder.buffered == 0


@pytest.mark.parametrize("limit", [0, 1, 100, 1 << 20])
def test_oversize_frame_rejected_on_the_prefix_alone(limit: int) -> None:
    decoder = FrameDecoder(max_frame_size=limit)
    decoder.feed(struct.pack(">i", limit + 1)[:3])
    assert decoder.next_frame() is None  # three bytes say nothing yet
    decoder.feed(struct.pack(">i", limit + 1)[3:])  # fourth byte: no body sent at all
    with pytest.raises(FrameTooLargeError):
        decoder.pending_frame_size()
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    assert decoder.buffered == 4


def test_frame_exactly_at_the_limit_is_fine() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    decoder.feed(encode_frame(b"0123456789"))
    assert decoder.next_frame() == b"0123456789"


def test_huge_declared_size_fails_fast() -> None:
    decoder = FrameDecoder()  # default limit: 100 MiB
    decoder.feed(b"\x7f\xff\xff\xff")
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


@pytest.mark.parametrize("size", [-1, -(2**31), -100])
def test_negative_size_is_malformed(size: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", size) + b"whatever")
    with pytest.raises(MalformedMessageError):
        decoder.next_frame()


def test_oversize_frame_through_server_and_client_connections() -> None:
    server = ServerConnection(max_frame_size=64)
    server.receive_data(struct.pack(">i", 65))
    with pytest.raises(FrameTooLargeError):
        server.next_event()

    client = ClientConnection(max_frame_size=64)
    client.send_request(ApiVersionsRequest(), 0)
    client.receive_data(struct.pack(">i", 1 << 30))
    with pytest.raises(FrameTooLargeError):
        client.next_event()


def test_negative_size_through_connections() -> None:
    server = ServerConnection()
    server.receive_data(b"\xff\xff\xff\xf0")
    with pytest.raises(MalformedMessageError):
        server.next_event()
    client = ClientConnection()
    client.send_request(ApiVersionsRequest(), 0)
    client.receive_data(b"\x80\x00\x00\x00")
    with pytest.raises(MalformedMessageError):
        client.next_event()


def test_many_small_frames_across_buffer_compaction() -> None:
    # well past the 64 KiB compaction threshold, with frames straddling every chunk boundary
    payloads = [i.to_bytes(3, "big") * (i % 7) for i in range(40_000)]
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    got: list[bytes] = []
    step = 4093
    for start in range(0, len(stream), step):
        decoder.feed(stream[start : start + step])
        got += drain(decoder)
    assert got == payloads
    assert decoder.buffered == 0


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    decoder = FrameDecoder()
    got: list[bytes] = []
    for a, b in itertools.pairwise(points):
        decoder.feed(stream[a:b])
        got += drain(decoder)
    assert got == payloads
    assert decoder.buffered == 0


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64), limit=st.integers(min_value=0, max_value=40))
def test_random_streams_raise_only_kayak_errors(data: bytes, limit: int) -> None:
    decoder = FrameDecoder(max_frame_size=limit)
    decoder.feed(data)
    try:
        frames = drain(decoder)
    except KayakError:
        return
    assert all(len(f) <= limit for f in frames)
    assert sum(4 + len(f) for f in frames) + decoder.buffered == len(data)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_a_large_announced_frame_costs_memory_only_as_bytes_arrive() -> None:
    size = 96 << 20
    decoders = [FrameDecoder(lazy_large_frames=True) for _ in range(4)]  # the server's
    before = resident_bytes()
    for decoder in decoders:  # four peers each announce 96 MiB and send 10 bytes of it
        decoder.feed(struct.pack(">i", size) + b"0123456789")
        assert len(decoder.get_buffer()) == size - 10
    assert resident_bytes() - before < 16 << 20, "announced frames were allocated up front"
    decoder = decoders[0]
    rest = size - 10
    target = decoder.get_buffer()
    target[:] = b"x" * rest
    decoder.buffer_updated(rest)
    frame = decoder.next_frame()
    assert frame is not None and len(frame) == size
    assert bytes(frame[:12]) == b"0123456789xx" and frame[-1] == ord("x")


def test_the_server_side_assembles_large_requests_lazily() -> None:
    servers = [ServerConnection() for _ in range(4)]
    before = resident_bytes()
    for server in servers:
        server.receive_data(struct.pack(">i", 96 << 20) + b"\x00\x03\x00\x09")
        assert server.next_event() is None
    assert resident_bytes() - before < 16 << 20, "a peer's announced size was allocated"
