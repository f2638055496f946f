"""``PeekedRecords``, the sync facade's per-record handout: the C type in ``_next_record``
behaves as its Python reference in ``iteration.py``, down to when it asks for a refill."""

from __future__ import annotations

import gc
import os
import time
import weakref

import pytest

from kayak.client.consumer import iteration
from kayak.client.consumer.native import next_record

IMPLEMENTATIONS = [pytest.param(iteration.PeekedRecords, id="python")]
if next_record is not None:
    IMPLEMENTATIONS.append(pytest.param(next_record.PeekedRecords, id="c"))

# make test builds the extension (pip install -e .); under KAYAK_PURE_PYTHON=1, which selects
# the Python code on purpose, the tests of the C type alone have nothing to test.
c_only = pytest.mark.skipif(
    os.environ.get("KAYAK_PURE_PYTHON", "") not in ("", "0"),
    reason="KAYAK_PURE_PYTHON=1 selects the Python reference alone",
)


@c_only
def test_the_c_type_is_built() -> None:
    """``make test`` builds the extension: its absence would silently test Python twice."""
    assert next_record is not None
    assert iteration.Handout.__mro__[1] is next_record.PeekedRecords


def handout(base: type, batches: list[list[object]], settle_in: float = 60.0) -> object:
    """A subclass whose ``_refill`` hands out the next batch (as the facade's does), and
    counts its calls; ``StopIteration`` once the batches run out."""

    class Batches(base):  # type: ignore[misc, valid-type]
        __slots__ = ("__weakref__", "batches", "refills")

        def __init__(self) -> None:
            self.refills = 0
            self.batches = list(batches)
            self._peeked = []
            self._index = 0
            self._settle_by = 0.0

        def _refill(self) -> object:
            self.refills += 1
            if not self.batches:
                raise StopIteration
            self._peeked, self._index = self.batches.pop(0), 1
            self._settle_by = time.monotonic() + settle_in
            return self._peeked[0]

    return Batches()


@pytest.mark.parametrize("base", IMPLEMENTATIONS)
def test_hands_out_every_record_in_order_refilling_once_per_batch(base: type) -> None:
    records = handout(base, [[1, 2, 3], [4], [5, 6]])
    assert list(records) == [1, 2, 3, 4, 5, 6]  # type: ignore[call-overload]
    assert records.refills == 4  # type: ignore[attr-defined]  # three batches, then the end
    assert records._index == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("base", IMPLEMENTATIONS)
def test_a_passed_settle_deadline_refills_before_the_batch_runs_out(base: type) -> None:
    records = handout(base, [[1, 2, 3], [4, 5]], settle_in=-1.0)
    assert next(records) == 1  # type: ignore[call-overload]
    assert next(records) == 4  # type: ignore[call-overload]  # 2 and 3 are left peeked
    assert records.refills == 2  # type: ignore[attr-defined]
    assert records._index == 1  # type: ignore[attr-defined]


@c_only
def test_the_c_fields_read_back_as_written_and_refuse_other_types() -> None:
    assert next_record is not None
    records = handout(next_record.PeekedRecords, [])
    records._peeked, records._index, records._settle_by = [7, 8], 1, 12.5  # type: ignore[attr-defined]
    assert (records._peeked, records._index, records._settle_by) == ([7, 8], 1, 12.5)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        records._index = "one"  # type: ignore[attr-defined]


@pytest.mark.parametrize("base", IMPLEMENTATIONS)
def test_an_error_from_refill_reaches_the_caller(base: type) -> None:
    class Failing(base):  # type: ignore[misc, valid-type]
        def _refill(self) -> object:
            raise ConnectionError("the loop thread is gone")

    records = Failing()
    records._peeked, records._index, records._settle_by = [], 0, 0.0
    with pytest.raises(ConnectionError, match="loop thread"):
        next(records)


@c_only
def test_a_cycle_through_the_peeked_list_is_collected() -> None:
    assert next_record is not None
    records = handout(next_record.PeekedRecords, [])
    records._peeked = [records]  # type: ignore[attr-defined]
    gone = weakref.ref(records)
    del records
    gc.collect()
    assert gone() is None


def test_the_python_base_without_a_refill_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="_refill"):
        iteration.PeekedRecords()  # type: ignore[abstract]


@c_only
def test_the_c_base_without_a_refill_says_so() -> None:
    assert next_record is not None
    records = next_record.PeekedRecords()
    with pytest.raises(AttributeError, match="_refill"):
        next(records)
