"""Decoding a record batch's records section (magic v2): the C decoder first, and the Python
loops as its reference and for whatever it declines.

:class:`~kayak.protocol.records.batch.RecordBatch` finds the section (decompressing it when the
batch is compressed) and hands it here; so does the broker's validation of produced batches.
"""

from __future__ import annotations

from kayak.errors import CorruptRecordError
from kayak.protocol.records.native import codec as _codec
from kayak.protocol.records.record import NO_HEADERS, Header, Headers, Record
from kayak.protocol.records.varints import (
    ZIGZAG_DECODE_1,
    ZIGZAG_DECODE_2,
    read_zigzag,
    skip_varint,
)

__all__ = ["decode_records", "decode_values", "py_decode_records", "py_decode_values"]

Buffer = bytes | bytearray | memoryview

# The decoder fills a Record's slots itself: object.__new__ plus five slot stores cost less
# than a call to Record.__init__.
_new_record = object.__new__


# -- the decode loops --------------------------------------------------------------------------
#
# These are the consumer's hot path, so they are written flat: varints of one and two bytes are
# decoded inline through lookup tables (a list index is cheaper than shift/xor/negate, and a
# function call costs more than the whole decode); longer ones go through read_zigzag. The
# records section is data[start:stop] (an uncompressed batch is decoded in place, inside the
# buffer it arrived in). Slicing never fails past the end, so each record must end within the
# section, its fields must end exactly where its length says, and the records must end exactly
# at ``stop``; anything else surfaces as IndexError, turned into CorruptRecordError once.
#
# With the C codec (see .native) the C loops run first; they return None for anything that is
# not strictly valid (or that they leave to Python, like a varint past 64 bits) and the Python
# loops below then decode it (from bytes), raising their usual errors.


def decode_records(
    data: Buffer,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    record_type: type[Record] = Record,
    append_time: int | None = None,
) -> list[Record]:
    """The records of ``data[start:stop]``, as ``record_type`` instances; ``append_time``
    (a log-append-time batch's) replaces every timestamp when given."""
    if _codec is not None:
        decoded = _codec.decode_records(
            data,
            start,
            stop,
            count,
            base_offset,
            base_timestamp,
            record_type,
            append_time,
            record_type._decoded_untracked,
        )
        if decoded is not None:
            return decoded
    section, start, stop = _as_bytes(data, start, stop)
    records = py_decode_records(section, start, stop, count, base_offset, base_timestamp)
    if append_time is not None:
        for record in records:
            record.timestamp = append_time
    if record_type is not Record:
        # Same slots, so the class can be swapped in place.
        for record in records:
            record.__class__ = record_type
    return records


def decode_values(
    data: Buffer, start: int, stop: int, count: int, base_offset: int
) -> list[bytes | None]:
    """Every value of ``data[start:stop]`` (keys bounds-checked, headers skipped)."""
    if _codec is not None:
        decoded = _codec.decode_values(data, start, stop, count)
        if decoded is not None:
            return decoded
    section, start, stop = _as_bytes(data, start, stop)
    return py_decode_values(section, start, stop, count, base_offset)


def _as_bytes(data: Buffer, start: int, stop: int) -> tuple[bytes, int, int]:
    """The Python decoders slice their input, and keys and values must be ``bytes``: a view
    the C decoder declined is copied (its section only, as ``records_data`` would)."""
    if type(data) is bytes:
        return data, start, stop
    section = bytes(data[start:stop])
    return section, 0, len(section)


def py_decode_records(
    data: bytes, start: int, stop: int, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    zz1 = ZIGZAG_DECODE_1
    zz2 = ZIGZAG_DECODE_2
    new_record = _new_record
    record_type = Record
    no_headers = NO_HEADERS
    records: list[Record] = []
    append = records.append
    pos = start
    index = -1
    try:
        for index in range(count):  # index names the record in errors
            # length: varint
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    length = zz2[b - 0x80 + (b2 << 7)]
                    pos += 2
                else:
                    length, pos = read_zigzag(data, pos, 5)
            end = pos + length
            if end > stop:
                raise _bad_record(base_offset, index, pos - start, f"record length {length}")
            # attributes: int8, unused; timestampDelta: varlong
            b = data[pos + 1]
            if b < 0x80:
                timestamp = base_timestamp + zz1[b]
                pos += 2
            else:
                delta, pos = read_zigzag(data, pos + 1, 10)
                timestamp = base_timestamp + delta
            # offsetDelta: varint
            b = data[pos]
            if b < 0x80:
                offset = base_offset + zz1[b]
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    offset = base_offset + zz2[b - 0x80 + (b2 << 7)]
                    pos += 2
                else:
                    delta, pos = read_zigzag(data, pos, 5)
                    offset = base_offset + delta
            # key: varint length (-1, the single byte 0x01, is null) + bytes
            b = data[pos]
            if b == 1:
                key = None
                pos += 1
            else:
                if b < 0x80:
                    key_length = zz1[b]
                    pos += 1
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        key_length = zz2[b - 0x80 + (b2 << 7)]
                        pos += 2
                    else:
                        key_length, pos = read_zigzag(data, pos, 5)
                if key_length < 0:
                    raise _bad_record(base_offset, index, pos - start, f"key length {key_length}")
                key = data[pos : pos + key_length]
                pos += key_length
            # value: the same
            b = data[pos]
            if b == 1:
                value = None
                pos += 1
            else:
                if b < 0x80:
                    value_length = zz1[b]
                    pos += 1
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        value_length = zz2[b - 0x80 + (b2 << 7)]
                        pos += 2
                    else:
                        value_length, pos = read_zigzag(data, pos, 5)
                if value_length < 0:
                    raise _bad_record(
                        base_offset, index, pos - start, f"value length {value_length}"
                    )
                value = data[pos : pos + value_length]
                pos += value_length
            # headers: varint count, then (key, value) pairs
            if data[pos] == 0:
                headers = no_headers
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, end, start, base_offset, index)
            if pos != end:
                raise _bad_record(
                    base_offset, index, pos, f"fields end at {pos}, record length says {end}"
                )
            record = new_record(record_type)
            record.offset = offset
            record.timestamp = timestamp
            record.key = key
            record.value = value
            record.headers = headers
            append(record)
    except IndexError:
        raise _bad_record(base_offset, index, pos - start, "truncated record") from None
    _check_section_end(pos, start, stop, count, base_offset)
    return records


