"""The C record codec (``_codec.c``) against the pure-Python reference code it accelerates.

The C decoders are strict and partial: on any section Python accepts they must return the
same records, and on anything else return None (the caller then runs Python, which raises).
So the properties checked on random and on mutated input are

* C returned records => Python returns equal records (same types, same classes);
* Python succeeded => C returned them too, unless a delta does not fit in int64;
* the public entry points (``RecordBatch``, ``build_record_batch``) give byte-identical
  batches, identical records and identical errors with and without the extension;
* nothing crashes, and the error paths do not leak.

These run whenever the extension is built, with or without ``KAYAK_PURE_PYTHON=1``.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kayak.errors import EncodeError, KafkaError
from kayak.protocol.records import (
    Codec,
    Record,
    RecordBatch,
    TimestampType,
    batch,
    build_record_batch,
    builder,
    native,
    records_section,
)
from kayak.protocol.records.record import BATCH_HEADER_SIZE

try:
    from kayak.protocol.records import _codec
except ImportError:  # built without a compiler: nothing to compare
    pytest.skip("the C record codec is not built", allow_module_level=True)

_codec.configure(Record)  # a no-op when kayak already loaded it; needed under PURE_PYTHON

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
HeaderList = list[tuple[str, bytes | None]]


class PartitionRecord(Record):
    """A slot-less subclass, as the consumer's per-partition record classes are."""

    __slots__ = ()


# -- a raw encoder: every varint may be padded (overlong), every field any value ----------------


def uvarint(raw: int, pad: int = 0) -> bytes:
    """Unsigned LEB128 of ``raw`` (any size), padded with ``pad`` extra continuation bytes."""
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw or pad:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
        if not raw:
            pad -= 1
            while pad > 0:
                out.append(0x80)
                pad -= 1
            out.append(0)
            return bytes(out)


def varint(value: int, pad: int = 0) -> bytes:
    """Zigzag varint of any int (past int64 the zigzag of Python's unbounded ints)."""
    raw = value * 2 if value >= 0 else -value * 2 - 1
    return uvarint(raw, pad)


@dataclass
class RawRecord:
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: HeaderList | None  # None: the single byte 0 for "no headers"
    pad: int  # overlong varint padding, applied to the deltas

    def encode(self) -> bytes:
        body = bytearray(b"\x00")
        body += varint(self.timestamp_delta, self.pad)
        body += varint(self.offset_delta, self.pad)
        for field in (self.key, self.value):
            body += b"\x01" if field is None else varint(len(field)) + field
        if self.headers is None:
            body += b"\x00"
        else:
            body += varint(len(self.headers))
            for name, value in self.headers:
                encoded = name.encode()
                body += varint(len(encoded)) + encoded
                body += varint(-1) if value is None else varint(len(value)) + value
        return varint(len(body)) + bytes(body)


big_ints = st.one_of(
    st.integers(-300, 300),
    st.integers(-(1 << 40), 1 << 40),
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MAX, (1 << 63), -(1 << 63) - 1, 1 << 64]),
)
nullable_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40))), max_size=4
)
raw_records = st.builds(
    RawRecord,
    timestamp_delta=big_ints,
    offset_delta=st.one_of(st.integers(0, 20_000), st.integers(-(1 << 31), (1 << 31) - 1)),
    key=nullable_bytes,
    value=nullable_bytes,
    headers=st.one_of(st.none(), header_lists),
    pad=st.sampled_from([0, 0, 0, 1, 3]),
)
bases = st.one_of(st.integers(-5, 5), st.integers(INT64_MIN, INT64_MAX))


