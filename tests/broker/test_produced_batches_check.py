"""The produce path's C batch check against its Python reference (hypothesis).

``_codec.check_produced_batches`` answers for valid uncompressed batches in one call and
declines (None) everything else, so the Python reference in ``kayak.broker.log.produced``
runs and raises its own error. Three properties:

* every valid uncompressed request is answered in C (the fast path is really taken), with
  exactly the headers the reference gives: assigned base offsets, the leader epoch, the rest
  as sent;
* whatever C answers for, however the bytes were mutated (with the CRC recomputed so the
  mutation reaches the record walk, or not), the reference answers the same;
* whatever the reference refuses, C declines.
"""

from __future__ import annotations

import contextlib
import os
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.broker.log import produced
from kayak.broker.log.config import LogConfig
from kayak.errors import KafkaError
from kayak.protocol.records import Codec, build_record_batch
from kayak.protocol.records.native import codec
from kayak.protocol.records.record import ATTRIBUTES_POS, CRC_POS
from kayak.protocol.records.scanner import BatchHeader
from tests.records.test_validation_fuzz import ForgedBatch, valid_batches

# make test builds the extension (pip install -e .); under KAYAK_PURE_PYTHON=1, which selects
# the Python code on purpose, there is no C check to compare.
pytestmark = pytest.mark.skipif(
    os.environ.get("KAYAK_PURE_PYTHON", "") not in ("", "0"),
    reason="KAYAK_PURE_PYTHON=1 selects the Python reference alone",
)

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_CRC = struct.Struct(">I")


def _config(*, compacted: bool = False, log_append_time: bool = False, **extra: str) -> LogConfig:
    overrides = dict(extra)
    if compacted:
        overrides["cleanup.policy"] = "compact"
    if log_append_time:
        overrides["message.timestamp.type"] = "LogAppendTime"
    return LogConfig.from_properties(overrides)


def in_c(data: bytes, config: LogConfig, base_offset: int = 0, epoch: int = 3) -> object:
    assert codec is not None
    return codec.check_produced_batches(
        memoryview(data), base_offset, epoch, config.max_message_bytes, config.compacted,
        config.log_append_time, BatchHeader, crc32c.crc32c,
    )  # fmt: skip


def in_python(data: bytes, config: LogConfig, base_offset: int = 0, epoch: int = 3) -> object:
    try:
        return produced._checked_headers(memoryview(data), config, base_offset, epoch)
    except KafkaError as exc:
        return exc


def agree(data: bytes, config: LogConfig, base_offset: int = 0) -> object:
    """C's answer, after checking it is None or exactly the reference's."""
    answer = in_c(data, config, base_offset)
    reference = in_python(data, config, base_offset)
    if answer is not None:
        assert isinstance(answer, list)
        assert all(type(header) is BatchHeader for header in answer)
        assert answer == reference
    elif isinstance(reference, list):  # declined something valid: only compressed batches
        codecs = {header.attributes & 0x07 for header in reference}
        assert codecs - {0} or len(data) == 0, "C declined a valid uncompressed request"
    return answer


def recrc(data: bytes, position: int = 0) -> bytes:
    """``data`` with the batch at ``position`` given the CRC its bytes now have."""
    buf = bytearray(data)
    (length,) = struct.unpack_from(">i", buf, position + 8)
    end = position + 12 + length
    _CRC.pack_into(buf, position + CRC_POS, crc32c.crc32c(buf[position + ATTRIBUTES_POS : end]))
    return bytes(buf)


uncompressed = valid_batches().filter(lambda b: b.codec is Codec.NONE)


def _keyed(batch: ForgedBatch) -> bool:
    return all(record.key is not None for record in batch.records)


@FUZZ
@given(st.lists(uncompressed, min_size=1, max_size=3), st.integers(0, 1 << 40), st.booleans())
def test_valid_uncompressed_requests_are_answered_in_c_as_in_python(
    batches: list[ForgedBatch], base_offset: int, log_append_time: bool
) -> None:
    data = b"".join(batch.encode() for batch in batches)
    compacted = all(_keyed(batch) for batch in batches)
    config = _config(compacted=compacted, log_append_time=log_append_time)
    answer = agree(data, config, base_offset)
    assert isinstance(answer, list)
    assert answer[0].base_offset == base_offset
    assert {h.partition_leader_epoch for h in answer} == {3}
    assert answer[-1].next_offset == base_offset + sum(len(b.records) for b in batches)