def py_decode_values(
    data: bytes, start: int, stop: int, count: int, base_offset: int
) -> list[bytes | None]:
    zz1 = ZIGZAG_DECODE_1
    zz2 = ZIGZAG_DECODE_2
    values: list[bytes | None] = []
    append = values.append
    pos = start
    index = -1
    try:
        for index in range(count):  # index names the record in errors
            b = data[pos]
            if b < 0x80:
                pos += 1
                end = pos + zz1[b]
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    pos += 2
                    end = pos + zz2[b - 0x80 + (b2 << 7)]
                else:
                    length, pos = read_zigzag(data, pos, 5)
                    end = pos + length
            if end > stop:
                raise _bad_record(base_offset, index, pos - start, "record length")
            # Skip attributes and timestampDelta, then offsetDelta.
            if data[pos + 1] < 0x80:
                pos += 2
            else:
                pos = skip_varint(data, pos + 1)
            if data[pos] < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                pos = skip_varint(data, pos)
            b = data[pos]
            if b == 1:
                pos += 1
            else:
                if b < 0x80:
                    key_length = zz1[b]
                    pos += 1
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        key_length = zz2[b - 0x80 + (b2 << 7)]
                        pos += 2
                    else:
                        key_length, pos = read_zigzag(data, pos, 5)
                if key_length < 0:
                    raise _bad_record(base_offset, index, pos - start, f"key length {key_length}")
                pos += key_length
            b = data[pos]
            if b == 1:
                append(None)
                pos += 1
            else:
                if b < 0x80:
                    value_length = zz1[b]
                    pos += 1
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        value_length = zz2[b - 0x80 + (b2 << 7)]
                        pos += 2
                    else:
                        value_length, pos = read_zigzag(data, pos, 5)
                if value_length < 0:
                    raise _bad_record(
                        base_offset, index, pos - start, f"value length {value_length}"
                    )
                append(data[pos : pos + value_length])
                pos += value_length
            # At least the header count must be left; the headers themselves are skipped.
            if pos >= end:
                raise _bad_record(
                    base_offset, index, pos - start, "key and value overrun the record"
                )
            pos = end
    except IndexError:
        raise _bad_record(base_offset, index, pos - start, "truncated record") from None
    _check_section_end(pos, start, stop, count, base_offset)
    return values


def _check_section_end(pos: int, start: int, stop: int, count: int, base_offset: int) -> None:
    if pos != stop:
        raise CorruptRecordError(
            f"batch at base offset {base_offset}: its {count} records end at byte "
            f"{pos - start} of a {stop - start}-byte records section"
        )


def _read_headers(
    data: bytes, pos: int, end: int, start: int, base_offset: int, index: int
) -> tuple[Headers, int]:
    count, pos = read_zigzag(data, pos, 5)
    if count < 0 or count > end - pos:
        raise _bad_record(base_offset, index, pos - start, f"header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        key_length, pos = read_zigzag(data, pos, 5)
        if key_length < 0 or pos + key_length > end:
            raise _bad_record(base_offset, index, pos - start, f"header key length {key_length}")
        try:
            key = data[pos : pos + key_length].decode()
        except UnicodeDecodeError:
            raise _bad_record(base_offset, index, pos - start, "header key is not UTF-8") from None
        pos += key_length
        value_length, pos = read_zigzag(data, pos, 5)
        if value_length < 0:
            if value_length != -1:
                raise _bad_record(
                    base_offset, index, pos - start, f"header value length {value_length}"
                )
            value = None
        else:
            if pos + value_length > end:
                raise _bad_record(
                    base_offset, index, pos - start, f"header value length {value_length}"
                )
            value = data[pos : pos + value_length]
            pos += value_length
        headers.append((key, value))
    return tuple(headers), pos


def _bad_record(base_offset: int, index: int, pos: int, problem: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch at base offset {base_offset}, record {index} (byte {pos} of the records "
        f"section): {problem}"
    )