# -- running both ----------------------------------------------------------------------------


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("error", (type, message)). Decoding must only ever raise kayak's
    errors; encoding may also raise EncodeError (not a KafkaError)."""
    try:
        return "ok", call()
    except (KafkaError, EncodeError) as exc:
        return "error", (type(exc), str(exc))


def as_rows(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(type(r), *r.as_tuple()) for r in records]


def python_records(
    data: bytes,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    record_type: type[Record] = Record,
    append_time: int | None = None,
) -> list[Record]:
    """The pure-Python decoder with the dispatcher's post-processing."""
    records = records_section.py_decode_records(
        data, start, stop, count, base_offset, base_timestamp
    )
    for record in records:
        if append_time is not None:
            record.timestamp = append_time
        record.__class__ = record_type
    return records


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def compare_records(
    data: bytes,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    record_type: type[Record] = Record,
    append_time: int | None = None,
) -> None:
    """C against Python on one section, with the strict-and-partial contract."""
    native = _codec.decode_records(
        data, start, stop, count, base_offset, base_timestamp, record_type, append_time, False
    )
    kind, expected = outcome(
        lambda: python_records(
            data, start, stop, count, base_offset, base_timestamp, record_type, append_time
        )
    )
    # Views of the same bytes decode the same (the consumer decodes frames in place).
    for view in (memoryview(data), bytearray(data)):
        in_place = _codec.decode_records(
            view, start, stop, count, base_offset, base_timestamp, record_type, append_time, True
        )
        assert (in_place is None) == (native is None)
        if in_place is not None and native is not None:
            assert as_rows(in_place) == as_rows(native)
    if native is not None:
        assert kind == "ok", f"C decoded what Python rejects: {expected}"
        assert as_rows(native) == as_rows(expected)
    elif kind == "ok":
        # Declining valid input is allowed only for values C cannot hold.
        raw = records_section.py_decode_records(
            data, start, stop, count, base_offset, base_timestamp
        )
        assert any(
            not fits_int64(r.offset - base_offset)
            or not fits_int64(r.offset)
            or (
                append_time is None
                and (not fits_int64(r.timestamp - base_timestamp) or not fits_int64(r.timestamp))
            )
            or (append_time is not None and not fits_int64(r.timestamp - base_timestamp))
            for r in raw
        ), "C declined a section Python decodes"
    # Whatever C did, the dispatcher's answer is Python's.
    assert outcome(
        lambda: as_rows(
            records_section.decode_records(
                data, start, stop, count, base_offset, base_timestamp, record_type, append_time
            )
        )
    ) == (kind, as_rows(expected) if kind == "ok" else expected)
    compare_values(data, start, stop, count, base_offset)


def compare_values(data: bytes, start: int, stop: int, count: int, base_offset: int) -> None:
    native = _codec.decode_values(data, start, stop, count)
    assert _codec.decode_values(memoryview(data), start, stop, count) == native
    kind, expected = outcome(
        lambda: records_section.py_decode_values(data, start, stop, count, base_offset)
    )
    if native is not None:
        assert kind == "ok", f"C decoded values Python rejects: {expected}"
        assert native == expected
        assert all(type(v) is bytes or v is None for v in native)
    else:
        assert kind == "error", "C declined values Python decodes"
    assert outcome(
        lambda: records_section.decode_values(data, start, stop, count, base_offset)
    ) == (
        kind,
        expected,
    )


def section_of(records: list[RawRecord], prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    return prefix + b"".join(r.encode() for r in records) + suffix


# -- decoding --------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(raw_records, max_size=12),
    base_offset=bases,
    base_timestamp=bases,
    prefix=st.binary(max_size=8),
    suffix=st.binary(max_size=8),
    append_time=st.one_of(st.none(), st.integers(INT64_MIN, INT64_MAX)),
    subclass=st.booleans(),
)
def test_random_sections_decode_alike(
    records: list[RawRecord],
    base_offset: int,
    base_timestamp: int,
    prefix: bytes,
    suffix: bytes,
    append_time: int | None,
    subclass: bool,
) -> None:
    data = section_of(records, prefix, suffix)
    start, stop = len(prefix), len(data) - len(suffix)
    record_type = PartitionRecord if subclass else Record
    compare_records(
        data, start, stop, len(records), base_offset, base_timestamp, record_type, append_time
    )


