"""The produce-path record validator against mutated batches (hypothesis).

Valid batches of every codec are forged record by record (so that each field can be made to
lie), then mutated: the header's count, an offset delta, a record's length varint, a varint
made overlong, random bytes of the records section, bytes of the compressed payload, the max
timestamp, a null key on a compacted topic. The CRC is always recomputed, so each mutation
reaches the validator. Two properties:

* nothing valid is refused: every unmutated batch passes;
* nothing invalid is accepted: whatever passes decodes, with the consumer's decoder and with
  the pure-Python reference decoder alike, to exactly the header's count of records at
  consecutive offsets, none after the max timestamp; the mutations that always break a batch
  are always refused, with CORRUPT_MESSAGE or INVALID_RECORD and never another exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.errors import CorruptRecordError, InvalidRecordError, KafkaError
from kayak.protocol.primitives import encode_varint
from kayak.protocol.records import Codec, RecordBatch, build_record_batch, compress, validation
from kayak.protocol.records.record import BATCH_HEADER_SIZE, CRC_COVERED_HEADER
from kayak.protocol.records.records_section import py_decode_records
from kayak.protocol.records.scanner import assign_offsets, scan_batches
from kayak.protocol.records.validation import (
    read_stored_batches,
    validate_produced_records,
)

BASE_TIMESTAMP = 1_700_000_000_000
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc


# -- forging batches field by field ----------------------------------------------------------


@dataclass(frozen=True)
class ForgedRecord:
    """One record's fields, each free to lie."""

    offset_delta: int
    timestamp_delta: int = 0
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: tuple[tuple[bytes, bytes | None], ...] = ()
    length_adjust: int = 0  # added to the true length in the length varint
    offset_delta_varint: bytes | None = None  # replaces the offset delta's encoding

    def encode(self) -> bytes:
        body = bytearray(b"\x00")  # attributes
        body += encode_varint(self.timestamp_delta)
        body += self.offset_delta_varint or encode_varint(self.offset_delta)
        body += _nullable(self.key) + _nullable(self.value)
        body += encode_varint(len(self.headers))
        for name, value in self.headers:
            body += encode_varint(len(name)) + name + _nullable(value)
        return encode_varint(len(body) + self.length_adjust) + bytes(body)


def _nullable(data: bytes | None) -> bytes:
    return encode_varint(-1) if data is None else encode_varint(len(data)) + data


@dataclass(frozen=True)
class ForgedBatch:
    records: tuple[ForgedRecord, ...]
    codec: Codec = Codec.NONE
    count: int | None = None  # header recordCount (default: how many records there are)
    last_offset_delta: int | None = None
    base_timestamp: int = BASE_TIMESTAMP
    max_timestamp: int | None = None  # default: the largest record timestamp
    section_edit: tuple[int, int, bytes] | None = None  # (start, stop, replacement) in section
    payload_edit: tuple[int, int, bytes] | None = None  # the same, in the compressed payload
    extra: dict[str, int] = field(default_factory=dict)

    def section(self) -> bytes:
        section = b"".join(record.encode() for record in self.records)
        if self.section_edit is not None:
            start, stop, replacement = self.section_edit
            section = section[:start] + replacement + section[stop:]
        return section

    def encode(self) -> bytes:
        """The whole batch with a CRC that matches whatever the fields say."""
        payload = self.section()
        if self.codec is not Codec.NONE:
            payload = compress(self.codec, payload)
        if self.payload_edit is not None:
            start, stop, replacement = self.payload_edit
            payload = payload[:start] + replacement + payload[stop:]
        count = len(self.records) if self.count is None else self.count
        last = count - 1 if self.last_offset_delta is None else self.last_offset_delta
        deltas = [record.timestamp_delta for record in self.records] or [0]
        latest = self.base_timestamp + max(deltas)
        covered = (
            CRC_COVERED_HEADER.pack(
                self.codec.value,  # attributes: CreateTime, not transactional
                last,
                self.base_timestamp,
                latest if self.max_timestamp is None else self.max_timestamp,
                -1,
                -1,
                -1,
                count,
            )
            + payload
        )
        length = BATCH_HEADER_SIZE - 12 + len(payload)
        return _PREFIX.pack(0, length, -1, 2, crc32c.crc32c(covered)) + covered


def produced_check(batch: bytes, *, compacted: bool = False, first_offset: int = 0) -> None:
    """What the broker runs on a produced batch: header and CRC, offsets, then every record."""
    buf = bytearray(batch)
    assign_offsets(buf, first_offset)  # validates each header strictly first
    for header in scan_batches(buf):
        validate_produced_records(buf, header, compacted=compacted)


# -- strategies --------------------------------------------------------------------------------

