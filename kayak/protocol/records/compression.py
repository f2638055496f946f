"""Record-batch compression codecs (gzip, snappy, lz4, zstd) on top of cramjam.

Decompression is bounded: every codec decompresses into a buffer of at most ``max_size``
bytes, so a few kilobytes that claim to expand to gigabytes fail with
:class:`~kayak.errors.CorruptRecordError` instead of exhausting memory.

Format notes that are easy to get wrong:

* snappy: Kafka's Java client writes snappy-java's "xerial" block framing (a 16-byte header
  ``\\x82SNAPPY\\x00`` + version + compat, then int32 length + raw snappy block, each block
  compressing at most 32 KiB); librdkafka writes one raw snappy block. Readers must accept
  both, so we do. We write the xerial framing, like the Java client, which every reader
  (Java, librdkafka, kafka-python, aiokafka) understands.
* lz4: the LZ4 *frame* format with independent blocks (KIP-57); Kafka's Java reader rejects
  linked blocks. Magic 0 messages written by Kafka 0.8/0.9 carry a wrong frame-header checksum
  (computed over the magic number too); :func:`decompress_legacy_lz4` repairs it.
* zstd: standard zstd frames.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

import cramjam

from kayak.errors import CorruptRecordError, UnsupportedCompressionTypeError

Buffer = bytes | bytearray | memoryview

DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
"""Default cap on one batch's decompressed size (the decompression-bomb guard)."""


class Codec(IntEnum):
    """Compression codec ids as stored in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's own defaults (KIP-390), so batches compare in size with what the Java client writes.
DEFAULT_LEVELS: dict[Codec, int] = {Codec.GZIP: 6, Codec.LZ4: 9, Codec.ZSTD: 3}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)  # 16
_XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"

# cramjam reports a too-small output buffer this way (Rust's io::ErrorKind::WriteZero); any
# other DecompressionError means the input is corrupt.
_OUTPUT_TOO_SMALL = "failed to write whole buffer"
_MIN_OUTPUT_GUESS = 64 * 1024


_CODECS = tuple(sorted(Codec, key=lambda codec: codec.value))


def codec_from_id(codec_id: int) -> Codec:
    """Return the :class:`Codec` for an attributes codec id, rejecting unknown ids."""
    if 0 <= codec_id < len(_CODECS):
        return _CODECS[codec_id]  # a tuple index: Codec(id) costs an Enum lookup per batch
    raise UnsupportedCompressionTypeError(
        f"unknown compression codec id {codec_id} (known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)"
    )


# -- compression ------------------------------------------------------------------------------


def compress(codec: Codec, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka expects for ``codec`` (``level`` None = Kafka default)."""
    if codec is Codec.NONE:
        return bytes(data)
    if codec is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_level(codec, level)))
    if codec is Codec.SNAPPY:
        return compress_snappy_xerial(data)
    if codec is Codec.LZ4:
        compressor = cramjam.lz4.Compressor(
            level=_level(codec, level), content_checksum=False, block_linked=False
        )
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec is Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_level(codec, level)))
    raise UnsupportedCompressionTypeError(f"cannot compress with codec {codec!r}")


def _level(codec: Codec, level: int | None) -> int:
    return DEFAULT_LEVELS[codec] if level is None else level


def compress_snappy_xerial(data: Buffer) -> bytes:
    """Snappy in snappy-java's block framing, as the Java client writes it."""
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# -- decompression ----------------------------------------------------------------------------


