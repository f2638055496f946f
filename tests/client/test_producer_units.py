"""The producer's parts on their own: metadata lists, batch splitting, restamping, memory."""

from __future__ import annotations

import asyncio

import pytest

from kayak.client.producer.accumulator import BufferMemory
from kayak.client.producer.batch import PartitionQueue, ProducerBatch, _restamp
from kayak.client.producer.record_metadata import RecordMetadata, RecordMetadataList, StoredRun
from kayak.client.producer.record_sizes import chunk_ends
from kayak.errors import KafkaTimeoutError
from kayak.protocol.records import (
    build_record_batch,
    iter_batches,
    read_batch_header,
    validate_batch,
)
from tests.client.test_producer_support import run


def test_metadata_list_of_consecutive_runs() -> None:
    runs = [
        StoredRun(range(3, 5), 1, 100, 7),
        StoredRun(range(0, 3), 0, 10, 7),
        StoredRun(range(5, 6), 2, -1, 8),  # acks=0: offset unknown
    ]
    results = RecordMetadataList("t", runs, 6)
    expected = [
        RecordMetadata("t", 0, 10, 7),
        RecordMetadata("t", 0, 11, 7),
        RecordMetadata("t", 0, 12, 7),
        RecordMetadata("t", 1, 100, 7),
        RecordMetadata("t", 1, 101, 7),
        RecordMetadata("t", 2, -1, 8),
    ]
    assert list(results) == expected
    assert results == expected
    assert [results[i] for i in range(6)] == expected
    assert results[-1] == expected[-1]
    assert results[1:4] == expected[1:4]
    assert results.offsets() == [10, 11, 12, 100, 101, -1]
    assert len(results) == 6
    with pytest.raises(IndexError):
        results[6]
    assert results != expected[:5]


def test_metadata_list_of_interleaved_keyed_records() -> None:
    runs = [StoredRun([0, 2, 4], 0, 50, 1), StoredRun([1, 3], 1, 70, 1)]
    results = RecordMetadataList("t", runs, 5)
    assert [(m.partition, m.offset) for m in results] == [
        (0, 50),
        (1, 70),
        (0, 51),
        (1, 71),
        (0, 52),
    ]
    assert results[3] == RecordMetadata("t", 1, 71, 1)


@pytest.mark.parametrize(
    ("sizes", "limit", "ends"),
    [
        ([10] * 5, 1000, [5]),
        ([100] * 10, 61 + 300, [3, 6, 9, 10]),
        ([500, 10, 10], 61 + 100, [1, 3]),  # a record too big for a batch gets its own
        ([10, 500, 10], 61 + 100, [1, 2, 3]),
    ],
)
def test_records_are_cut_into_batches_at_batch_size(
    sizes: list[int], limit: int, ends: list[int]
) -> None:
    assert chunk_ends(sizes, limit) == ends


def test_restamping_a_batch_keeps_it_valid() -> None:
    original = build_record_batch([b"a", b"bb", None], keys=[b"k", None, b"x"], producer_id=5,
                                  producer_epoch=0, base_sequence=10)  # fmt: skip
    restamped = _restamp(original, 9, 3, 0)
    header = read_batch_header(restamped, 0)
    assert header is not None
    validate_batch(header, restamped)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 3, 0)
    assert [r.value for r in next(iter(iter_batches(restamped)))] == [b"a", b"bb", None]


def test_retried_batches_go_back_in_creation_order() -> None:
    queue = PartitionQueue("t", 0)
    batches = [ProducerBatch(queue, order, 0.0, 1.0, 0) for order in range(1, 6)]
    queue.batches.extend([batches[4]])
    for batch in (batches[2], batches[0], batches[3], batches[1]):
        queue.requeue(batch)
    assert [b.order for b in queue.batches] == [1, 2, 3, 4, 5]


def test_buffer_memory_waits_in_turn_and_times_out() -> None:
    async def main() -> None:
        memory = BufferMemory(100)
        await memory.reserve(80, 1)
        big = asyncio.ensure_future(memory.reserve(50, 5))
        small = asyncio.ensure_future(memory.reserve(10, 5))
        await asyncio.sleep(0.01)
        assert not big.done() and not small.done()  # small waits behind big (FIFO)
        memory.release(80)
        await asyncio.gather(big, small)
        assert memory.used == 60
        with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
            await memory.reserve(50, 0.05)
        assert not memory.waiters
        waiting = asyncio.ensure_future(memory.reserve(50, 5))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        memory.release(60)
        assert memory.used == 0 and not memory.waiters

    run(main())
