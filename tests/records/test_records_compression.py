"""Codecs: round trips, both snappy dialects, the decompression-bomb guard, bad payloads."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kayak.errors import CorruptRecordError, KayakError, UnsupportedCompressionTypeError
from kayak.protocol.records import Codec, RecordBatch, build_record_batch, compress, decompress
from kayak.protocol.records.compression import (
    XERIAL_MAGIC,
    codec_from_id,
    decompress_legacy_lz4,
    decompress_snappy,
    xxh32_short,
)

COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
MiB = 1024 * 1024


@settings(max_examples=40, deadline=None)
@given(codec=st.sampled_from(list(Codec)), data=st.binary(max_size=5000), repeat=st.integers(1, 40))
def test_codecs_round_trip(codec: Codec, data: bytes, repeat: int) -> None:
    payload = data * repeat
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", COMPRESSED)
def test_empty_payload(codec: Codec) -> None:
    assert decompress(codec, compress(codec, b"")) == b""


def test_snappy_is_written_in_xerial_framing_with_32k_blocks() -> None:
    payload = os.urandom(100_000)
    framed = compress(Codec.SNAPPY, payload)
    assert framed.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    blocks, pos = [], 16
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == payload


def test_snappy_reads_raw_blocks_too() -> None:
    payload = b"librdkafka writes one raw block " * 100
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, raw) == payload
    assert decompress_snappy(raw) == payload


def test_xerial_with_little_endian_version_fields_still_reads() -> None:
    payload = b"redpanda-style header " * 50
    framed = bytearray(compress(Codec.SNAPPY, payload))
    framed[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(Codec.SNAPPY, bytes(framed)) == payload


def test_lz4_frames_use_independent_blocks() -> None:
    frame = compress(Codec.LZ4, b"abc" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "Kafka's Java reader rejects linked blocks (KIP-57)"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bomb_is_refused(codec: Codec) -> None:
    bomb = compress(codec, bytes(8 * MiB))
    assert len(bomb) < 1 * MiB
    with pytest.raises(CorruptRecordError, match="more than the 1048576-byte limit"):
        decompress(codec, bomb, max_size=1 * MiB)
    assert decompress(codec, bomb, max_size=8 * MiB) == bytes(8 * MiB)


def test_bomb_guard_counts_every_xerial_block() -> None:
    bomb = compress(Codec.SNAPPY, bytes(200_000))
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Codec.SNAPPY, bomb, max_size=100_000)


def test_bomb_guard_applies_to_batches() -> None:
    raw = build_record_batch([bytes(4 * MiB)], timestamp=0, codec=Codec.ZSTD)
    with pytest.raises(CorruptRecordError, match=r"base offset 0.*limit"):
        RecordBatch(raw, max_decompressed_size=MiB).records_data()
    assert RecordBatch(raw).values() == [bytes(4 * MiB)]


def test_growing_output_buffer_when_no_size_is_stated() -> None:
    # Our lz4 frames carry no content size, and zeros compress ~250:1, so the first guess
    # (4x the input) is too small and the buffer has to grow a few times.
    payload = bytes(3 * MiB) + b"end"
    assert decompress(Codec.LZ4, compress(Codec.LZ4, payload)) == payload


def test_lying_gzip_size_trailer_is_corruption() -> None:
    good = gzip.compress(b"hello" * 1000)
    lying = good[:-4] + struct.pack("<I", 10)
    with pytest.raises(CorruptRecordError):
        decompress(Codec.GZIP, lying)


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00", b"not compressed at all, just text", XERIAL_MAGIC + b"\x00" * 8 + b"\xff" * 8],
)
def test_garbage_payloads_are_corrupt_records(codec: Codec, garbage: bytes) -> None:
    try:
        out = decompress(codec, garbage)
    except CorruptRecordError as exc:
        assert codec.name.lower() in str(exc)
    else:
        assert out == b"", "only an empty input may pass as a (trivially valid) stream"


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300), cut=st.integers(0, 300))
def test_mangled_payloads_only_raise_kayak_errors(codec: Codec, data: bytes, cut: int) -> None:
    good = compress(codec, data)
    for candidate in (
        good[:cut],
        good[:cut] + bytes([good[cut % len(good)] ^ 0x55]) + good[cut + 1 :],
    ):
        with contextlib.suppress(KayakError):
            decompress(codec, candidate, max_size=1 << 16)


def test_unknown_codec_ids() -> None:
    for codec_id in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionTypeError, match=f"codec id {codec_id}"):
            codec_from_id(codec_id)
    assert codec_from_id(4) is Codec.ZSTD


def test_xxh32_matches_the_reference_vectors() -> None:
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456
    assert xxh32_short(b"abc") == 0x32D153FF
    with pytest.raises(ValueError):
        xxh32_short(bytes(16))


def test_kafka_0_8_lz4_header_checksum_is_repaired() -> None:
    payload = b"old kafka lz4 " * 200
    frame = bytearray(compress(Codec.LZ4, payload))
    descriptor_end = 6  # FLG, BD; no content size, no dictionary id
    # Kafka 0.8/0.9 hashed the magic number along with the descriptor.
    frame[descriptor_end] = (xxh32_short(bytes(frame[0:descriptor_end])) >> 8) & 0xFF
    with pytest.raises(CorruptRecordError):
        decompress(Codec.LZ4, bytes(frame))
    assert decompress_legacy_lz4(bytes(frame)) == payload
    assert decompress_legacy_lz4(compress(Codec.LZ4, payload)) == payload
    with pytest.raises(CorruptRecordError):
        decompress_legacy_lz4(b"garbage that is not lz4")