def decompress(codec: Codec, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a batch's records blob; at most ``max_size`` bytes of output.

    Raises :class:`~kayak.errors.CorruptRecordError` when the payload is not valid for the
    codec or would expand past ``max_size``.
    """
    if codec is Codec.NONE:
        return bytes(data)  # already in memory: nothing to guard against
    if codec is Codec.GZIP:
        return _decompress_bounded(
            codec, cramjam.gzip.decompress_into, data, _gzip_size_hint(data), max_size
        )
    if codec is Codec.SNAPPY:
        return decompress_snappy(data, max_size)
    if codec is Codec.LZ4:
        return _decompress_bounded(
            codec, cramjam.lz4.decompress_into, data, _lz4_size_hint(data), max_size
        )
    if codec is Codec.ZSTD:
        return _decompress_bounded(
            codec, cramjam.zstd.decompress_into, data, _zstd_size_hint(data), max_size
        )
    raise UnsupportedCompressionTypeError(f"cannot decompress codec {codec!r}")


def _too_large(codec: Codec, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec.name.lower()} records decompress to more than the {max_size}-byte limit"
    )


def _corrupt(codec: Codec, exc: Exception) -> CorruptRecordError:
    return CorruptRecordError(f"{codec.name.lower()} records do not decompress: {exc}")


def _decompress_bounded(
    codec: Codec,
    decompress_into: Callable[[Buffer, bytearray], int],
    data: Buffer,
    size_hint: int | None,
    max_size: int,
) -> bytes:
    """Decompress into growing buffers, never one larger than ``max_size`` (+1 to detect it).

    A size hint from the format (gzip's trailer, lz4/zstd content size) is untrusted: it only
    sizes the first attempt. Without one, start at a few times the input and grow.
    """
    guess = size_hint if size_hint is not None else max(len(data) * 4, _MIN_OUTPUT_GUESS)
    # One byte more than allowed, so "exactly max_size" and "more than max_size" differ.
    limit = max_size + 1
    size = max(1, min(guess, limit))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_TOO_SMALL not in str(exc):
                raise _corrupt(codec, exc) from None
            if size >= limit:
                raise _too_large(codec, max_size) from None
            size = min(size * 4, limit)
            continue
        if written > max_size:
            raise _too_large(codec, max_size)
        del out[written:]
        return bytes(out)


def _gzip_size_hint(data: Buffer) -> int | None:
    # ISIZE: the last 4 bytes of a gzip member, the input size mod 2**32 (little-endian).
    if len(data) < 18:
        return None
    return int.from_bytes(data[-4:], "little")


def _lz4_size_hint(data: Buffer) -> int | None:
    # Frame descriptor: magic(4) FLG(1) BD(1) [content size(8, LE) if FLG bit 3].
    if len(data) < 14 or data[:4] != _LZ4_FRAME_MAGIC or not data[4] & 0x08:
        return None
    return int.from_bytes(data[6:14], "little")


def _zstd_size_hint(data: Buffer) -> int | None:
    # Frame header: magic(4), descriptor(1), [window(1)], [dict id(0/1/2/4)], [content size].
    if len(data) < 6 or data[:4] != _ZSTD_FRAME_MAGIC:
        return None
    descriptor = data[4]
    size_flag = descriptor >> 6
    single_segment = descriptor & 0x20
    dict_id_size = (0, 1, 2, 4)[descriptor & 0x03]
    content_size_size = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if content_size_size == 0:
        return None
    start = 5 + (0 if single_segment else 1) + dict_id_size
    end = start + content_size_size
    if end > len(data):
        return None
    value = int.from_bytes(data[start:end], "little")
    return value + 256 if content_size_size == 2 else value


def decompress_snappy(data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress snappy in either Kafka dialect: xerial block framing or one raw block."""
    if len(data) >= _XERIAL_HEADER_SIZE and data[:8] == XERIAL_MAGIC:
        return _decompress_xerial(memoryview(data), max_size)
    return _decompress_snappy_block(data, max_size, max_size)


def _decompress_snappy_block(block: Buffer, budget: int, max_size: int) -> bytes:
    try:
        # A raw block starts with its uncompressed length; check it before allocating.
        size = cramjam.snappy.decompress_raw_len(block)
        if size > budget:
            raise _too_large(Codec.SNAPPY, max_size)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise _corrupt(Codec.SNAPPY, exc) from None


def _decompress_xerial(view: memoryview, max_size: int) -> bytes:
    # The version/compat ints are ignored, as every other reader does: some producers write
    # them little-endian, and only version 1 has ever existed.
    parts: list[bytes] = []
    budget = max_size
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError(f"snappy xerial block length truncated at offset {pos}")
        (block_size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_size < 0 or pos + block_size > end:
            raise CorruptRecordError(
                f"snappy xerial block of {block_size} bytes at offset {pos - 4} does not fit "
                f"in the {end}-byte payload"
            )
        block = _decompress_snappy_block(view[pos : pos + block_size], budget, max_size)
        budget -= len(block)
        parts.append(block)
        pos += block_size
    return b"".join(parts)


# -- Kafka 0.8/0.9 lz4 ------------------------------------------------------------------------


def decompress_legacy_lz4(data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress lz4 from a magic 0 message, repairing the old broken header checksum.

    Kafka before 0.10 computed the frame-descriptor checksum over the magic number as well
    (KIP-57). A frame with a correct checksum decodes as is.
    """
    try:
        return decompress(Codec.LZ4, data, max_size)
    except CorruptRecordError:
        repaired = _repair_lz4_header_checksum(data)
        if repaired is None:
            raise
        return decompress(Codec.LZ4, repaired, max_size)


def _repair_lz4_header_checksum(data: Buffer) -> bytes | None:
    if len(data) < 7 or data[:4] != _LZ4_FRAME_MAGIC:
        return None
    flags = data[4]
    checksum_pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if checksum_pos >= len(data):
        return None
    fixed = bytearray(data)
    fixed[checksum_pos] = (xxh32_short(bytes(data[4:checksum_pos])) >> 8) & 0xFF
    return bytes(fixed)


_PRIME32_1 = 2654435761
_PRIME32_2 = 2246822519
_PRIME32_3 = 3266489917
_PRIME32_4 = 668265263
_PRIME32_5 = 374761393
_MASK32 = 0xFFFFFFFF


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (all an lz4 frame descriptor ever needs)."""
    if len(data) >= 16:
        raise ValueError("xxh32_short only hashes inputs shorter than 16 bytes")
    acc = (seed + _PRIME32_5 + len(data)) & _MASK32
    pos = 0
    while pos + 4 <= len(data):
        lane = int.from_bytes(data[pos : pos + 4], "little")
        acc = (acc + lane * _PRIME32_3) & _MASK32
        acc = (_rotl32(acc, 17) * _PRIME32_4) & _MASK32
        pos += 4
    for byte in data[pos:]:
        acc = (acc + byte * _PRIME32_5) & _MASK32
        acc = (_rotl32(acc, 11) * _PRIME32_1) & _MASK32
    acc ^= acc >> 15
    acc = (acc * _PRIME32_2) & _MASK32
    acc ^= acc >> 13
    acc = (acc * _PRIME32_3) & _MASK32
    acc ^= acc >> 16
    return acc
