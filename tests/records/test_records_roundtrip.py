"""Building and parsing magic-2 batches: round trips, the two encoders agree, header fields."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.errors import CorruptRecordError, EncodeError
from kayak.protocol.records import (
    BATCH_HEADER_SIZE,
    Codec,
    ControlRecordType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    build_record_batch,
    set_base_offset,
    set_partition_leader_epoch,
)

Headers = list[tuple[str, bytes | None]]

nullable_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40))), max_size=4
)
INT64_MAX = (1 << 63) - 1


@dataclass
class Input:
    values: list[bytes | None]
    keys: list[bytes | None] | None
    headers: list[Headers | None] | None
    timestamps: int | list[int]

    def timestamp_of(self, index: int) -> int:
        return self.timestamps if isinstance(self.timestamps, int) else self.timestamps[index]

    def expected(self, base_offset: int) -> list[Record]:
        return [
            Record(
                base_offset + i,
                self.timestamp_of(i),
                None if self.keys is None else self.keys[i],
                value,
                () if self.headers is None or not self.headers[i] else tuple(self.headers[i]),
            )
            for i, value in enumerate(self.values)
        ]


@st.composite
def inputs(draw: st.DrawFn) -> Input:
    count = draw(st.integers(1, 40))
    values = draw(st.lists(nullable_bytes, min_size=count, max_size=count))
    keys = draw(st.one_of(st.none(), st.lists(nullable_bytes, min_size=count, max_size=count)))
    headers = draw(
        st.one_of(
            st.none(),
            st.lists(st.one_of(st.none(), header_lists), min_size=count, max_size=count),
        )
    )
    base = draw(st.integers(0, 1 << 42))
    timestamps: int | list[int] = draw(
        st.one_of(
            st.just(base),
            st.lists(st.integers(base - 10**6, base + 10**9), min_size=count, max_size=count),
        )
    )
    return Input(values, keys, headers, timestamps)


def build_both(data: Input, **options: object) -> tuple[bytes, bytes]:
    bulk = build_record_batch(
        data.values,
        data.keys,
        data.headers,
        timestamp=data.timestamps,
        **options,  # type: ignore[arg-type]
    )
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for i, value in enumerate(data.values):
        builder.append(
            value,
            key=None if data.keys is None else data.keys[i],
            headers=None if data.headers is None else data.headers[i],
            timestamp=data.timestamp_of(i),
        )
    return bulk, builder.build()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=inputs(), codec=st.sampled_from(list(Codec)), base_offset=st.integers(0, 1 << 40))
def test_every_codec_round_trips_and_both_encoders_agree(
    data: Input, codec: Codec, base_offset: int
) -> None:
    bulk, built = build_both(data, codec=codec, base_offset=base_offset)
    assert bulk == built
    batch = RecordBatch(bulk)
    batch.validate_crc()
    assert batch.crc_ok
    assert batch.compression is codec
    assert batch.base_offset == base_offset
    assert batch.record_count == len(data.values)
    assert batch.last_offset_delta == len(data.values) - 1
    assert batch.next_offset == base_offset + len(data.values)
    first = data.timestamp_of(0)
    assert batch.base_timestamp == first
    assert batch.max_timestamp == max(data.timestamp_of(i) for i in range(len(data.values)))
    assert list(batch) == data.expected(base_offset)
    assert batch.values() == data.values
    assert batch.size == len(bulk)


def test_header_fields_and_flags() -> None:
    raw = build_record_batch(
        [b"a", b"b"],
        timestamp=1234,
        base_offset=77,
        partition_leader_epoch=9,
        producer_id=123456789,
        producer_epoch=3,
        base_sequence=42,
        is_transactional=True,
        codec=Codec.GZIP,
    )
    batch = RecordBatch(raw)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic) == (77, 9, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789, 3, 42)
    assert batch.is_transactional and not batch.is_control
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.last_offset == 78 and batch.next_offset == 79
    assert batch.control_type is None and batch.control_record() is None
    assert len(batch) == 2
    # The header is laid out exactly as the protocol guide says.
    assert struct.unpack_from(">qiib", raw) == (77, len(raw) - 12, 9, 2)
    assert struct.unpack_from(">I", raw, 17)[0] == crc32c.crc32c(raw[21:])
    assert struct.unpack_from(">h", raw, 21)[0] == 0x10 | 1


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    raw = build_record_batch(
        [b"a", b"b", b"c"],
        timestamp=[100, 300, 200],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    batch = RecordBatch(raw)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [300, 300, 300]


def test_large_values_and_many_records_use_long_varints() -> None:
    big = [b"x" * 70_000, b"", None, b"y" * 9000]
    keys = [b"k" * 10_000, None, b"", b"z"]
    assert RecordBatch(build_record_batch(big, keys, timestamp=5)).values() == big
    many = [bytes([i % 256]) for i in range(20_000)]  # past the shared prefix cache
    raw = build_record_batch(many, timestamp=5, base_offset=1 << 40)
    records = list(RecordBatch(raw))
    assert [r.value for r in records] == many
    assert records[-1].offset == (1 << 40) + 19_999
    builder = RecordBatchBuilder(base_offset=1 << 40)
    for value in many:
        builder.append(value, timestamp=5)
    assert builder.build() == raw
    assert builder.size_in_bytes == len(raw) and len(builder) == builder.record_count == 20_000


def test_default_timestamp_is_now() -> None:
    import time

    before = time.time_ns() // 1_000_000
    batch = RecordBatch(build_record_batch([b"x"]))
    after = time.time_ns() // 1_000_000
    assert before <= batch.base_timestamp <= after
    assert next(iter(batch)).timestamp == batch.base_timestamp


def test_negative_timestamp_deltas_round_trip() -> None:
    raw = build_record_batch([b"a", b"b"], timestamp=[10**12, 10**12 - 5_000_000])
    assert [r.timestamp for r in RecordBatch(raw)] == [10**12, 10**12 - 5_000_000]


def test_records_are_decoded_only_when_asked_and_cached() -> None:
    raw = bytearray(build_record_batch([b"a", b"b"], timestamp=1, codec=Codec.ZSTD))
    batch = RecordBatch(raw)
    assert batch._records is None and batch._records_data is None
    first = batch.record_list()
    assert batch.record_list() is first
    assert list(batch.records()) == first


def test_record_equality_and_repr() -> None:
    record = Record(1, 2, b"k", b"v", (("h", None),))
    assert record == Record(1, 2, b"k", b"v", (("h", None),))
    assert record != Record(1, 2, b"k", b"w", (("h", None),))
    assert record != (1, 2, b"k", b"v", (("h", None),))
    assert record.as_tuple() == (1, 2, b"k", b"v", (("h", None),))
    assert "value=b'v'" in repr(record)


@pytest.mark.parametrize("control_type", list(ControlRecordType))
def test_control_batches(control_type: ControlRecordType) -> None:
    raw = build_control_batch(
        control_type, producer_id=99, producer_epoch=4, coordinator_epoch=7, base_offset=10
    )
    batch = RecordBatch(raw)
    assert batch.is_control and batch.is_transactional
    assert batch.control_type is control_type
    marker = batch.control_record()
    assert marker is not None
    assert (marker.version, marker.type, marker.coordinator_epoch) == (0, control_type, 7)
    assert (batch.producer_id, batch.producer_epoch) == (99, 4)
    [record] = list(batch)
    assert record.key == struct.pack(">hh", 0, int(control_type))


def test_base_offset_and_leader_epoch_rewrites_keep_the_crc() -> None:
    buf = bytearray(build_record_batch([b"a", b"b"], keys=[b"k", None], timestamp=7))
    set_base_offset(buf, 1000)
    set_partition_leader_epoch(buf, 12)
    batch = RecordBatch(buf)
    batch.validate_crc()
    assert (batch.base_offset, batch.partition_leader_epoch) == (1000, 12)
    assert [r.offset for r in batch] == [1000, 1001]
    two = bytearray(bytes(buf) * 2)
    set_base_offset(memoryview(two), 5, pos=len(buf))
    assert RecordBatch(two, len(buf)).base_offset == 5
    with pytest.raises(CorruptRecordError, match="no batch header"):
        set_base_offset(bytearray(4), 1)
    legacy_like = bytearray(buf)
    legacy_like[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        set_partition_leader_epoch(legacy_like, 1)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([],), {}, "at least one record"),
        (([b"a"], [b"k", b"k"]), {}, "2 keys for 1 values"),
        (([b"a"], None, [None, None]), {}, "2 header lists"),
        (([b"a", b"b"],), {"timestamp": [1]}, "1 timestamps for 2 values"),
        ((["text"],), {}, "bytes-like"),
        (([b"a", None, 5],), {}, "bytes-like or None"),
        (([b"a"], [b"k"], [[(b"not-str", b"v")]]), {}, "header keys must be str"),
        (([b"a"],), {"producer_epoch": 1 << 20}, "out of range"),
    ],
)
def test_bad_input_to_the_bulk_builder(args: tuple, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(EncodeError, match=message):
        build_record_batch(*args, **kwargs)


def test_bad_input_to_the_record_builder() -> None:
    builder = RecordBatchBuilder()
    with pytest.raises(EncodeError, match="at least one record"):
        builder.build()
    with pytest.raises(EncodeError, match="bytes-like"):
        builder.append("text")  # type: ignore[arg-type]
    assert len(builder) == 0  # a rejected record leaves nothing behind
    builder.append(b"ok", timestamp=1)
    assert RecordBatch(builder.build()).values() == [b"ok"]


def test_header_is_the_documented_size() -> None:
    raw = build_record_batch([b""], timestamp=0)
    assert BATCH_HEADER_SIZE == 61
    # attributes, ts delta, offset delta, null key, empty value, no headers + length varint
    assert len(raw) == 61 + 1 + 6