small_bytes = st.binary(max_size=24)
header_items = st.tuples(st.text(max_size=4).map(str.encode), st.none() | small_bytes)


@st.composite
def valid_batches(draw: st.DrawFn) -> ForgedBatch:
    count = draw(st.integers(1, 12))
    keyed = draw(st.booleans())
    records = tuple(
        ForgedRecord(
            offset_delta=index,
            timestamp_delta=draw(st.integers(-5000, 5000)),
            key=draw(small_bytes) if keyed else draw(st.none() | small_bytes),
            value=draw(st.none() | small_bytes),
            headers=tuple(draw(st.lists(header_items, max_size=2))),
        )
        for index in range(count)
    )
    return ForgedBatch(records, codec=draw(st.sampled_from(list(Codec))))


def _all_keyed(batch: ForgedBatch) -> bool:
    return all(record.key is not None for record in batch.records)


def check_accepted_batch_is_sound(batch: bytes) -> None:
    """A batch the validator passed: both decoders give exactly count records, in order."""
    buf = bytearray(batch)
    assign_offsets(buf, 1000)
    header = next(iter(scan_batches(buf)))
    expected = list(range(1000, 1000 + header.record_count))
    records = RecordBatch(bytes(buf)).record_list()
    assert [r.offset for r in records] == expected
    assert all(r.timestamp <= header.max_timestamp for r in records)
    section = RecordBatch(bytes(buf)).records_data()
    reference = py_decode_records(
        section, 0, len(section), header.record_count, 1000, header.base_timestamp
    )
    assert [r.as_tuple() for r in reference] == [r.as_tuple() for r in records]
    stored = list(read_stored_batches(bytes(buf)))
    assert {item.problem for item in stored} == {None}
    replayed = [r.as_tuple() for item in stored for r in item.records]
    assert replayed == [r.as_tuple() for r in records]


def refused(batch: bytes, *, compacted: bool = False) -> KafkaError | None:
    """The error the broker's checks raise for ``batch``, or None if it passes.

    With the C codec's records walk, the same batch also goes through the Python decoding
    path alone: the two must agree on whether it passes and on the error it gets.
    """
    outcome = _outcome(batch, compacted)
    walk = validation._walk_records
    if walk is not None:
        validation._walk_records = None
        try:
            in_python = _outcome(batch, compacted)
        finally:
            validation._walk_records = walk
        assert repr(outcome) == repr(in_python)
    return outcome


def _outcome(batch: bytes, compacted: bool) -> KafkaError | None:
    try:
        produced_check(batch, compacted=compacted)
    except KafkaError as exc:
        return exc
    return None


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- properties ------------------------------------------------------------------------------


@FUZZ
@given(valid_batches())
def test_every_valid_batch_is_accepted(batch: ForgedBatch) -> None:
    encoded = batch.encode()
    assert refused(encoded, compacted=_all_keyed(batch)) is None
    check_accepted_batch_is_sound(encoded)


@FUZZ
@given(st.lists(st.binary(max_size=40) | st.none(), min_size=1, max_size=20),
       st.sampled_from(list(Codec)), st.booleans())  # fmt: skip
def test_batches_from_the_builder_are_accepted(
    values: list[bytes | None], codec: Codec, keyed: bool
) -> None:
    keys = [b"k%d" % i for i in range(len(values))] if keyed else None
    timestamps = [BASE_TIMESTAMP - 7 * i for i in range(len(values))]  # negative deltas
    batch = build_record_batch(values, keys=keys, codec=codec, timestamp=timestamps)
    assert refused(batch, compacted=keyed) is None
    check_accepted_batch_is_sound(batch)


@FUZZ
@given(valid_batches(), st.data())
def test_lying_structure_is_always_refused(batch: ForgedBatch, data: st.DataObject) -> None:
    n = len(batch.records)
    kind = data.draw(st.sampled_from(["count", "delta", "length", "varint", "max_timestamp"]))
    index = data.draw(st.integers(0, n - 1))
    records = list(batch.records)
    if kind == "count":
        count = data.draw(st.integers(1, 40).filter(lambda c: c != n))
        mutated = replace(batch, count=count)  # lastOffsetDelta follows: the header agrees
    elif kind == "delta":
        delta = data.draw(st.integers(-3, 1 << 20).filter(lambda d: d != index))
        records[index] = replace(records[index], offset_delta=delta)
        mutated = replace(batch, records=tuple(records))
    elif kind == "length":
        adjust = data.draw(st.integers(-4, 4).filter(bool))
        records[index] = replace(records[index], length_adjust=adjust)
        mutated = replace(batch, records=tuple(records))
    elif kind == "varint":
        # Six continuation bytes: longer than an int32 varint may be.
        records[index] = replace(records[index], offset_delta_varint=b"\xff" * 6 + b"\x01")
        mutated = replace(batch, records=tuple(records))
    else:
        latest = BASE_TIMESTAMP + max(r.timestamp_delta for r in batch.records)
        mutated = replace(batch, max_timestamp=latest - data.draw(st.integers(1, 10_000)))
    error = refused(mutated.encode(), compacted=_all_keyed(batch))
    assert isinstance(error, CorruptRecordError | InvalidRecordError), (kind, error)


