"""The broker's metrics as small charts: request rate, bytes in and out, fsync latency.

:class:`BrokerMetricsHistory` samples the registry the broker serves at ``/metrics`` every
few seconds on the broker's event loop (the same collection a Prometheus scrape does) and
keeps rates between consecutive samples in a bounded ring; the "Pipeline & metrics" page
draws them (:mod:`kayak.console.charts`) and links to a pipeline's own page when one runs
on this broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from kayak.console.charts import SampleRing, series_chart, span
from kayak.console.html import Html, definition_list, join, link, render
from kayak.console.view import View, page_handler

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 5.0
WINDOW_S = 15 * 60  # what the charts show
REFRESH_S = 10
# A running pipeline with an embedded broker leaves its page's address here, in the
# broker's data directory (kayak.console.pipeline writes it, removes it when it stops).
PIPELINE_LINK_FILE = "pipeline-console.json"


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


def published_registry(config: BrokerConfig) -> Callable[[], CollectorRegistry | None]:
    """What the broker serves at ``/metrics`` for ``config`` (found when sampled: the broker
    publishes it after the web server is built)."""
    from kayak.broker.metrics import endpoint

    # endpoint keeps the published registries private; it has no public accessor yet.
    return lambda: endpoint.published(config)


def pipeline_link_reader(data_dir: Path) -> Callable[[], str | None]:
    """The address of the page of a pipeline running on this broker, if one runs."""
    path = data_dir / PIPELINE_LINK_FILE

    def read() -> str | None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            url, pid = str(document["url"]), int(document["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return url if _alive(pid) else None

    return read


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def render_charts(history: BrokerMetricsHistory) -> Html:
    points = history.ring.samples()
    capacity = history.ring.capacity

    chart = functools.partial(series_chart, capacity)

    return render(
        '<h2>Broker metrics</h2><p class="note">The last {}, sampled every {:g} s '
        "(the page reloads every {} s); all of them at {}.</p>"
        '<div class="charts">{}</div>',
        span(capacity * history.interval_s), history.interval_s, REFRESH_S,
        link("/metrics", "/metrics"),
        join([
            chart("chart-requests", "Requests", "/s",
                  ("requests", [p.requests_per_s for p in points])),
            chart("chart-bytes", "Bytes", "B/s",
                  ("in", [p.bytes_in_per_s for p in points]),
                  ("out", [p.bytes_out_per_s for p in points])),
            chart("chart-fsync", "fsync latency (mean)", "s",
                  ("fsync", [p.fsync_mean_s for p in points])),
        ]),
    )  # fmt: skip


@page_handler("pipeline")
async def metrics_page(view: View) -> web.StreamResponse:
    """The broker's metrics as charts, and the running pipeline's page when there is one."""
    state = view.state
    parts: list[Html] = [Html("<h1>Pipeline &amp; metrics</h1>")]
    pipeline_url = state.pipeline_link() if state.pipeline_link is not None else None
    if pipeline_url:
        parts.append(render('<p id="pipeline-link">A pipeline runs on this broker: {} (its '
                            "tables, lag, latency and last verification).</p>",
                            link(pipeline_url, pipeline_url)))  # fmt: skip
    else:
        parts.append(Html(
            '<p class="note" id="pipeline-link">No pipeline runs on this broker. '
            "<code>kayak pipeline run</code> serves its own page and <code>/metrics</code> "
            "(its address is printed at start, see <code>--metrics-port</code>).</p>"
        ))  # fmt: skip
    history = state.metrics_history
    if history is None:
        parts.append(render('<p class="note">Metrics are not sampled here: see {}.</p>',
                            link("/metrics", "/metrics")))  # fmt: skip
    else:
        if len(history.ring) < 2:
            parts.append(render("<p class=\"note\">Collecting samples (one every {:g} s).</p>",
                                history.interval_s))  # fmt: skip
        parts.append(render_charts(history))
        facts = definition_list({"Samples kept": f"{len(history.ring)} of {history.ring.capacity}"})
        parts.append(facts)
    return view.html("Pipeline & metrics", join(parts), section="pipeline", refresh_s=REFRESH_S)