@FUZZ
@given(st.lists(uncompressed, min_size=1, max_size=2), st.data(), st.booleans())
def test_mutated_bytes_are_answered_as_in_python_or_declined(
    batches: list[ForgedBatch], data: st.DataObject, fix_crc: bool
) -> None:
    encoded = bytearray(b"".join(batch.encode() for batch in batches))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    mutated = bytes(encoded)
    if fix_crc:
        with contextlib.suppress(struct.error):  # the length field itself was mutated
            mutated = recrc(mutated)
    for compacted in (False, True):
        answer = agree(mutated, _config(compacted=compacted))
        if isinstance(in_python(mutated, _config(compacted=compacted)), KafkaError):
            assert answer is None


@FUZZ
@given(uncompressed, st.data())
def test_truncated_or_padded_requests_are_declined(batch: ForgedBatch, data: st.DataObject) -> None:
    encoded = batch.encode()
    cut = data.draw(st.integers(1, len(encoded) - 1))  # empty records are refused earlier
    padding = data.draw(st.binary(min_size=1, max_size=70))
    for mutated in (encoded[:cut], encoded + padding):
        assert agree(mutated, _config()) is None
        assert isinstance(in_python(mutated, _config()), KafkaError)


def test_compressed_batches_are_declined_and_checked_in_python() -> None:
    batch = build_record_batch([b"a", b"b"], codec=Codec.ZSTD)
    assert in_c(batch, _config()) is None
    headers = in_python(batch, _config())
    assert isinstance(headers, list) and headers[0].record_count == 2


def test_a_batch_over_max_message_bytes_is_declined_and_refused_in_python() -> None:
    batch = build_record_batch([b"x" * 2000])
    config = _config(**{"max.message.bytes": "1000"})
    assert in_c(batch, config) is None
    assert "max.message.bytes" in str(in_python(batch, config))
    assert isinstance(agree(batch, _config(**{"max.message.bytes": str(len(batch))})), list)


def test_a_control_batch_is_declined_and_refused_in_python() -> None:
    buf = bytearray(build_record_batch([b"x"]))
    buf[ATTRIBUTES_POS + 1] |= 0x20
    control = recrc(bytes(buf))
    assert in_c(control, _config()) is None
    assert "control batches" in str(in_python(control, _config()))


def test_a_null_key_passes_only_where_keys_are_not_required() -> None:
    batch = build_record_batch([b"v"])  # no key
    assert isinstance(agree(batch, _config()), list)
    assert agree(batch, _config(compacted=True)) is None
    assert "key" in str(in_python(batch, _config(compacted=True)))


def test_offsets_past_int64_are_declined() -> None:
    batch = build_record_batch([b"a", b"b"])
    assert in_c(batch, _config(), base_offset=(1 << 63) - 2) is None
    assert isinstance(in_c(batch, _config(), base_offset=(1 << 63) - 3), list)


def test_the_c_check_is_built_and_used() -> None:
    """``make test`` builds the extension: without it these tests would compare nothing."""
    assert codec is not None
    assert produced._checked_in_c is codec.check_produced_batches


def test_bad_arguments_raise_and_non_buffers_are_declined() -> None:
    assert codec is not None
    batch = build_record_batch([b"a"])
    with pytest.raises(TypeError):
        codec.check_produced_batches(batch, 0, 0, 100, False, False, dict, crc32c.crc32c)
    with pytest.raises(TypeError):
        codec.check_produced_batches(batch, 0, 0)  # type: ignore[call-arg]
    text: object = "text"
    declined = codec.check_produced_batches(
        text, 0, 0, 1 << 20, False, False, BatchHeader, crc32c.crc32c  # type: ignore[arg-type]
    )
    assert declined is None
