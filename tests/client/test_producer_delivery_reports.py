"""A stored batch's delivery reports in C (``_per_record.deliver``) against the Python
reference (``ProducerBatch._metadata`` and the report loops of ``ProducerBatch.succeed``)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from kayak.client.producer import batch as batch_module
from kayak.client.producer.native import per_record
from kayak.client.producer.record_metadata import RecordMetadata

pytestmark = pytest.mark.skipif(per_record is None, reason="KAYAK_PURE_PYTHON: no C reports")


def _deliver(set_result: Any, reports: list[Any], on_error: Any, **batch: Any) -> None:
    assert per_record is not None
    per_record.deliver(
        set_result, reports, on_error, RecordMetadata, len(reports), batch.get("topic", "t"),
        batch.get("partition", 3), batch.get("base_offset", 100), batch.get("positions"),
        batch.get("stamps"), batch.get("stamp", 7),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("base_offset", "positions", "stamps", "stamp"),
    [
        (100, None, None, 7),  # every record reported, one timestamp
        (100, [0, 2, 5], [10, 11, 12, 13, 14, 15], 7),  # some records, their own timestamps
        (-1, [1, 4], None, 9),  # acks=0: offsets unknown
    ],
)
def test_callbacks_get_what_the_python_reference_makes(
    base_offset: int, positions: list[int] | None, stamps: list[int] | None, stamp: int
) -> None:
    count = 5 if positions is None else len(positions)
    seen: list[tuple[Any, RecordMetadata]] = []
    callbacks = [lambda error, metadata: seen.append((error, metadata))] * count
    _deliver(
        None, callbacks, pytest.fail, base_offset=base_offset, positions=positions,
        stamps=stamps, stamp=stamp,
    )  # fmt: skip

    class Reference:
        report_positions, timestamps, timestamp = positions, stamps, stamp
        queue = type("Queue", (), {"topic": "t", "partition": 3})

    original = batch_module.per_record
    batch_module.per_record = None  # the Python reference of _metadata
    try:
        expected = list(
            batch_module.ProducerBatch._metadata(Reference, count, base_offset, -1)  # type: ignore[arg-type]
        )
    finally:
        batch_module.per_record = original
    assert seen == [(None, metadata) for metadata in expected]
    assert all(type(metadata) is RecordMetadata for _, metadata in seen)


def test_futures_get_their_results_and_a_cancelled_one_is_passed_over() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(4)]
        futures[1].cancel()
        errors: list[Exception] = []
        _deliver(asyncio.Future.set_result, futures, errors.append, base_offset=40)
        assert [type(error) for error in errors] == [asyncio.InvalidStateError]
        assert [f.result().offset for i, f in enumerate(futures) if i != 1] == [40, 42, 43]

    asyncio.run(main())


def test_a_raising_callback_goes_to_on_error_and_the_rest_are_called() -> None:
    called: list[int] = []
    errors: list[Exception] = []

    def callback(error: BaseException | None, metadata: RecordMetadata) -> None:
        called.append(metadata.offset)
        if metadata.offset % 2:
            raise ValueError(f"at {metadata.offset}")

    _deliver(None, [callback] * 5, errors.append, base_offset=0)
    assert called == [0, 1, 2, 3, 4]
    assert [str(error) for error in errors] == ["at 1", "at 3"]
    assert all(error.__traceback__ is not None for error in errors)


def test_an_exception_not_an_error_ends_the_delivery() -> None:
    called: list[int] = []

    def callback(error: BaseException | None, metadata: RecordMetadata) -> None:
        called.append(metadata.offset)
        if metadata.offset == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _deliver(None, [callback] * 5, pytest.fail, base_offset=0)
    assert called == [0, 1, 2]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="reports is a list of count items"):
        assert per_record is not None
        per_record.deliver(
            None, [print], print, RecordMetadata, 2, "t", 0, 0, None, None, 0
        )  # fmt: skip
    with pytest.raises(IndexError, match="a record without a timestamp"):
        _deliver(None, [print], pytest.fail, positions=[9], stamps=[1])


def test_metadata_a_callback_does_not_keep_is_freed_at_once() -> None:
    """The collector's count of young objects stays flat over a batch's reports: no
    collection passes set off by a thousand metadata tuples alive at once."""
    kept: list[int] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        before = gc.get_count()[0]
        _deliver(None, [lambda e, m: kept.append(m.offset)] * 5000, pytest.fail, base_offset=0)
        grown = gc.get_count()[0] - before
    finally:
        if was_enabled:
            gc.enable()
    assert kept == list(range(5000))
    assert grown < 50
