"""Type stub for the consumer's optional per-record C code (``_next_record.c``); see
:mod:`.native`."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Self

from kayak.client.consumer.records import ConsumerRecord

def configure(
    completed_fetch: type, partition_state: type, record: type, poll_state: type, /
) -> None: ...

class RecordIterator:
    def __init__(self, consumer: Any, yield_every: int) -> None: ...
    def __aiter__(self) -> Self: ...
    def __anext__(self) -> Awaitable[ConsumerRecord]: ...

class PeekedRecords:
    _peeked: list[ConsumerRecord]
    _index: int
    _settle_by: float
    def __iter__(self) -> Self: ...
    def __next__(self) -> ConsumerRecord: ...
