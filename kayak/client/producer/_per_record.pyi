"""Type stub for the producer's optional per-record C code (``_per_record.c``); see
:mod:`.native`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kayak.client.producer.record_metadata import RecordMetadata

def configure(
    topic_state: type, partition_queue: type, producer_batch: type, buffer_memory: type, /
) -> None: ...
def record_metadata(
    metadata_type: type[RecordMetadata],
    count: int,
    topic: str,
    partition: int,
    base_offset: int,
    positions: list[int] | None,
    timestamps: list[int] | None,
    timestamp: int,
    /,
) -> list[RecordMetadata]: ...
def deliver(
    set_result: Callable[[Any, RecordMetadata], object] | None,
    reports: list[Any],
    on_error: Callable[[Exception], object],
    metadata_type: type[RecordMetadata],
    count: int,
    topic: str,
    partition: int,
    base_offset: int,
    positions: list[int] | None,
    timestamps: list[int] | None,
    timestamp: int,
    /,
) -> None: ...

class PlainAppender:
    enabled: bool
    @property
    def fallback(self) -> Callable[..., None]: ...
    def __init__(
        self,
        fallback: Callable[..., None],
        topics: dict[str, Any],
        waiting: dict[str, Any],
        memory: object,
        batch_size: int,
        max_record_size: int,
        record_overhead: int,
        memory_overhead: int,
        callback_kind: int,
        future_kind: int,
    ) -> None: ...
    def append_future(self, topic: str, value: object, future: object, /) -> bool: ...
    def __call__(self, topic: str, value: object, **kwargs: object) -> None: ...

class MemoryCounters:
    limit: int
    used: int

class BatchCounters:
    record_count: int
    report_kinds: int
    size: int