@settings(max_examples=200, deadline=None)
@given(records=st.lists(raw_records.filter(lambda r: r.pad == 0), min_size=1, max_size=8))
def test_ordinary_sections_are_decoded_in_c(records: list[RawRecord]) -> None:
    """Small deltas and plain varints: C must not decline (or the speed-up is lost)."""
    for r in records:
        assume(abs(r.timestamp_delta) < 1 << 40)
    data = section_of(records)
    decoded = _codec.decode_records(
        data, 0, len(data), len(records), 100, 1_000, Record, None, False
    )
    assert decoded is not None
    values = _codec.decode_values(data, 0, len(data), len(records))
    assert values == [r.value for r in records]


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 0 and buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op == 2 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif op == 3:
            at = rng.randint(0, len(buf))
            filler = [rng.choice([0x80, 0xFF, 0x01, 0x00]) for _ in range(rng.randint(1, 6))]
            buf[at:at] = bytes(filler)
        elif op == 4 and buf:
            at = rng.randrange(len(buf))
            del buf[at : at + rng.randint(1, 4)]
        else:
            buf += bytes([rng.randrange(256)])
    return bytes(buf)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(raw_records, min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 1000, 1 << 30]),
)
def test_mutated_sections_decode_alike(
    records: list[RawRecord], seed: int, count_change: int
) -> None:
    rng = random.Random(seed)
    data = mutate(section_of(records), rng)
    count = max(0, len(records) + count_change)
    stop = len(data) - rng.choice([0, 0, 0, 1])
    compare_records(data, 0, max(stop, 0), count, 7, 1_000)


def test_fuzz_the_decoders_hard() -> None:
    """Many cheap mutations of real batches, straight into C: no crash, the same answers."""
    rng = random.Random(20260101)
    base = [
        RawRecord(0, 0, b"k", b"v" * 20, [("h\u00e9", b"x"), ("n", None)], 0),
        RawRecord(3, 1, None, None, None, 0),
        RawRecord(-5, 2, b"", b"", [], 0),
        RawRecord(1 << 40, 3, b"key" * 50, b"value" * 60, None, 1),
    ]
    sections = [section_of(base), section_of(base[:1]), section_of(base[1:3])]
    for _ in range(20_000):
        data = mutate(rng.choice(sections), rng)
        count = rng.choice([1, 2, 3, 4, 5, 0])
        start = rng.choice([0, 0, 0, 1])
        stop = len(data) - rng.choice([0, 0, 1])
        if stop < start:
            continue
        compare_records(data, start, stop, count, rng.choice([0, INT64_MAX - 1]), 0)


def test_arguments_outside_the_buffer_are_declined() -> None:
    data = section_of([RawRecord(0, 0, None, b"v", None, 0)])
    for start, stop, count in [(-1, len(data), 1), (0, len(data) + 1, 1), (3, 2, 0), (0, 0, -1)]:
        assert _codec.decode_records(data, start, stop, count, 0, 0, Record, None, False) is None
        assert _codec.decode_values(data, start, stop, count) is None
    # A count no section this size can hold: declined before any allocation.
    assert _codec.decode_records(data, 0, len(data), 1 << 40, 0, 0, Record, None, False) is None
    # Any flat buffer is read in place, and gives bytes.
    assert _codec.decode_values(bytearray(data), 0, len(data), 1) == [b"v"]
    assert _codec.decode_values(memoryview(data), 0, len(data), 1) == [b"v"]
    # Objects without a flat buffer are left to Python.
    assert _codec.decode_values(memoryview(data)[::2], 0, 1, 0) is None
    assert _codec.decode_values("text", 0, 1, 0) is None  # type: ignore[arg-type]


def test_record_type_must_share_the_layout() -> None:
    class WithDict(Record):
        pass

    data = section_of([RawRecord(0, 0, None, b"v", None, 0)])
    with pytest.raises(TypeError):
        _codec.decode_records(data, 0, len(data), 1, 0, 0, WithDict, None, False)
    with pytest.raises(TypeError):
        _codec.decode_records(data, 0, len(data), 1, 0, 0, int, None, False)
    [record] = (
        _codec.decode_records(data, 0, len(data), 1, 0, 0, PartitionRecord, None, False) or []
    )
    assert type(record) is PartitionRecord
    record.value = b"changed"  # the slots are real slots
    assert record.value == b"changed"


def test_error_paths_do_not_leak() -> None:
    good = section_of(
        [RawRecord(0, i, b"k", b"v" * 10, [("a", b"b"), ("c", None)], 0) for i in range(5)]
    )
    bad_utf8 = section_of([RawRecord(0, 0, b"k", b"v", [("a", b"b")], 0)]).replace(
        b"\x02a", b"\x02\xff"
    )
    cases = [good, good[:-3], good + b"\x00", bad_utf8]

    def run() -> None:
        for data in cases:
            _codec.decode_records(data, 0, len(data), 5, 0, 0, PartitionRecord, None, False)
            _codec.decode_records(data, 0, len(data), 5, 0, 0, Record, 12, True)
            _codec.decode_values(data, 0, len(data), 5)
            _codec.encode_records([b"v", None, bytearray(b"x"), memoryview(b"y")], None, None, None)
            _codec.encode_records([b"v", "not bytes"], None, None, None)

    run()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            run()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after 3,000 rounds"


