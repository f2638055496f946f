"""Damaged input: every failure is a CorruptRecordError/InvalidRecordError that says what broke."""

from __future__ import annotations

import contextlib
import struct
import zlib

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.errors import CorruptRecordError, InvalidRecordError, KayakError
from kayak.protocol.primitives import encode_varint
from kayak.protocol.records import (
    Codec,
    LegacyBatch,
    RecordBatch,
    build_control_batch,
    build_record_batch,
    iter_batches,
    parse_batches,
    scan_batches,
    validate_batch,
)
from kayak.protocol.records.record import ControlRecordType

GOOD = build_record_batch(
    [b"first", None, b"third" * 30],
    keys=[b"k", None, b"kkk"],
    headers=[[("h", b"v")], None, [("a", None), ("b", b"")]],
    timestamp=[1000, 1001, 999],
    base_offset=10,
)


def recrc(raw: bytes | bytearray) -> bytes:
    """Recompute a v2 batch's CRC, so damage past the CRC reaches the record parser."""
    out = bytearray(raw)
    out[17:21] = struct.pack(">I", crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def with_records_section(section: bytes, count: int, codec: Codec = Codec.NONE) -> bytes:
    """A batch around a hand-made records section, with consistent lengths and CRC."""
    out = bytearray(GOOD[:61])
    out[8:12] = struct.pack(">i", 49 + len(section))
    out[21:23] = struct.pack(">h", int(codec))
    out[23:27] = struct.pack(">i", count - 1)
    out[57:61] = struct.pack(">i", count)
    return recrc(bytes(out) + section)


def record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


def test_a_flipped_bit_fails_the_crc() -> None:
    damaged = bytearray(GOOD)
    damaged[-3] ^= 0x01
    batch = RecordBatch(damaged)
    assert not batch.crc_ok
    with pytest.raises(CorruptRecordError, match=r"base offset 10.*CRC-32C"):
        batch.validate_crc()
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        list(iter_batches(bytes(damaged)))
    header = next(iter(scan_batches(bytes(damaged))))
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        validate_batch(header, bytes(damaged))


def test_a_truncated_batch() -> None:
    with pytest.raises(CorruptRecordError, match="truncated: batchLength says"):
        RecordBatch(GOOD[:-1])
    with pytest.raises(CorruptRecordError, match="a batch header needs 61"):
        RecordBatch(GOOD[:30])
    # In a fetch response the same bytes are just an incomplete tail.
    batches = iter_batches(GOOD + GOOD[:-1])
    assert len(list(batches)) == 1 and batches.partial


@pytest.mark.parametrize("length", [-1, 0, 48, -(1 << 31)])
def test_impossible_batch_lengths(length: int) -> None:
    raw = bytearray(GOOD)
    raw[8:12] = struct.pack(">i", length)
    with pytest.raises(CorruptRecordError, match="at position 0"):
        list(scan_batches(bytes(raw)))
    with pytest.raises(CorruptRecordError):
        RecordBatch(bytes(raw))


@pytest.mark.parametrize("magic", [3, 7, 127, -1])
def test_unknown_magic(magic: int) -> None:
    raw = bytearray(GOOD)
    raw[16] = magic & 0xFF
    with pytest.raises(CorruptRecordError, match=f"unknown magic {magic}"):
        list(iter_batches(bytes(raw)))
    with pytest.raises(CorruptRecordError, match="RecordBatch reads magic 2"):
        RecordBatch(bytes(raw))


def test_record_count_larger_than_the_records() -> None:
    raw = bytearray(GOOD)
    raw[57:61] = struct.pack(">i", 4)
    batch = RecordBatch(recrc(raw))
    with pytest.raises(CorruptRecordError, match=r"record 3 .*truncated"):
        batch.record_list()
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatch(recrc(raw)).values()


def test_records_are_never_read_past_their_batch() -> None:
    raw = bytearray(GOOD)
    raw[57:61] = struct.pack(">i", 4)
    # Parsed in place from bytes, with another batch right behind it to wander into.
    buf = recrc(raw) + GOOD
    first, second = list(iter_batches(buf))
    with pytest.raises(CorruptRecordError, match="record 3"):
        first.record_list()
    with pytest.raises(CorruptRecordError, match="record 3"):
        first.values()
    assert [r.value for r in second] == [b"first", None, b"third" * 30]


def test_record_count_smaller_than_the_records() -> None:
    raw = bytearray(GOOD)
    raw[57:61] = struct.pack(">i", 2)
    with pytest.raises(CorruptRecordError, match="2 records end at byte"):
        RecordBatch(recrc(raw)).record_list()
    with pytest.raises(CorruptRecordError, match="2 records end at byte"):
        RecordBatch(recrc(raw)).values()


def test_negative_record_count() -> None:
    raw = bytearray(GOOD)
    raw[57:61] = struct.pack(">i", -1)
    with pytest.raises(CorruptRecordError, match="negative record count"):
        RecordBatch(recrc(raw))


def test_count_and_last_offset_delta_disagree() -> None:
    raw = bytearray(GOOD)
    raw[23:27] = struct.pack(">i", 5)
    fixed = recrc(raw)
    header = next(iter(scan_batches(fixed)))
    with pytest.raises(InvalidRecordError, match="record count 3 does not match lastOffsetDelta 5"):
        validate_batch(header, fixed)
    validate_batch(header, fixed, strict=False)  # fine in a compacted log
    assert len(RecordBatch(fixed).record_list()) == 3


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        # record length says 10, fields take 7
        (b"\x14" + b"\x00\x00\x00\x01\x02v\x00" + b"pad", "fields end at"),
        # record length says 5, fields take 7 (overrun into the next record)
        (b"\x0a" + b"\x00\x00\x00\x01\x02v\x00", "fields end at|truncated"),
        # record length negative
        (b"\x01" + b"\x00\x00\x00\x01\x02v\x00", "fields end at|truncated"),
        # key length -2
        (record(b"\x00\x00\x00", b"\x03", b"\x02v", b"\x00"), "key length -2"),
        # value length -3
        (record(b"\x00\x00\x00", b"\x01", b"\x05", b"\x00"), "value length -3"),
        # value longer than the record
        (
            record(b"\x00\x00\x00", b"\x01", b"\x40vv", b"\x00"),
            "fields end at|truncated|end at byte",
        ),
        # header count -1
        (record(b"\x00\x00\x00\x01\x02v", b"\x01"), "header count -1"),
        # header key not UTF-8
        (record(b"\x00\x00\x00\x01\x02v", b"\x02", b"\x02\xff", b"\x01"), "not UTF-8"),
        # header value length -2
        (record(b"\x00\x00\x00\x01\x02v", b"\x02", b"\x02h", b"\x03"), "header value length -2"),
        # header value runs past the record
        (record(b"\x00\x00\x00\x01\x02v", b"\x02", b"\x02h", b"\x7e"), "header value length"),
        # a varint that never ends
        (b"\x00\x00\x00" + b"\xff" * 20, "varint|truncated|impossible"),
        # trailing garbage after the records
        (record(b"\x00\x00\x00\x01\x02v\x00") + b"\x00\x00", "end at byte"),
    ],
)
def test_lying_records(section: bytes, problem: str) -> None:
    batch = RecordBatch(with_records_section(section, 1))
    batch.validate_crc()
    with pytest.raises(CorruptRecordError, match=problem):
        batch.record_list()


