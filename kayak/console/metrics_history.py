"""The broker's counters sampled for the console's charts: totals, rates between two samples,
and :class:`BrokerMetricsHistory`, the bounded ring of rates a task on the broker's loop keeps.

Apart from the page that draws them (:mod:`kayak.console.broker_metrics`), so that the
console's shared state (:mod:`kayak.console.view`) can hold a history without importing pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from kayak.console.charts import SampleRing

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 5.0
WINDOW_S = 15 * 60  # what the charts show


@dataclass(frozen=True)
class BrokerTotals:
    """Counters summed over APIs, topics and shards, at one moment."""

    at: float  # monotonic seconds
    requests: float
    bytes_in: float
    bytes_out: float
    fsync_seconds: float
    fsyncs: float


@dataclass(frozen=True)
class BrokerPoint:
    """Rates between two samples (None: nothing to divide, e.g. no fsync meanwhile)."""

    requests_per_s: float
    bytes_in_per_s: float
    bytes_out_per_s: float
    fsync_mean_s: float | None


_SUMMED = {
    "kayak_requests_total": "requests",
    "kayak_topic_bytes_in_total": "bytes_in",
    "kayak_topic_bytes_out_total": "bytes_out",
    "kayak_log_flush_time_seconds_sum": "fsync_seconds",
    "kayak_log_flush_time_seconds_count": "fsyncs",
}


def read_totals(registry: CollectorRegistry) -> BrokerTotals:
    """The sums the charts need, from one collection of ``registry``."""
    sums = dict.fromkeys(_SUMMED.values(), 0.0)
    for family in registry.collect():
        for sample in family.samples:
            key = _SUMMED.get(sample.name)
            if key is not None:
                sums[key] += sample.value
    return BrokerTotals(at=time.monotonic(), **sums)


def rates(earlier: BrokerTotals, later: BrokerTotals) -> BrokerPoint:
    elapsed = max(later.at - earlier.at, 1e-9)
    fsyncs = later.fsyncs - earlier.fsyncs
    return BrokerPoint(
        requests_per_s=max(0.0, later.requests - earlier.requests) / elapsed,
        bytes_in_per_s=max(0.0, later.bytes_in - earlier.bytes_in) / elapsed,
        bytes_out_per_s=max(0.0, later.bytes_out - earlier.bytes_out) / elapsed,
        fsync_mean_s=(later.fsync_seconds - earlier.fsync_seconds) / fsyncs if fsyncs > 0 else None,
    )


class BrokerMetricsHistory:
    """Rates of the broker's counters over the last :data:`WINDOW_S`, sampled every
    ``interval_s`` by a task on the broker's loop while the web server runs."""

    def __init__(
        self, registry: Callable[[], CollectorRegistry | None], *,
        interval_s: float = SAMPLE_INTERVAL_S, window_s: float = WINDOW_S,
    ) -> None:  # fmt: skip
        self._registry = registry
        self.interval_s = interval_s
        self.ring: SampleRing[BrokerPoint] = SampleRing(max(2, round(window_s / interval_s)))
        self._last: BrokerTotals | None = None
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        """Take one sample (the first only sets the starting point)."""
        registry = self._registry()
        if registry is None:  # metrics off, or the broker not started yet
            return
        totals = read_totals(registry)
        if self._last is not None:
            self.ring.add(rates(self._last, totals))
        self._last = totals

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a failed sample leaves a gap, not a dead sampler
                log.debug("console: metrics sample failed", exc_info=True)
            await asyncio.sleep(self.interval_s)