# -- the public entry points, with and without the extension -------------------------------


@pytest.fixture
def pure_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """Run a call with the C codec switched off in batch.py, records_section.py and builder.py."""

    def call(fn: Callable[[], Any]) -> Any:
        with monkeypatch.context() as patch:
            patch.setattr(batch, "_codec", None)
            patch.setattr(records_section, "_codec", None)
            patch.setattr(builder, "_codec", None)
            return outcome(fn)

    yield call


def with_codec(fn: Callable[[], Any]) -> Any:
    """Run a call with the C codec switched on (even under KAYAK_PURE_PYTHON=1)."""
    saved = batch._codec, records_section._codec, builder._codec
    batch._codec = records_section._codec = builder._codec = _codec  # type: ignore[assignment]
    try:
        return outcome(fn)
    finally:
        batch._codec, records_section._codec, builder._codec = saved


encodable = st.one_of(st.none(), st.binary(max_size=200)).flatmap(
    lambda b: st.sampled_from(
        [b, None if b is None else bytearray(b), None if b is None else memoryview(b)]
    )
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    values=st.lists(encodable, min_size=1, max_size=20),
    keyed=st.booleans(),
    data=st.data(),
    timestamps=st.one_of(
        st.integers(INT64_MIN // 2, INT64_MAX // 2),
        st.lists(st.integers(-(1 << 45), 1 << 45), min_size=1, max_size=1),
    ),
    codec=st.sampled_from([Codec.NONE, Codec.NONE, Codec.LZ4]),
)
def test_build_record_batch_is_byte_identical(
    pure_python: Callable[[Callable[[], Any]], Any],
    values: list[Any],
    keyed: bool,
    data: st.DataObject,
    timestamps: int | list[int],
    codec: Codec,
) -> None:
    count = len(values)
    keys = data.draw(st.lists(encodable, min_size=count, max_size=count)) if keyed else None
    headers = data.draw(
        st.one_of(
            st.none(), st.lists(st.one_of(st.none(), header_lists), min_size=count, max_size=count)
        )
    )
    if isinstance(timestamps, list):
        timestamps = data.draw(
            st.lists(big_ints.filter(fits_int64), min_size=count, max_size=count)
        )

    def build() -> bytes:
        return build_record_batch(
            values, keys, headers, timestamp=timestamps, codec=codec, base_offset=5
        )

    native = with_codec(build)
    assert native == pure_python(build)
    if native[0] == "ok" and all(
        fits_int64(t) for t in ([timestamps] if isinstance(timestamps, int) else timestamps)
    ):
        # The batch decodes alike both ways, through the public reader.
        def read() -> list[tuple[Any, ...]]:
            parsed = RecordBatch(native[1])
            return [r.as_tuple() for r in parsed.record_list()] + [tuple(parsed.values())]

        assert with_codec(read) == pure_python(read)


@pytest.mark.parametrize(
    ("values", "keys", "headers"),
    [
        ([b"a", "text"], None, None),
        ([b"a", 5], None, None),
        ([b"a"], ["k"], None),
        ([b"a"], [None], [[(b"bytes-key", b"v")]]),
        ([b"a"], [7], [[("k", 7)]]),
        ([b"a", b"b"], [b"k"], None),
        ([memoryview(b"abcd").cast("i")], None, None),
        ((b"tuple", None), (None, b"k"), None),
    ],
)
def test_encode_errors_and_odd_inputs_match(
    pure_python: Callable[[Callable[[], Any]], Any], values: Any, keys: Any, headers: Any
) -> None:
    def build() -> bytes:
        return build_record_batch(values, keys, headers, timestamp=1)

    assert with_codec(build) == pure_python(build)


def test_encode_records_declines_what_it_does_not_take() -> None:
    assert _codec.encode_records([b"a", "s"], None, None, None) is None
    assert _codec.encode_records([b"a"], None, None, [1 << 70]) is None
    assert _codec.encode_records([b"a"], None, None, [True]) is not None  # an int subclass
    assert _codec.encode_records([], None, None, None) is None
    assert _codec.encode_records((b"a",), None, None, None) is None  # type: ignore[arg-type]
    assert _codec.encode_records([b"a"], [b"k", b"k"], None, None) is None


def test_log_append_time_and_the_consumer_class(
    pure_python: Callable[[Callable[[], Any]], Any],
) -> None:
    raw = bytearray(
        build_record_batch(
            [b"a", b"b"], timestamp=[5, 9], timestamp_type=TimestampType.LOG_APPEND_TIME
        )
    )
    buf = bytes(raw)

    def read() -> list[tuple[Any, ...]]:
        parsed = RecordBatch(buf)
        return as_rows(parsed.record_list(PartitionRecord)) + as_rows(parsed.record_list())

    native = with_codec(read)
    assert native == pure_python(read)
    assert native[0] == "ok"
    assert {row[2] for row in native[1]} == {9}  # maxTimestamp for every record
    assert [row[0] for row in native[1]] == [PartitionRecord] * 2 + [Record] * 2


def test_corrupt_batches_raise_the_same_errors(
    pure_python: Callable[[Callable[[], Any]], Any],
) -> None:
    good = build_record_batch(
        [b"value-%d" % i for i in range(10)],
        [b"k"] * 10,
        [[("h", b"x")]] * 10,
        timestamp=list(range(100, 110)),
    )
    rng = random.Random(7)
    for _ in range(2_000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(BATCH_HEADER_SIZE, len(data))
            data[at] = rng.randrange(256)
        buf = bytes(data)

        def read(buf: bytes = buf) -> list[Any]:
            parsed = RecordBatch(buf)
            return [r.as_tuple() for r in parsed.record_list()] + [parsed.values()]

        assert with_codec(read) == pure_python(read)


@pytest.mark.parametrize(
    "fields",
    [
        {"base_offset": 1 << 63},
        {"partition_leader_epoch": 1 << 31},
        {"producer_id": -(1 << 63) - 1},
        {"producer_epoch": 1 << 15},
        {"producer_epoch": -(1 << 15) - 1},
        {"base_sequence": -(1 << 31) - 1},
        {"timestamp": 1 << 63},
        {"base_offset": INT64_MAX, "producer_epoch": -(1 << 15), "base_sequence": (1 << 31) - 1},
        {"is_transactional": True, "timestamp_type": TimestampType.LOG_APPEND_TIME},
    ],
)
def test_header_fields_at_and_past_their_widths(
    pure_python: Callable[[Callable[[], Any]], Any], fields: dict[str, Any]
) -> None:
    def build() -> bytes:
        return build_record_batch([b"v", None], [None, b"k"], **fields)

    fields.setdefault("timestamp", 1)
    assert with_codec(build) == pure_python(build)


def test_encode_batch_declines_out_of_range_fields() -> None:
    import crc32c

    ok = [0, -1, 0, 1, 1, -1, -1, -1]
    assert _codec.encode_batch([b"v"], None, None, None, *ok, crc32c.crc32c) is not None
    for index, value in [(0, 1 << 63), (1, 1 << 31), (2, 1 << 15), (6, -(1 << 15) - 1)]:
        fields = list(ok)
        fields[index] = value
        assert _codec.encode_batch([b"v"], None, None, None, *fields, crc32c.crc32c) is None


@pytest.mark.parametrize("as_view", [memoryview, bytearray])
def test_batches_in_views_read_alike(
    pure_python: Callable[[Callable[[], Any]], Any], as_view: Callable[[bytes], Any]
) -> None:
    """RecordBatch over a view (as the consumer passes its frames): same records, same
    errors, with and without the extension, and the keys and values are bytes."""
    good = build_record_batch(
        [b"value-%d" % i for i in range(10)], [b"k", None] * 5, timestamp=list(range(10))
    )
    rng = random.Random(11)
    for round_ in range(1_000):
        data = bytearray(b"\x00" * 5 + good)
        if round_:
            at = rng.randrange(5 + BATCH_HEADER_SIZE, len(data))
            data[at] = rng.randrange(256)
        buf = as_view(bytes(data))

        def read(buf: Any = buf) -> list[Any]:
            parsed = RecordBatch(buf, 5)
            values = parsed.values()
            records = parsed.record_list(PartitionRecord)
            assert all(type(v) is bytes for v in values if v is not None)
            return [*as_rows(records), values]

        assert with_codec(read) == pure_python(read)


@pytest.mark.skipif(not native.NATIVE, reason="KAYAK_PURE_PYTHON: consumer records stay tracked")
def test_consumer_records_are_untracked_until_assigned_to() -> None:
    """Decoded consumer records are left to reference counting, and an assignment that can
    make a cycle puts them back under the cycle collector, so that cycle is still freed."""
    import weakref

    from kayak.client.consumer.records import ConsumerRecord, record_class

    cls = record_class("t", 0, 0)
    data = section_of([RawRecord(0, i, b"k", b"v", [("h", b"x")], 0) for i in range(3)])
    records = _codec.decode_records(data, 0, len(data), 3, 0, 0, cls, None, True)
    assert records is not None
    assert all(type(r) is cls and not gc.is_tracked(r) for r in records)
    assert isinstance(records[0], ConsumerRecord)
    # Plain Records (and untracked=False) stay tracked.
    tracked = _codec.decode_records(data, 0, len(data), 3, 0, 0, Record, None, False)
    assert tracked is not None and all(gc.is_tracked(r) for r in tracked)

    class Holder:
        record: Any

    record = records[1]
    holder = Holder()
    holder.record = record
    record.value = holder  # type: ignore[assignment]  # a cycle: record -> holder -> record
    assert gc.is_tracked(record)
    alive = weakref.ref(holder)
    del record, holder, records
    gc.collect()
    assert alive() is None, "a cycle through a consumer record was not collected"


@pytest.mark.parametrize(
    "stamps",
    [
        [5, 3, 9, 9, 1],  # out of order: negative deltas, the max in the middle
        [7] * 5,  # all equal: deltas of 0, as one timestamp for all gives
        [INT64_MAX, 0, 1, 2, 3],  # deltas past int64: the C encoder declines, Python refuses
        [1, 2, 3],  # fewer timestamps than records
        [1, 2, "3", 4, 5],  # not all ints
    ],
)
def test_per_record_timestamps_encode_alike(
    pure_python: Callable[[Callable[[], Any]], Any], stamps: list[Any]
) -> None:
    """The C encoder takes each record's timestamp as given and makes the deltas and the max
    itself: the same batch, or the same error, as Python's deltas."""

    def build() -> Any:
        try:
            return build_record_batch([b"a", None, b"c", b"d", b"e"], timestamp=stamps)
        except (EncodeError, TypeError) as exc:
            return type(exc), str(exc)

    assert with_codec(build) == pure_python(build)


def test_encode_batch_takes_deltas_from_the_base_and_raises_the_max() -> None:
    import crc32c

    batch = _codec.encode_batch(
        [b"a", b"b", b"c"], None, None, [100, 90, 130], 0, -1, 0, 100, 100, -1, -1, -1,
        crc32c.crc32c,
    )  # fmt: skip
    assert batch is not None
    parsed = RecordBatch(batch)
    assert (parsed.base_timestamp, parsed.max_timestamp) == (100, 130)
    assert [r.timestamp for r in parsed.record_list()] == [100, 90, 130]
    # A delta that does not fit int64 is declined, not wrapped.
    far_apart = [-(1 << 63), INT64_MAX]
    fields = [0, -1, 0, far_apart[0], far_apart[0], -1, -1, -1]
    assert _codec.encode_batch([b"a", b"b"], None, None, far_apart, *fields, crc32c.crc32c) is None


@pytest.mark.skipif(not native.NATIVE, reason="KAYAK_PURE_PYTHON: no C codec")
def test_unfilled_bytearray_is_a_bytearray_of_its_size() -> None:
    assert _codec is not None
    for size in (0, 1, 4096, 1 << 20):
        buffer = _codec.unfilled_bytearray(size)
        assert type(buffer) is bytearray and len(buffer) == size
    with pytest.raises(ValueError, match="negative size"):
        _codec.unfilled_bytearray(-1)
    with pytest.raises(TypeError):
        _codec.unfilled_bytearray("8")  # type: ignore[arg-type]
