"""Which per-record consumer code runs: the C extension ``_next_record``, or the Python
reference code.

``kayak.client.consumer._next_record`` is an optional C extension built by ``pip install``
(the build skips it when no compiler is present). When it imports, ``async for record in
consumer`` takes the next record of the batch being handed out in C (:mod:`.polling`'s
``__anext__`` is the reference, and takes every case the C code declines). Set
``KAYAK_PURE_PYTHON=1`` before importing kayak to force the Python code.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kayak.client.consumer._next_record import PeekedRecords, RecordIterator

__all__ = ["NextRecordCode", "next_record"]


class NextRecordCode(Protocol):
    """What ``_next_record`` provides (the module itself satisfies this protocol)."""

    RecordIterator: type[RecordIterator]
    PeekedRecords: type[PeekedRecords]

    def configure(
        self, completed_fetch: type, partition_state: type, record: type, poll_state: type, /
    ) -> None:
        """Tell the C code the classes whose slots it reads."""


def _load() -> NextRecordCode | None:
    if os.environ.get("KAYAK_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from kayak.client.consumer import _next_record
    except ImportError:  # not built (no compiler at install time): the Python code runs
        return None
    return _next_record


next_record = _load()
"""The C extension module, or None when the Python code runs."""