def test_values_path_catches_the_same_structural_lies() -> None:
    for section in (
        record(b"\x00\x00\x00", b"\x03", b"\x02v", b"\x00"),
        record(b"\x00\x00\x00", b"\x01", b"\x05", b"\x00"),
        record(b"\x00\x00\x00", b"\x01", b"\x40vv", b"\x00"),
        record(b"\x00\x00\x00\x01\x02v"),  # no header count
    ):
        with pytest.raises(CorruptRecordError):
            RecordBatch(with_records_section(section, 1)).values()


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_bad_compressed_payload(codec: Codec) -> None:
    batch = RecordBatch(with_records_section(b"definitely not compressed data", 1, codec))
    with pytest.raises(CorruptRecordError, match=f"base offset 10: {codec.name.lower()}"):
        batch.record_list()


def test_unknown_codec_in_a_batch() -> None:
    from kayak.errors import UnsupportedCompressionTypeError

    raw = with_records_section(record(b"\x00\x00\x00\x01\x02v\x00"), 1, Codec.NONE)
    raw = bytearray(raw)
    raw[22] = 6
    fixed = recrc(raw)
    with pytest.raises(UnsupportedCompressionTypeError, match="codec id 6"):
        RecordBatch(fixed).record_list()
    with pytest.raises(UnsupportedCompressionTypeError):
        validate_batch(next(iter(scan_batches(fixed))), fixed)