@FUZZ
@given(valid_batches(), st.data())
def test_a_missing_key_on_a_compacted_topic_is_an_invalid_record(
    batch: ForgedBatch, data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(batch.records) - 1))
    records = [replace(r, key=r.key if r.key is not None else b"k") for r in batch.records]
    records[index] = replace(records[index], key=None)
    mutated = replace(batch, records=tuple(records)).encode()
    error = refused(mutated, compacted=True)
    assert isinstance(error, InvalidRecordError) and f"record {index}" in error.message
    assert refused(mutated, compacted=False) is None


@FUZZ
@given(valid_batches(), st.data())
def test_whatever_passes_after_random_damage_decodes_soundly(
    batch: ForgedBatch, data: st.DataObject
) -> None:
    target = data.draw(st.sampled_from(["section", "payload", "overlong"]))
    if target == "overlong":
        # A non-canonical but well-formed varint: Kafka reads it, so it may pass.
        index = data.draw(st.integers(0, len(batch.records) - 1))
        records = list(batch.records)
        records[index] = replace(records[index], offset_delta_varint=bytes([0x80 | index, 0]))
        mutated = replace(batch, records=tuple(records))
    else:
        size = len(batch.section()) if target == "section" else len(batch.encode()) - 61
        start = data.draw(st.integers(0, max(size - 1, 0)))
        stop = data.draw(st.integers(start, min(size, start + 4)))
        replacement = data.draw(st.binary(max_size=4))
        edit = (start, stop, replacement)
        if target == "section" or batch.codec is Codec.NONE:
            mutated = replace(batch, section_edit=edit)
        else:
            mutated = replace(batch, payload_edit=edit)
    encoded = mutated.encode()
    error = refused(encoded)
    if error is None:
        check_accepted_batch_is_sound(encoded)
    else:
        assert isinstance(error, CorruptRecordError | InvalidRecordError), error


# -- examples the properties rely on ---------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
def test_count_ten_holding_one_is_corrupt(codec: Codec) -> None:
    batch = ForgedBatch((ForgedRecord(0),), codec=codec, count=10).encode()
    error = refused(batch)
    assert isinstance(error, CorruptRecordError), error


@pytest.mark.parametrize("codec", list(Codec))
def test_offset_deltas_zero_and_seven_are_corrupt(codec: Codec) -> None:
    batch = ForgedBatch((ForgedRecord(0), ForgedRecord(7)), codec=codec).encode()
    error = refused(batch)
    assert isinstance(error, CorruptRecordError) and "offset delta 7" in error.message


def test_a_decompression_bomb_is_refused_without_being_inflated() -> None:
    bomb = build_record_batch([bytes(80 * 1024 * 1024)], codec=Codec.ZSTD)
    assert len(bomb) < 100_000
    error = refused(bomb)
    assert isinstance(error, CorruptRecordError) and "limit" in error.message


def test_a_huge_count_of_tiny_records_is_checked_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunk = 16  # as with the real 65,536, with batches small enough to forge quickly
    monkeypatch.setattr(validation, "CHUNK_RECORDS", chunk)
    count = chunk * 2 + 5
    batch = build_record_batch([None] * count, keys=[b""] * count, codec=Codec.LZ4)
    assert refused(batch, compacted=True) is None
    check_accepted_batch_is_sound(batch)
    records = [ForgedRecord(i, key=b"", value=None) for i in range(count)]
    records[chunk + 3] = replace(records[chunk + 3], offset_delta=0)
    error = refused(ForgedBatch(tuple(records), codec=Codec.LZ4).encode())
    assert isinstance(error, CorruptRecordError)
    assert f"record {chunk + 3}: offset delta 0" in error.message
    for broken in (
        ForgedBatch(tuple(records[:-1]), codec=Codec.LZ4, count=count),  # one short
        ForgedBatch(tuple(records[:-1]), codec=Codec.LZ4, count=count - 2),  # one over
        ForgedBatch(tuple(records), section_edit=(40, 41, b"\x7f")),  # a length past the end
    ):
        assert isinstance(refused(broken.encode()), CorruptRecordError | InvalidRecordError)
