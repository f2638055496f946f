"""A record's checks and size estimates, before it joins a batch.

``send`` and ``send_batch`` take values, keys and header values as bytes-like objects only
(``TypeError`` for anything else, with a hint), and charge ``buffer.memory`` and cut batches by
an estimate of each record's encoded size, made here without encoding it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate, repeat
from operator import add

from kayak.client.config import ProducerConfig
from kayak.client.producer.accumulator import RECORD_OVERHEAD
from kayak.client.producer.batch import HeaderList, Value
from kayak.errors import RecordTooLargeError
from kayak.protocol.records import BATCH_HEADER_SIZE

__all__ = [
    "Headers",
    "all_bytes",
    "bulk_headers",
    "chunk_ends",
    "measure",
    "record_sizes",
    "too_large",
]

Headers = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]
"""Record headers: ``[("name", b"value"), ...]`` (names may repeat) or a mapping."""

_BYTES_TYPES = (bytes, bytearray, memoryview)


def _check_bytes(item: object, what: str) -> None:
    if not isinstance(item, _BYTES_TYPES):
        raise TypeError(
            f"record {what} must be bytes, bytearray, memoryview or None, not "
            f"{type(item).__name__} (encode strings first, e.g. {what}.encode())"
        )


def measure(
    value: Value, key: Value, headers: Headers | None
) -> tuple[int, bytes | None, HeaderList | None]:
    """A record's size estimate, its key as bytes (partitioners hash bytes), its headers as a
    list; ``TypeError`` for anything else than bytes-like values, keys and header values."""
    size = RECORD_OVERHEAD
    if value is not None:
        _check_bytes(value, "value")
        size += len(value)
    key_bytes: bytes | None = None
    if key is not None:
        key_bytes = key if type(key) is bytes else _key_bytes(key)
        size += len(key_bytes)
    header_list: HeaderList | None = None
    if headers:
        header_list = _header_list(headers)
        size += _headers_size(header_list)
    return size, key_bytes, header_list


def _key_bytes(key: bytes | bytearray | memoryview) -> bytes:
    _check_bytes(key, "key")
    return bytes(key)


def _header_list(headers: Headers) -> HeaderList:
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    for item in items:
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not (item[1] is None or isinstance(item[1], _BYTES_TYPES))
        ):
            raise TypeError(f"a header must be a (str, bytes | None) pair, not {item!r}")
    return items


def _headers_size(headers: HeaderList) -> int:
    # Name and value with a length varint each (2 bytes is enough below 8 KiB), plus the count.
    return sum(len(name) + len(value or b"") + 4 for name, value in headers) + 4


def too_large(size: int, config: ProducerConfig) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"a record of about {size} bytes does not fit max.request.size "
        f"({config.max_request_size}) or buffer.memory ({config.buffer_memory})"
    )


def record_sizes(
    values: Sequence[Value],
    keys: Sequence[Value] | None,
    headers: Sequence[Headers | None] | None,
    count: int,
) -> list[int]:
    """Each record's encoded size estimate, checking the types of values and keys."""
    sizes = _lengths(values, "value")
    if keys is not None:
        if len(keys) != count:
            raise ValueError(f"{len(keys)} keys for {count} values")
        sizes = list(map(add, sizes, _lengths(keys, "key")))
    if headers is not None:
        if len(headers) != count:
            raise ValueError(f"{len(headers)} header lists for {count} values")
        sizes = [
            size + (_headers_size(_header_list(h)) if h else 0)
            for size, h in zip(sizes, headers, strict=True)
        ]
    return list(map(add, sizes, repeat(RECORD_OVERHEAD, count)))


def all_bytes(items: Sequence[Value]) -> bool:
    return set(map(type, items)) <= _ONLY_BYTES


_ONLY_BYTES = frozenset({bytes})


def _lengths(items: Sequence[Value], what: str) -> list[int]:
    # One pass in C for the common case: all bytes.
    if all_bytes(items):
        return list(map(len, items))  # type: ignore[arg-type]
    lengths = []
    for item in items:
        if item is None:
            lengths.append(0)
        else:
            _check_bytes(item, what)
            lengths.append(len(item))
    return lengths


def bulk_headers(headers: Sequence[Headers | None] | None) -> list[HeaderList | None] | None:
    if headers is None:
        return None
    return [_header_list(h) if h else None for h in headers]


def chunk_ends(sizes: list[int], batch_size: int) -> list[int]:
    """Where to cut records of these sizes into batches of at most ``batch_size`` bytes
    (a record larger than that gets a batch of its own)."""
    room = batch_size - BATCH_HEADER_SIZE
    count = len(sizes)
    filled = list(accumulate(sizes))  # bytes of records 0..i
    if filled[-1] <= room:
        return [count]
    ends: list[int] = []
    start, before = 0, 0
    while start < count:
        end = max(bisect_right(filled, before + room, start), start + 1)
        ends.append(end)
        start, before = end, filled[end - 1]
    return ends
