"""Type stub for the optional C record codec (``_codec.c`` and ``_produced_batches.c``); see
:mod:`.native`."""

from __future__ import annotations

from collections.abc import Callable

from kayak.protocol.records.record import Record
from kayak.protocol.records.scanner import BatchHeader

def configure(record_type: type[Record], /) -> None: ...
def decode_records(
    data: bytes | bytearray | memoryview,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    record_type: type[Record],
    append_time: int | None,
    untracked: bool,
    /,
) -> list[Record] | None: ...
def now_ms() -> int: ...
def unfilled_bytearray(size: int, /) -> bytearray: ...
def murmur2(data: bytes | bytearray | memoryview, /) -> int: ...
def track(record: Record, /) -> None: ...
def decode_values(
    data: bytes | bytearray | memoryview, start: int, stop: int, count: int, /
) -> list[bytes | None] | None: ...
def encode_records(
    values: list[bytes | bytearray | memoryview | None],
    keys: list[bytes | bytearray | memoryview | None] | None,
    encoded_headers: list[bytes] | None,
    timestamp_deltas: list[int] | None,
    /,
) -> bytes | None: ...
def encode_batch(
    values: list[bytes | bytearray | memoryview | None],
    keys: list[bytes | bytearray | memoryview | None] | None,
    encoded_headers: list[bytes] | None,
    timestamps: list[int] | None,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    crc32c: Callable[[memoryview], int],
    /,
) -> bytes | None: ...
def validate_records(
    data: bytes | bytearray | memoryview, start: int, stop: int, count: int, /
) -> tuple[int, int, bool] | None: ...
def check_produced_batches(
    data: bytes | bytearray | memoryview,
    base_offset: int,
    leader_epoch: int,
    max_batch_size: int,
    compacted: bool,
    log_append_time: bool,
    header_type: type[BatchHeader],
    crc32c: Callable[[memoryview], int],
    /,
) -> list[BatchHeader] | None: ...
