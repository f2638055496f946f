"""The header-only scanner: agrees with the parser, finds partial tails, validates, assigns."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kayak.errors import CorruptRecordError, InvalidRecordError
from kayak.protocol.records import (
    Codec,
    RecordBatch,
    assign_offsets,
    build_control_batch,
    build_record_batch,
    complete_batches,
    iter_batches,
    read_batch_header,
    scan_batches,
    validate_batch,
)
from kayak.protocol.records.record import ControlRecordType

batch_specs = st.lists(
    st.tuples(
        st.lists(st.binary(max_size=50), min_size=1, max_size=8),
        st.sampled_from(list(Codec)),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


def concatenate(specs: list[tuple[list[bytes], Codec, bool]]) -> tuple[bytes, list[int]]:
    parts, offset, starts = [], 0, []
    for values, codec, transactional in specs:
        starts.append(sum(map(len, parts)))
        parts.append(
            build_record_batch(
                values,
                timestamp=1000 + offset,
                codec=codec,
                base_offset=offset,
                is_transactional=transactional,
                producer_id=7 if transactional else -1,
            )
        )
        offset += len(values)
    return b"".join(parts), starts


@settings(max_examples=50, deadline=None)
@given(specs=batch_specs)
def test_headers_match_the_parser(specs: list[tuple[list[bytes], Codec, bool]]) -> None:
    buf, starts = concatenate(specs)
    headers = list(scan_batches(buf))
    batches = list(iter_batches(buf))
    assert [h.position for h in headers] == starts
    for header, batch in zip(headers, batches, strict=True):
        assert isinstance(batch, RecordBatch)
        assert header.size == batch.size and header.end == header.position + batch.size
        assert (header.base_offset, header.batch_length, header.magic, header.crc) == (
            batch.base_offset,
            batch.batch_length,
            batch.magic,
            batch.crc,
        )
        assert (header.attributes, header.last_offset_delta, header.record_count) == (
            batch.attributes,
            batch.last_offset_delta,
            batch.record_count,
        )
        assert (header.base_timestamp, header.max_timestamp) == (
            batch.base_timestamp,
            batch.max_timestamp,
        )
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
        )
        assert header.partition_leader_epoch == batch.partition_leader_epoch
        assert header.next_offset == batch.next_offset and header.last_offset == batch.last_offset
        assert header.is_transactional == batch.is_transactional
        assert header.codec_id == batch.compression
        validate_batch(header, buf)


@settings(max_examples=30, deadline=None)
@given(specs=batch_specs, data=st.data())
def test_a_partial_tail_ends_the_scan_where_the_last_complete_batch_ends(
    specs: list[tuple[list[bytes], Codec, bool]], data: st.DataObject
) -> None:
    buf, starts = concatenate(specs)
    cut = data.draw(st.integers(0, len(buf)))
    truncated = buf[:cut]
    complete_ends = [s for s in [*starts[1:], len(buf)] if s <= cut]
    scan = scan_batches(truncated)
    headers = list(scan)
    assert len(headers) == len(complete_ends)
    expected_end = complete_ends[-1] if complete_ends else 0
    assert scan.complete_bytes == scan.stopped_at == expected_end
    assert scan.partial == (cut != expected_end)
    batches = iter_batches(truncated)
    assert len(list(batches)) == len(complete_ends)
    assert batches.complete_bytes == expected_end
    assert complete_batches(truncated) == (headers, expected_end)


def test_scan_from_an_offset_and_single_reads() -> None:
    one = build_record_batch([b"a"], timestamp=1)
    buf = b"junk" + one + one
    headers = list(scan_batches(buf, 4))
    assert [h.position for h in headers] == [4, 4 + len(one)]
    assert read_batch_header(buf, 4 + 2 * len(one)) is None
    assert read_batch_header(one[:11], 0) is None  # not even the length yet
    assert read_batch_header(one[:16], 0) is None  # no magic yet


def test_strict_validation_for_produce() -> None:
    good = build_record_batch([b"a", b"b"], timestamp=1)
    validate_batch(next(iter(scan_batches(good))), good)

    def header_with(**fields: int) -> object:
        return next(iter(scan_batches(good)))._replace(**fields)

    with pytest.raises(InvalidRecordError, match="holds no records"):
        validate_batch(header_with(record_count=0), good)  # type: ignore[arg-type]
    with pytest.raises(CorruptRecordError, match="negative record count"):
        validate_batch(header_with(record_count=-3), good)  # type: ignore[arg-type]
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        validate_batch(header_with(batch_length=500), good)  # type: ignore[arg-type]
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta -5"):
        validate_batch(header_with(last_offset_delta=-5), good)  # type: ignore[arg-type]
    validate_batch(header_with(record_count=0, last_offset_delta=-1), good, strict=False)  # type: ignore[arg-type]


def test_strict_validation_rejects_records_that_cannot_fit() -> None:
    raw = bytearray(build_record_batch([b"a"], timestamp=1))
    raw[23:27] = struct.pack(">i", 99)
    raw[57:61] = struct.pack(">i", 100)
    import crc32c

    raw[17:21] = struct.pack(">I", crc32c.crc32c(bytes(raw[21:])))
    with pytest.raises(CorruptRecordError, match="100 records cannot fit"):
        validate_batch(next(iter(scan_batches(bytes(raw)))), bytes(raw))


def test_legacy_messages_in_a_scan() -> None:
    import kafka.record.legacy_records as legacy

    builder = legacy.LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=5, key=b"k", value=b"v")
    builder.append(1, timestamp=6, key=None, value=b"w")
    raw = bytes(builder.build())
    headers = list(scan_batches(raw))
    assert [(h.magic, h.base_offset, h.next_offset, h.record_count) for h in headers] == [
        (1, 0, 1, 1),
        (1, 1, 2, 1),
    ]
    assert not headers[0].is_control and not headers[0].is_transactional
    validate_batch(headers[0], raw, strict=False)
    with pytest.raises(InvalidRecordError, match="must carry magic 2"):
        validate_batch(headers[0], raw)


def test_assign_offsets_rewrites_base_offsets_and_keeps_crcs() -> None:
    first = build_record_batch([b"a", b"b", b"c"], timestamp=1, codec=Codec.GZIP)
    second = build_record_batch([b"d"], timestamp=2)
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=3, producer_epoch=0)
    buf = bytearray(first + second + marker)
    assert assign_offsets(buf, 1000, partition_leader_epoch=4) == 1005
    batches = list(iter_batches(buf))  # CRCs checked
    assert [b.base_offset for b in batches] == [1000, 1003, 1004]
    assert {b.partition_leader_epoch for b in batches} == {4}
    assert [r.offset for b in batches[:2] for r in b] == [1000, 1001, 1002, 1003]
    with pytest.raises(CorruptRecordError, match="not a complete batch"):
        assign_offsets(bytearray(first + second[:-1]), 0)
    damaged = bytearray(first)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        assign_offsets(damaged, 0)
    unchecked = bytearray(first)
    assert assign_offsets(unchecked, 7, validate=False) == 10


def test_iter_records_skips_control_batches_unless_asked() -> None:
    from kayak.protocol.records import iter_records

    data = build_record_batch([b"a", b"b"], timestamp=1, producer_id=3, is_transactional=True)
    marker = build_control_batch(
        ControlRecordType.ABORT, producer_id=3, producer_epoch=0, base_offset=2
    )
    assert [r.value for r in iter_records(data + marker)] == [b"a", b"b"]
    everything = list(iter_records(data + marker, skip_control=False))
    assert [r.offset for r in everything] == [0, 1, 2]
    assert everything[2].key == struct.pack(">hh", 0, 0)
