"""Named points in a transaction's completion where a test may have the broker killed.

``KAYAK_TXN_CRASH_AT=<point>`` in a broker's environment makes it SIGKILL itself at that
point: a real ``kill -9`` at an exact step (decision durable, markers appended, markers
durable, completion durable), which a test cannot time from outside. Unset, each point costs
one comparison.
"""

from __future__ import annotations

import os
import signal

PREPARED = "prepared"  # PrepareCommit/PrepareAbort durable, no marker written
MARKERS_APPENDED = "markers-appended"  # every marker appended, none known durable
MARKERS_DURABLE = "markers-durable"  # every marker durable, completion not written
COMPLETED = "completed"  # CompleteCommit/CompleteAbort durable, EndTxn not answered
POINTS = (PREPARED, MARKERS_APPENDED, MARKERS_DURABLE, COMPLETED)

_ARMED = os.environ.get("KAYAK_TXN_CRASH_AT")


def crash_point(name: str) -> None:
    if name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
