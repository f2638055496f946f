"""kayak's asyncio producer.

::

    from kayak.client.producer import Producer

    async with Producer({"bootstrap.servers": "localhost:9092"}) as producer:
        metadata = await producer.send_and_wait("events", b"hello")

Modules, by data path: :mod:`~.producer` (the API), :mod:`~.append` (``produce``, and the
append ``send`` shares with it), :mod:`~.threaded` (the sync facade's ``produce``/``poll``),
:mod:`~.record_sizes` (a record's type
checks and size estimate), :mod:`~.send_batch` (``send_batch``: many records queued as closed
batches), :mod:`~.accumulator` (records gathered into per-partition batches,
``buffer.memory``), :mod:`~.batch` (a partition's batches and their sequence state),
:mod:`~.sender` (one produce loop per broker, retries, metadata refresh), :mod:`~.idempotence`
(producer id, epoch and sequences), :mod:`~.transactions` and :mod:`~.txn_coordinator` (the
transactional producer: its states and its requests to the coordinators),
:mod:`~.record_metadata` (what ``send`` resolves to), :mod:`~.errors` (``ProducerClosedError``,
``BufferFullError``).
"""

from __future__ import annotations

from kayak.client.producer.producer import BufferFullError, Headers, Producer, ProducerClosedError
from kayak.client.producer.record_metadata import (
    UNKNOWN_OFFSET,
    RecordMetadata,
    RecordMetadataList,
)

__all__ = [
    "UNKNOWN_OFFSET",
    "BufferFullError",
    "Headers",
    "Producer",
    "ProducerClosedError",
    "RecordMetadata",
    "RecordMetadataList",
]
