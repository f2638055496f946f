"""Give kafka-python its snappy, lz4 and zstd codecs when their libraries are not installed.

kafka-python compresses through python-snappy, lz4 and zstandard, none of which kayak depends
on. When one is missing, a stand-in backed by cramjam is put where kafka-python looks for it.
The stand-ins supply only the raw codec: kafka-python still does its own framing (xerial
blocks for snappy, its ``lz4_encode_old_kafka`` header mangling for magic 0), which is the
part an interop test exercises. xxhash (for that magic 0 lz4 mangling) is stood in for by
kayak's own xxh32 of short inputs; the frame cramjam then checks is the repaired one, so a
wrong hash would still fail the test.
"""

from __future__ import annotations

import importlib.util
import io
from types import SimpleNamespace
from typing import Any

import cramjam
import kafka.codec
import kafka.record.default_records
import kafka.record.legacy_records
import pytest

from kayak.protocol.records.compression import xxh32_short


def _lz4_encode(payload: bytes, **_: Any) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(payload)
    return bytes(compressor.finish())


def _lz4_decode(payload: bytes) -> bytes:
    return bytes(cramjam.lz4.decompress(payload))


class _ZstdCompressor:
    def compress(self, payload: bytes) -> bytes:
        return bytes(cramjam.zstd.compress(payload, level=3))


class _ZstdDecompressor:
    def stream_reader(self, source: io.BytesIO, read_across_frames: bool = True) -> io.BytesIO:
        return io.BytesIO(bytes(cramjam.zstd.decompress(source.read())))


class _Xxh32:
    def __init__(self, data: bytes) -> None:
        self._value = xxh32_short(bytes(data))

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")


def install(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patch in stand-ins for missing libraries; returns the names of those stood in for."""
    stood_in = []
    if importlib.util.find_spec("snappy") is None:
        snappy = SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        )
        monkeypatch.setattr(kafka.codec, "snappy", snappy)
        stood_in.append("python-snappy")
    if importlib.util.find_spec("lz4") is None:
        monkeypatch.setattr(kafka.codec, "lz4", SimpleNamespace())
        monkeypatch.setattr(kafka.codec, "lz4_encode", _lz4_encode)
        monkeypatch.setattr(kafka.codec, "lz4_decode", _lz4_decode)
        for module in (kafka.record.default_records, kafka.record.legacy_records):
            monkeypatch.setattr(module, "lz4_encode", _lz4_encode)
            monkeypatch.setattr(module, "lz4_decode", _lz4_decode)
        stood_in.append("lz4")
    if importlib.util.find_spec("zstandard") is None:
        zstd = SimpleNamespace(ZstdCompressor=_ZstdCompressor, ZstdDecompressor=_ZstdDecompressor)
        monkeypatch.setattr(kafka.codec, "zstd", zstd)
        stood_in.append("zstandard")
    if importlib.util.find_spec("xxhash") is None:
        monkeypatch.setattr(kafka.codec, "xxhash", SimpleNamespace(xxh32=_Xxh32))
        stood_in.append("xxhash")
    return stood_in