def test_control_batch_without_a_proper_key() -> None:
    raw = bytearray(build_control_batch(ControlRecordType.ABORT, producer_id=1, producer_epoch=0))
    good = RecordBatch(bytes(raw))
    assert good.control_type is ControlRecordType.ABORT
    section = record(b"\x00\x00\x00", b"\x08\x00\x00\x00\x09", b"\x01", b"\x00")  # type 9
    out = bytearray(with_records_section(section, 1))
    out[21:23] = struct.pack(">h", 0x30)
    with pytest.raises(CorruptRecordError, match="unknown type 9"):
        RecordBatch(recrc(out)).control_record()


def test_garbage_bytes() -> None:
    with pytest.raises(CorruptRecordError):
        list(iter_batches(b"\x00" * 12 + b"\x07" + b"garbage" * 20))
    # Too short to be anything is just an incomplete tail.
    assert list(iter_batches(b"garbage")) == []


def test_legacy_damage() -> None:
    message = bytearray(struct.pack(">qi", 0, 17) + struct.pack(">Ibbii", 0, 0, 0, -1, 3) + b"abc")
    message[12:16] = zlib.crc32(bytes(message[16:])).to_bytes(4, "big")
    assert [r.value for b in parse_batches(bytes(message)) for r in b] == [b"abc"]
    flipped = bytearray(message)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32"):
        parse_batches(bytes(flipped))
    lying = bytearray(message)
    lying[-7:-3] = struct.pack(">i", 5)  # value length 5 in a message with room for 3
    with pytest.raises(CorruptRecordError, match="value length 5"):
        LegacyBatch(bytes(lying))
    too_short = bytearray(message)
    too_short[8:12] = struct.pack(">i", 3)
    with pytest.raises(CorruptRecordError, match="less than"):
        list(scan_batches(bytes(too_short)))
    wrapper = bytearray(struct.pack(">qi", 0, 14) + struct.pack(">Ibbii", 0, 0, 1, -1, -1))
    with pytest.raises(CorruptRecordError, match="null value"):
        list(LegacyBatch(bytes(wrapper)).records())


# -- fuzz ---------------------------------------------------------------------------------------

SAMPLES = [
    GOOD,
    build_record_batch([b"a" * 50, b"b"], keys=[b"k", None], timestamp=1, codec=Codec.GZIP),
    build_record_batch([b"z" * 40] * 3, timestamp=[1, 2, 3], codec=Codec.SNAPPY),
    build_record_batch([b"q"] * 5, timestamp=1, codec=Codec.LZ4),
    build_record_batch([b"w"], headers=[[("h", b"v")]], timestamp=1, codec=Codec.ZSTD),
    build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=1),
]


def exercise(buf: bytes) -> None:
    """Everything a consumer or broker might do with the bytes."""
    for check_crc in (True, False):
        batches = iter_batches(buf, check_crc=check_crc, max_decompressed_size=1 << 20)
        for batch in batches:
            list(batch.records())
            if isinstance(batch, RecordBatch):
                batch.values()
                batch.control_record()
                _ = (batch.compression, batch.timestamp_type, batch.crc_ok)
    for header in scan_batches(buf):
        for strict in (True, False):
            with contextlib.suppress(KayakError):
                validate_batch(header, buf, strict=strict)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sample=st.sampled_from(SAMPLES),
    edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 1 << 16)),
    fix_crc=st.booleans(),
)
def test_mutated_batches_only_raise_kayak_errors(
    sample: bytes, edits: list[tuple[int, int]], cut: int | None, fix_crc: bool
) -> None:
    raw = bytearray(sample)
    for position, byte in edits:
        raw[position % len(raw)] = byte
    if fix_crc and len(raw) > 21:
        raw = bytearray(recrc(raw))
    if cut is not None:
        raw = raw[: cut % (len(raw) + 1)]
    with contextlib.suppress(KayakError):
        exercise(bytes(raw))
    with contextlib.suppress(KayakError):
        exercise(bytes(raw) + GOOD)  # damage must not spill into the next batch


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_kayak_errors(data: bytes) -> None:
    for buf in (data, GOOD[:16] + data, GOOD[:61] + data):
        with contextlib.suppress(KayakError):
            exercise(buf)
        with contextlib.suppress(KayakError):
            RecordBatch(with_records_section(data, 3)).record_list()
